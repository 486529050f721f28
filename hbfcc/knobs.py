"""Every environment variable hbfcc reads, in one place (DESIGN.md §6).

Knobs are read on each call (not cached at import), because the ptxas shim and the nvcc wrapper
hand some of them to child processes.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from hbfcommon.artifact import cache_dir as artifact_cache_dir
from hbfcommon.env import env_bool, env_int
from hbfcommon.env import env_path as env_path_var
from hbfcommon.errors import ConfigError

# Internal: set by `hbfcc` (the nvcc wrapper) for the ptxas shim that nvcc runs.
ENV_SINK = "HBFCC_ARTIFACT_SINK"
# Internal: set by the shadow toolkit's shim (hbfcc/shadow.py): this ptxas step is one of nvcc's, so
# the .ptx (nvcc's intermediate, embedded by fatbinary) is rewritten in place.
ENV_NVCC_STEP = "HBFCC_NVCC_STEP"

SIDECAR_CHOICES = ("auto", "1", "0")
LINK_CHOICES = ("whole", "separate")
SEPARATE_CAP_RANGE = (24, 255)     # HBFCC_SEPARATE_CAP as an integer: a .maxnreg ptxas takes
CPASYNC_WINDOW_DEFAULT = 2
DEFER_CHOICES = ("0", "1", "rewrite")   # HBFCC_DEFER


@dataclass(frozen=True)
class Knobs:
    real_ptxas: Optional[str]      # HBFCC_REAL_PTXAS: the ptxas hbfcc-ptxas calls
    real_nvcc: Optional[str]       # HBFCC_REAL_NVCC: the nvcc hbfcc wraps (CUDACXX mode)
    helper_ptx: Optional[str]      # HBFCC_HELPER_PTX: the helper PTX module to link
    eidola_helper_ptx: Optional[str]  # HBFCC_EIDOLA_HELPER_PTX: the eidola helper (flags pass) to link
    cache_dir: Path                # HBFCC_CACHE_DIR: shadow toolkits (default ~/.cache/hbfcc)
    artifact_dir: Optional[Path]   # HBFCC_ARTIFACT_DIR: store of artifacts by original PTX sha
    dump_dir: Optional[Path]       # HBFCC_DUMP_DIR: dump every stage of every rewrite here
    baseline: bool                 # HBFCC_BASELINE (default 1): ptxas -v on the original too
    cpasync_window: int            # HBFCC_CPASYNC_WINDOW (default 2): cp.async group registers
    sink: Optional[Path]           # HBFCC_ARTIFACT_SINK (internal, set by the nvcc wrapper)
    log_level: str                 # HBFCC_LOG (default WARNING)
    passes: tuple[str, ...] = ("timing",)  # HBFCC_PASSES (default timing): see parse_passes
    occupancy_guard: bool = False  # HBFCC_OCCUPANCY_GUARD (default 0): hbfcc/occupancy.py
    hoist_issues: bool = True      # HBFCC_HOIST_ISSUES (default 1): load issues hoisted (passes/timing.py)
    inline_issues: bool = True     # HBFCC_INLINE_ISSUE (default 1): the inline issue path in entries
    group_issues: bool = True      # HBFCC_GROUP_ISSUES (default 1): adjacent inline load issues as one group
    hoist_loads: bool = True       # HBFCC_HOIST_LOADS (default 1): loads move with their hoisted issue
    fast_groups: bool = True       # HBFCC_FAST_GROUPS (default 1): a group not served inline calls __hb_issue_group
    merge_loads: bool = True       # HBFCC_MERGE_LOADS (default 1): adjacent loads of one span as one inline request
    inline_multi: bool = True      # HBFCC_INLINE_MULTI (default 1): inline sites re-check the descriptor's ranges
    inline_live: bool = True       # HBFCC_INLINE_LIVE (default 1): inline counters flushed at every until point
    loads_first: str = "0"         # HBFCC_LOADS_FIRST (0 | 1 | all): a group's moved loads before its timing code
    early_clock: str = "0"         # HBFCC_EARLY_CLOCK (0 | 1 | auto; default 0): an issue group reads its clock before
                                   # its own setup; auto: in HBFCC_FULL_WARP=auto's second build (hbfcc/cli.py)
    prefetch_next: int = 1         # HBFCC_PREFETCH_NEXT (default 1): a loop's next N iterations' loads into L2
    prefetch_group: str = "0"      # HBFCC_PREFETCH_GROUP (0 | 1 | auto; default 0): an issue group's loads into L2
                                   # before its code; auto: in HBFCC_FULL_WARP=auto's second build (hbfcc/cli.py)
    full_warp: str = "auto"        # HBFCC_FULL_WARP (0 | 1 | all | auto): full-mask collectives where a whole warp runs a path
    share_until: bool = True       # HBFCC_SHARE_UNTIL (default 1): an until asked for loads serves stores too, and back
    inline_time: bool = False      # HBFCC_INLINE_TIME (default 0): the served inline paths' own time (inline_ns)
    call_isolation: bool = False   # HBFCC_CALL_ISOLATION (default 0): registers live across helper calls saved to .local
    launch_bound: bool = True      # HBFCC_LAUNCH_BOUND (default 1): .maxntid keeps plain blocks launchable
    native_scope: bool = False     # HBFCC_NATIVE_SCOPE (default 0 since stop 48): the native copy declares its own registers
    native_entry: bool = True      # HBFCC_NATIVE_ENTRY (default 1 since stop 49, an H100): <k>__hbnat, the untouched
                                   # kernel as its own .entry (hbfcc/native_entry.py)
    sidecar: str = "auto"          # HBFCC_SIDECAR (auto|1|0): hbfcc-ptxas's <output>.hbfcc.json
    nvcc_step: bool = False        # HBFCC_NVCC_STEP (internal, set by the shadow toolkit's shim)
    link_prune: bool = True        # HBFCC_LINK_PRUNE (default 1): link only the helper functions a module reaches
    link: str = "whole"            # HBFCC_LINK (whole|separate): helpers linked as PTX, or a cached object + nvlink
    separate_cap: Union[None, int, str] = None  # HBFCC_SEPARATE_CAP (plain|body|N): None = each entry's plain
                                   # registers, "body" = its rewritten body's own need (hbfcc/seplink.py), or N
    ptxas_threads: int = 0         # HBFCC_PTXAS_THREADS (auto|N): ptxas -split-compile for a rewritten module; 0 = auto
    defer: str = "0"               # HBFCC_DEFER (0|1|rewrite): hbfcc-ptxas assembles the original; the rewrite's build
                                   # later (1), or the rewrite itself later too (rewrite): hbfcommon/deferred.py
    jit: bool = False              # HBFCC_JIT (default 0): the nvcc wrapper builds PTX only (hbfcc/nvcc_targets.py);
                                   # the driver JIT-compiles the rewritten PTX at the first load


def load() -> Knobs:
    cache = artifact_cache_dir()
    return Knobs(
        real_ptxas=os.environ.get("HBFCC_REAL_PTXAS") or None,
        real_nvcc=os.environ.get("HBFCC_REAL_NVCC") or None,
        helper_ptx=os.environ.get("HBFCC_HELPER_PTX") or None,
        eidola_helper_ptx=os.environ.get("HBFCC_EIDOLA_HELPER_PTX") or None,
        cache_dir=Path(cache),
        artifact_dir=env_path_var("HBFCC_ARTIFACT_DIR"),
        dump_dir=env_path_var("HBFCC_DUMP_DIR"),
        baseline=env_bool("HBFCC_BASELINE", True),
        cpasync_window=env_int("HBFCC_CPASYNC_WINDOW", CPASYNC_WINDOW_DEFAULT, 2, 64),
        sink=env_path_var(ENV_SINK),
        log_level=os.environ.get("HBFCC_LOG", "WARNING").upper(),
        passes=parse_passes(os.environ.get("HBFCC_PASSES"), "HBFCC_PASSES"),
        occupancy_guard=env_bool("HBFCC_OCCUPANCY_GUARD", False),
        hoist_issues=env_bool("HBFCC_HOIST_ISSUES", True),
        inline_issues=env_bool("HBFCC_INLINE_ISSUE", True),
        group_issues=env_bool("HBFCC_GROUP_ISSUES", True),
        hoist_loads=env_bool("HBFCC_HOIST_LOADS", True),
        fast_groups=env_bool("HBFCC_FAST_GROUPS", True),
        merge_loads=env_bool("HBFCC_MERGE_LOADS", True),
        inline_multi=env_bool("HBFCC_INLINE_MULTI", True),
        inline_live=env_bool("HBFCC_INLINE_LIVE", True),
        share_until=env_bool("HBFCC_SHARE_UNTIL", True),
        loads_first=_choice("HBFCC_LOADS_FIRST", "0", GROUP_SCOPE_CHOICES),
        full_warp=_choice("HBFCC_FULL_WARP", "auto", FULL_WARP_CHOICES),
        early_clock=_choice("HBFCC_EARLY_CLOCK", "0", VARIANT_CHOICES),
        prefetch_next=env_int("HBFCC_PREFETCH_NEXT", 1, 0, PREFETCH_NEXT_MAX),
        prefetch_group=_choice("HBFCC_PREFETCH_GROUP", "0", VARIANT_CHOICES),
        inline_time=env_bool("HBFCC_INLINE_TIME", False),
        call_isolation=env_bool("HBFCC_CALL_ISOLATION", False),
        launch_bound=env_bool("HBFCC_LAUNCH_BOUND", True),
        native_scope=env_bool("HBFCC_NATIVE_SCOPE", False),
        native_entry=env_bool("HBFCC_NATIVE_ENTRY", True),
        sidecar=_choice("HBFCC_SIDECAR", "auto", SIDECAR_CHOICES),
        nvcc_step=env_bool(ENV_NVCC_STEP, False),
        link_prune=env_bool("HBFCC_LINK_PRUNE", True),
        link=_choice("HBFCC_LINK", "whole", LINK_CHOICES),
        separate_cap=parse_separate_cap(os.environ.get("HBFCC_SEPARATE_CAP")),
        defer=_choice("HBFCC_DEFER", "0", DEFER_CHOICES),
        ptxas_threads=parse_ptxas_threads(os.environ.get("HBFCC_PTXAS_THREADS")),
        jit=env_bool("HBFCC_JIT", False),
    )


PTXAS_THREADS_MAX = 256


def parse_ptxas_threads(v: Optional[str], variable: str = "HBFCC_PTXAS_THREADS") -> int:
    """HBFCC_PTXAS_THREADS: ``auto`` (default; 0) or a thread count in [1, PTXAS_THREADS_MAX] (1: no
    ``-split-compile``, ptxas as the caller ran it)."""
    if v is None or v.strip() == "" or v.strip().lower() == "auto":
        return 0
    try:
        n = int(v.strip(), 0)
    except ValueError:
        n = 0
    if not 1 <= n <= PTXAS_THREADS_MAX:
        raise ConfigError(f"{variable} must be 'auto' or a thread count in [1, {PTXAS_THREADS_MAX}]",
                          variable=variable, value=v)
    return n


SEPARATE_CAP_BODY = "body"


def parse_separate_cap(v: Optional[str], variable: str = "HBFCC_SEPARATE_CAP") -> Union[None, int, str]:
    """HBFCC_SEPARATE_CAP: ``plain`` (default; None), ``body`` (:data:`SEPARATE_CAP_BODY`) or a register count in
    SEPARATE_CAP_RANGE."""
    if v is None or v.strip() == "" or v.strip().lower() == "plain":
        return None
    if v.strip().lower() == SEPARATE_CAP_BODY:
        return SEPARATE_CAP_BODY
    lo, hi = SEPARATE_CAP_RANGE
    try:
        n = int(v.strip(), 0)
    except ValueError:
        raise ConfigError(f"{variable} must be 'plain', 'body' or a register count in [{lo}, {hi}]",
                          variable=variable, value=v) from None
    if not lo <= n <= hi:
        raise ConfigError(f"{variable} must be 'plain', 'body' or a register count in [{lo}, {hi}]",
                          variable=variable, value=v)
    return n


# HBFCC_PREFETCH_NEXT: how many iterations ahead a loop's timed loads are prefetched into L2 (0: none)
PREFETCH_NEXT_MAX = 4
# HBFCC_LOADS_FIRST / HBFCC_FULL_WARP: off, issue groups of at most hbfcc.passes.timing.SMALL_GROUP_SITES sites (1),
# every group (all)
GROUP_SCOPE_CHOICES = ("0", "1", "all")
# HBFCC_FULL_WARP also takes auto: `1`, then `all` for each entry whose larger groups ptxas assembles with no more
# registers (a second ptxas run where an entry has a group of more than SMALL_GROUP_SITES sites; hbfcc/cli.py)
FULL_WARP_CHOICES = GROUP_SCOPE_CHOICES + ("auto",)
# HBFCC_PREFETCH_GROUP, HBFCC_EARLY_CLOCK: off, every group, or auto: the entries HBFCC_FULL_WARP=auto builds a second
# time get it in a third variant (`all` + every knob at auto), kept where ptxas gives no more registers (hbfcc/cli.py)
VARIANT_CHOICES = ("0", "1", "auto")


def _choice(variable: str, default: str, choices: tuple[str, ...]) -> str:
    v = (os.environ.get(variable) or default).strip().lower()
    if v not in choices:
        raise ConfigError(f"{variable} must be one of {', '.join(choices)}", variable=variable, value=v)
    return v


# (variable, default, meaning): what `hbfcc --help` / `hbfcc-ptxas --help` print (docs/hbfcc.md has
# the long form). Internal variables (ENV_SINK, ENV_NVCC_STEP) are not listed.
DOCS: tuple[tuple[str, str, str], ...] = (
    ("HBFCC_REAL_PTXAS", "unset", "the ptxas hbfcc-ptxas runs; unset: the one Triton would run "
     "(TRITON_PTXAS_PATH when it is not hbfcc-ptxas, else Triton's bundled ptxas), else ptxas on PATH"),
    ("HBFCC_REAL_NVCC", "nvcc on PATH", "the nvcc hbfcc wraps"),
    ("HBFCC_HELPER_PTX", "the direct build", "the helper PTX module to link (runtime_cuda/ptx: "
     "hbf_helpers.ptx, the direct build; hbf_helpers_lean.ptx by name)"),
    ("HBFCC_EIDOLA_HELPER_PTX", "runtime_cuda/ptx", "the eidola helper module (flags pass)"),
    ("HBFCC_PASSES", "timing", "pass selection: timing | timing,flags | timing,flags,mwait; + capacity"),
    ("HBFCC_CACHE_DIR", "~/.cache/hbfcc", "shadow toolkits (and the store's default home)"),
    ("HBFCC_ARTIFACT_DIR", "$HBFCC_CACHE_DIR/artifacts", "the artifact store (by original PTX sha256)"),
    ("HBFCC_SIDECAR", "auto", "hbfcc-ptxas writes <output>.hbfcc.json: 1 always, 0 never, auto unless "
     "the output is directly in the system temp directory (Triton's temp files)"),
    ("HBFCC_DUMP_DIR", "unset", "dump every stage of every rewrite here"),
    ("HBFCC_BASELINE", "1", "also run ptxas -v on the original PTX (register/spill delta)"),
    ("HBFCC_CPASYNC_WINDOW", "2", "cp.async group registers (2..64)"),
    ("HBFCC_HOIST_ISSUES", "1", "hoist load issues (0: each issue at its access)"),
    ("HBFCC_INLINE_ISSUE", "1", "emit the inline issue path in kernels (0: every access calls the helpers)"),
    ("HBFCC_GROUP_ISSUES", "1", "serve adjacent inline load issues as one group: one until check and warp vote "
     "(0: each site on its own)"),
    ("HBFCC_HOIST_LOADS", "1", "move a load with its hoisted issue where that is the same program (0: the issue only)"),
    ("HBFCC_FAST_GROUPS", "1", "an issue group not served inline (the fast source) is served by one "
     "__hb_issue_group call, its requests' model round trips overlapped (0: each site calls __hb_issue)"),
    ("HBFCC_MERGE_LOADS", "1", "adjacent plain global loads of an issue group whose addresses are one register plus "
     "constants within one read granule (a Triton masked tail's 8 scalar loads per 16 bytes) are counted as ONE "
     "inline request of their span, as the L1 serves them: one request, the span's granules, the members' bytes "
     "(docs/design.md \"Merged requests\"); a load's issue may follow the previous load's further up (0: each load "
     "its own request, the rewrite exactly as before)"),
    ("HBFCC_INLINE_MULTI", "1", "an inline site (or issue group) whose warp misses the descriptor's first range "
     "re-checks its 2..4 ranges (helper ABI 6, docs/design.md §3.3; 0: the first range only, as before: less code, "
     "less ptxas time, kernels over several ranges call the helpers)"),
    ("HBFCC_INLINE_LIVE", "1", "a thread's inline counters go to the kernel's counters also where it asks "
     "__hb_inline_until (about once per activity period), so the live activity sees a running kernel's inline "
     "requests (issue 17; 0: at its exit only, as before)"),
    ("HBFCC_SHARE_UNTIL", "1", "the until an inline site asks for (__hb_inline_until) serves both ops where the launch "
     "descriptor serves loads and stores inline: one ask per thread instead of one per op (0: each op asks for its own, "
     "as before)"),
    ("HBFCC_LOADS_FIRST", "0", "1: an issue group's loads (moved with their issues, HBFCC_HOIST_LOADS) are placed BEFORE "
     "most of the group's timing code instead of after it -- after its band check, clock read and until check (a "
     "thread's ask waits for every load in flight), before the rest -- in groups of at most 4 sites (all: every "
     "group), so they are in flight while it runs (the same values). Off by default: with the loads before all of "
     "the code (stop 53) the stream reduce ran x1.84 -> x1.60, but a load whose value is used long after its issue "
     "had its latency exposed at the group (+0.7 us per access on an H100); in this order (stop 54, H100) the reduce "
     "x1.74 -> x1.69, the consume probe +192 -> +224 ns: still off"),
    ("HBFCC_EARLY_CLOCK", "0", "1: an issue group reads %globaltimer (its requests' issue time) first, before hbfcc's "
     "own setup code (the sites' addresses and band checks, the group's first vote), where the program would issue its "
     "loads, instead of after that setup. H100, stop 53: a latency-bound stream's round 21.25 -> 21.09 us (Little x1.062 "
     "-> x1.055), but the unrolled reduce 168 -> 212 registers, x1.77 -> x2.34. auto: inside HBFCC_FULL_WARP=auto, "
     "with the entries built a second time, kept where ptxas gives no more registers or spills (one variant with "
     "HBFCC_PREFETCH_GROUP=auto: all+pg+ec)"),
    ("HBFCC_PREFETCH_NEXT", "1", "before a streaming loop's back-edge, an L2 prefetch (on the back-edge's own "
     "predicate) of each address its timed loads read in the next iteration, where the address is an induction "
     "register plus constants (Triton's loops): the instrumented loop keeps one iteration's loads in flight (its issue "
     "groups' branches keep ptxas from moving the next loads up), the plain build several; a prefetch carries no data "
     "to the program and is not timed. H100, stop 55: the stream reduce x1.73 -> x1.52, nothing else moved, the "
     "stress matrices all ended bit-identical. N (2-4): the next N iterations' addresses (the induction step "
     "known); 0: none"),
    ("HBFCC_PREFETCH_GROUP", "0", "1: an issue group first prefetches into L2 (prefetch.global.L2, each request's "
     "address, on its load's guard where the request's loads share one) what its loads will read, before its timing "
     "code, so the lines come from DRAM while that code runs -- what HBFCC_LOADS_FIRST wanted, without holding the loads' registers across the code "
     "or making an ask wait for them (a prefetch has no destination). The same values; a prefetch is not timed. "
     "auto: inside HBFCC_FULL_WARP=auto, each entry built a second time is also built with the prefetches and keeps "
     "them where ptxas gives no more registers or spills (H100: copies x1.29 -> x0.98; the unrolled reduce would "
     "lose 168 -> 212 registers, x2.02)"),
    ("HBFCC_FULL_WARP", "auto", "inline issue paths and issue groups get a second copy of their warp votes and "
     "shuffles for a warp whose 32 lanes all run them, with the constant full mask, which ptxas compiles without the "
     "per-lane mask check the group's own mask needs (REDUX/MATCH/BRA.DIV before every collective); any other group "
     "runs the checked copy. The same values. 1: single sites and groups of at most 4 sites; all: every group (faster "
     "on some kernels, more registers on others); auto: 1, then all for each kernel with larger groups that ptxas "
     "assembles with no more registers that way (a second ptxas run for such modules; H100, stop 54: the stream copies "
     "x1.38 -> x1.28, nothing slower; the default since stop 55, its second build beside the first; with HBFCC_DEFER=1 "
     "such a module keeps its original PTX and its deferred build runs hbfcc-ptxas eagerly, so it makes the same "
     "choice); 0: none, as before stop 53"),
    ("HBFCC_INLINE_TIME", "0", "1: each served inline path (an inline issue site, issue group or ready wait) reads "
     "%globaltimer again at its end and adds its time, on the warp's leader lane, to a register the flushes pass "
     "as inline_ns (helper ABI 8; the kernel counters' inline_ns, what overhead_ns is for the helpers); "
     "0: no extra register or instruction, the flushes pass 0. Off until a GPU has measured its cost"),
    ("HBFCC_CALL_ISOLATION", "0", "1: around each helper call the registers live across it are stored to a "
     "per-thread .local buffer (st.volatile) and reloaded after it (the call_isolation stage, hbfcc/passes/"
     "call_isolation.py): ptxas then no longer stacks the helper's registers on top of the kernel's live values "
     "(fewer registers, more blocks per SM; a store and a load per saved register on the cold call paths only). "
     "Off until a GPU has measured it"),
    ("HBFCC_LAUNCH_BOUND", "1", ".maxntid keeps the plain build's blocks launchable"),
    ("HBFCC_NATIVE_SCOPE", "0", "1: the native copy (code versioning, nothing registered) is a nested block that "
     "declares the function's registers again, so ptxas allocates it as the plain function (the Triton TMA kernels' "
     "accumulators zeroed as in plain); 0: the copy shares the instrumented version's registers. Off by default: on "
     "an H100 (stop 48) the own scope ran 2 of 3 TMA kernels slower in CUDA graphs (docs/RESULTS.md \"Stop 48\")"),
    ("HBFCC_NATIVE_ENTRY", "1", "1: each instrumented kernel with a native version gets a second .entry, "
     "<name>__hbnat, the original kernel untouched (no prologue, no helper, no static table): the runtime launches "
     "it for a host launch decided native (nothing registered, or arguments reaching no range; not a CUDA graph "
     "capture), recorded per kernel in the artifact (native_entry). On since stop 49: on an H100 the three Triton TMA kernels "
     "ran x0.996-1.002 of plain on host launches with nothing registered (instrumented entry x1.019-1.041), outputs "
     "bit-identical (docs/RESULTS.md \"Stop 49\"); 0: no second entry (cubins 1-8 percent smaller)"),
    ("HBFCC_OCCUPANCY_GUARD", "0", ".maxnreg keeps the plain build's blocks per SM"),
    ("HBFCC_LINK_PRUNE", "1", "link only the helper functions and globals a module reaches (0: the whole "
     "helper library, for comparison builds; same kernel code)"),
    ("HBFCC_LINK", "whole", "whole: the helpers linked into each module as PTX (ptxas assembles them with every "
     "module); separate: the module assembled with -c, the helpers as one cached object (per helper, cap, "
     "ptxas, arch) under a register cap, nvlink'd into the cubin (sm_XX cubin outputs only; else whole, "
     "with a warning). Slower than whole on the device, and it has hung: not for measurements"),
    ("HBFCC_SEPARATE_CAP", "plain", "separate link: each instrumented entry's .maxnreg; plain: its plain "
     "build's registers, at least 64, rounded up to 8; body: its rewritten body's own need (the rewrite assembled "
     "with do-nothing helpers: one more ptxas run per build), rounded up to 8, at least 24; or a register count "
     "(24..255). The helper object is assembled under the smallest entry cap of the module"),
    ("HBFCC_DEFER", "0", "1: deferred instrumentation (hbfcc-ptxas): rewrite and record at compile time, store the "
     "rewritten PTX in the artifact store, but assemble only the ORIGINAL PTX (the caller gets the plain cubin); "
     "the instrumented cubin is assembled when a kernel is loaded in an attached session (runtime_cuda's Triton "
     "hooks) or by `hbfcc prebuild`, cached by content. rewrite: the rewrite and the admission record are "
     "deferred too (the compile only keeps the original PTX: no NOT-admitted warning at compile time; the "
     "build runs hbfcc-ptxas). Plain sm_XX cubin builds with -o only; else eager, logged"),
    ("HBFCC_PTXAS_THREADS", "auto", "threads ptxas may use for a REWRITTEN module (-split-compile N, added unless "
     "the caller passed -split-compile itself): the helpers are assembled again for every kernel, and the kernels "
     "assemble in parallel; the machine code is identical (only the cubin's tool note records the option). auto: the "
     "CPUs this process may run on, at most the module's entries; 1: not added"),
    ("HBFCC_JIT", "0", "1: hbfcc (the nvcc wrapper) builds every real GPU target sm_XX as its virtual compute_XX "
     "(PTX only, the REWRITTEN PTX embedded): the build costs about a plain one, and the CUDA driver JIT-compiles "
     "the instrumented PTX when the program first loads the module (its compute cache keeps it). The launch bound "
     "is decided as in an SASS build (a plain sm_XX build of the original PTX gives the registers). Not for -rdc / "
     "-dc / -dlink, -cubin / -fatbin / -ptx outputs, -arch=all|all-major|native, no target named, or a link-only "
     "step: there a warning, the SASS build, and the reason in <out>.hbfcc.json (jit)"),
    ("HBFCC_LOG", "WARNING", "log level"),
)


def help_text() -> str:
    """The environment section of hbfcc's --help."""
    w = max(len(v) for v, _, _ in DOCS)
    return "\n".join(f"  {v:<{w}}  {meaning} [default: {d}]" for v, d, meaning in DOCS) + "\n"


PASS_CHOICES = ("timing", "flags", "mwait", "capacity")


def parse_passes(v: Optional[str], variable: str = "HBFCC_PASSES") -> tuple[str, ...]:
    """HBFCC_PASSES: which rewrites hbfcc runs, a comma list (order free, canonicalized):

    ``timing``              (default) the HBF timing pass only;
    ``timing,flags``        also the Eidola flags pass (issue 7): flag loads read through the eidola
                            helper (virtualized flag loads), non-flag global reads counted, the
                            eidola helper PTX linked (build/runtime_cuda/hbf_eidola_helpers.ptx);
    ``timing,flags,mwait``  also park recognized spin-wait loops with monitor/mwait;
    ``timing,capacity``     also the capacity rewrite (issue 16, NOT GPU-verified): loads, stores and
                            atomics translated through capacity ranges' page tables
                            (hbfcc/passes/capacity.py); combines with the others.

    ``timing`` is required (it produces the admission report); ``mwait`` requires ``flags``.
    Returns the canonical tuple, e.g. ("timing", "flags", "mwait")."""
    if v is None or v.strip() == "":
        return ("timing",)
    got = [x.strip().lower() for x in v.split(",") if x.strip()]
    bad = [x for x in got if x not in PASS_CHOICES]
    if bad:
        raise ConfigError(f"{variable}: unknown pass {bad[0]!r} (known: {', '.join(PASS_CHOICES)})",
                          variable=variable, value=v)
    if "timing" not in got:
        raise ConfigError(f"{variable} must include 'timing' (the admission report comes from it)",
                          variable=variable, value=v)
    if "mwait" in got and "flags" not in got:
        raise ConfigError(f"{variable}: 'mwait' is an option of the flags pass; add 'flags'",
                          variable=variable, value=v)
    return tuple(p for p in PASS_CHOICES if p in got)


def env_path() -> str:
    return os.environ.get("PATH", "")


def cuda_home_candidates() -> list[str]:
    out = []
    for k in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        v = os.environ.get(k)
        if v:
            out.append(v)
    out += ["/usr/local/cuda", "/opt/cuda"]
    return out
