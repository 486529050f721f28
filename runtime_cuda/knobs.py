"""Every environment variable runtime_cuda reads (one place, DESIGN.md §6)."""
from __future__ import annotations

import os
from pathlib import Path

from hbfcommon import resources
from hbfcommon.env import env_bool, env_int
from hbfcommon.errors import ConfigError


def allow_unmodeled() -> bool:
    """HBF_ALLOW_UNMODELED=1: launches of non-admitted kernels that reach a range are allowed
    (and the run summary says so)."""
    return env_bool("HBF_ALLOW_UNMODELED", False)


def heartbeat_timeout_ns() -> int:
    """HBF_HEARTBEAT_TIMEOUT_NS: heartbeat unchanged this long on the GPU clock -> DAEMON_LOST."""
    return env_int("HBF_HEARTBEAT_TIMEOUT_NS", 50_000_000, lo=0)


def thermal_max_age_ns() -> int:
    """HBF_THERMAL_MAX_AGE_NS: how long the device reuses a thermal/refresh snapshot (0: always read)."""
    return env_int("HBF_THERMAL_MAX_AGE_NS", 1_000_000, lo=0)


def completion_timeout_ns() -> int:
    """HBF_COMPLETION_TIMEOUT_NS: a reference ticket pending this long -> TIMEOUT (0: never)."""
    return env_int("HBF_COMPLETION_TIMEOUT_NS", 0, lo=0)


def stall_warn_s() -> int:
    """HBF_STALL_WARN_S (default 0: off): seconds after the last launch without a synchronization of the session
    and without progress -- no change of the reference ring (requests published, answered by hbfd, consumed) and
    none of the GPU's live activity (both in the control region) -- before the session warns that a kernel may not
    end, naming the last launches, the ring's state and whose move it is (Session's stall watch; host memory only,
    no CUDA call, so it also speaks while the main thread is blocked in the driver). Off by default: it cannot tell a
    kernel that does not end from a long host phase after a torch.cuda.synchronize() it does not see."""
    return env_int("HBF_STALL_WARN_S", 0, lo=0)


def stall_abort_s() -> int:
    """HBF_STALL_ABORT_S (default 0: off): seconds without progress (as HBF_STALL_WARN_S counts them) after which the
    stall watch ENDS the process: it logs the stall at CRITICAL, reports it to hbfd (Report kind ``stall_abort``),
    stops the daemons this process started (hbfd.runner: each writes its summary) and exits with status 86
    (hbfcommon.abort.EXIT_STALLED). For unattended runs that must end: a kernel that does not end otherwise keeps the
    process blocked in the driver for ever. Not below HBF_STALL_WARN_S; set alone, the warning comes at the abort."""
    return env_int("HBF_STALL_ABORT_S", 0, lo=0)


def native_select() -> bool:
    """HBF_NATIVE_SELECT (default 1): a launch whose pointer arguments cannot reach a registered range runs
    the untouched native version of a kernel whose addresses come from its parameters (per-launch selection)."""
    return env_bool("HBF_NATIVE_SELECT", True)


def native_entry() -> bool:
    """HBF_NATIVE_ENTRY (default 1): a host launch decided native (nothing registered, or per-launch selection: its
    arguments reach no range; never a launch on a capturing stream) of a kernel built with HBFCC_NATIVE_ENTRY=1 runs
    its native entry (``<name>__hbnat``, the untouched kernel as its own function; the artifact's ``native_entry``)
    instead of the instrumented entry, and the module's words are not written for it. 0: the instrumented entry and
    its prologue test, as for a module built without native entries (A/B of the same cubins). Session.launch and
    Triton launches only: a cudart launch (the C API, docs/runtime.md) names its function itself."""
    return env_bool("HBF_NATIVE_ENTRY", True)


GRAPH_NATIVE_MODES = ("off", "bounded", "all")


def graph_native() -> str:
    """HBF_GRAPH_NATIVE (default ``0``/``off``; ``1``/``bounded``; ``all``): a launch on a CAPTURING stream decided
    native captures the kernel's native entry (``<name>__hbnat``), so its replays run the untouched kernel, and the
    session records what the replays can reach; every later registration that could be reached is refused
    (RANGE_ADMITTED) until :meth:`Session.release_graph_captures` (docs/design.md "Per-launch selection and CUDA
    graphs", "Native entries in graphs"). ``bounded``: kernels whose addresses come from their parameters, with the
    launch's argument extents known (the record: those extents; a registration overlapping one is refused). ``all``:
    also, while nothing is registered, kernels whose addresses come from memory (every TMA kernel) or whose arguments
    are unknown (the record: everything; EVERY later registration is refused until released). Off by default: the
    session cannot see a graph's kernel parameters updated after capture (cuGraphExecKernelNodeSetParams,
    cuGraphExecUpdate) nor a graph destroyed, and a registration after a capture -- the flow the instrumented
    captures serve (rule 3) -- is refused instead of modeled."""
    v = os.environ.get("HBF_GRAPH_NATIVE", "").strip().lower()
    if v in ("", "0", "off", "false", "no"):
        return "off"
    if v in ("1", "on", "true", "yes", "bounded"):
        return "bounded"
    if v == "all":
        return "all"
    raise ConfigError("HBF_GRAPH_NATIVE must be 0/off, 1/bounded or all", variable="HBF_GRAPH_NATIVE", value=v)


NATIVE_MODULES = ("entry", "plain")


def native_module() -> str:
    """HBF_NATIVE_MODULE (default ``plain`` since stop 52; ``entry``): WHICH function a launch that runs native launches (a host
    launch with HBF_NATIVE_ENTRY, a capture with HBF_GRAPH_NATIVE). ``entry``: the kernel's native entry
    ``<name>__hbnat`` in the instrumented module. ``plain``: the kernel itself from the module's PLAIN cubin -- the
    original PTX with the caller's ptxas options, which hbfcc-ptxas keeps in the artifact store (the artifact's
    ``native_module``) -- loaded once per bound module and verified against its recorded sha256: the same machine code
    in a module WITHOUT hbfcc's constants (its descriptor ``__hb_cdesc``, a user constant bank the driver attributes to
    every function of the instrumented module, CONST_SIZE_BYTES 200 on matmul_host), the A/B of issue 15's +0.43 us
    per launch of matmul_host's native entry in CUDA graphs (docs/design.md "Native entries in graphs"); on an H100
    (stop 52, two runs) the plain module's function ran x0.996-1.001 of plain in graphs for the three Triton TMA
    kernels, the native entry x1.014-1.057, outputs identical: hence the default. A kernel whose artifact records no
    plain cubin (nvcc and deferred builds, artifacts from before) runs its native entry (logged at info); one whose
    recorded cubin is missing or damaged: a warning naming the kernel and the file, and its native entry. Counted: ``counters()["launch_selection"][kernel]["native_module"]``."""
    v = os.environ.get("HBF_NATIVE_MODULE", "").strip().lower()
    if v in ("", "plain"):
        return "plain"
    if v == "entry":
        return "entry"
    raise ConfigError("HBF_NATIVE_MODULE must be 'entry' or 'plain'", variable="HBF_NATIVE_MODULE", value=v)


def const_switch() -> bool:
    """HBF_CONST_SWITCH (default 1): write the modules' constant-bank attach switch (``__hb_detached``, hbfcc's
    prologue reads it before ``__hb_state``) as the per-launch selection detaches and attaches. Its in-stream writes
    to a ``.const`` word were confirmed on an H100 in stop 48 (bench/tma_triton.py ``switch_stream_order``: a detach
    and the session's attach as memsets between launches, every launch counted its copies, 6 of 6; the graph replay
    rule [1, 0, 1], 6 of 6). 0: the word stays 0 and every kernel reads ``__hb_state`` as before the switch existed
    (one ULDC more) -- the fallback should a driver ever serve a stale constant-cache line (a stale 1 would run a
    kernel native while a range it reaches is registered)."""
    return env_bool("HBF_CONST_SWITCH", True)


def inline_issue() -> bool:
    """HBF_INLINE_ISSUE (default 1): hbfcc-built kernels serve the FIXED source's common case inline (no helper
    call; hbf_abi.h "Inline issue"); 0: the descriptor allows no op inline, so every access calls the helpers
    (the same cubin measured both ways)."""
    return env_bool("HBF_INLINE_ISSUE", True)


def inline_multi() -> bool:
    """HBF_INLINE_MULTI (default 1): the inline path also serves kernels over 2..4 registered ranges (the FIXED
    source, every range TIMING, at most 2^37 bytes, granting the op; docs/design.md §3.3): the launch descriptor
    carries them all (devstate.cdesc_for). 0: it carries one range only, as before stop 44, so a kernel over
    several ranges calls the helpers for every access (the same cubin measured both ways;
    bench/gpu_calls/stop44_multirange.sh). No effect with HBF_INLINE_ISSUE=0."""
    return env_bool("HBF_INLINE_MULTI", True)


def l2_model() -> bool:
    """HBF_L2_MODEL (default 0): model the GPU's L2 in front of HBF (docs/design.md §3.12): loads of registered
    lines that the L2 model holds are not charged to HBF. Needs modules built with the L2 helper build
    (runtime_cuda/ptx/hbf_helpers_l2.ptx through HBFCC_HELPER_PTX; a module without its hooks is refused); the
    default builds carry none (their registers would grow). Off by default until it is validated against ncu on
    the H200 (bench/l2_vs_ncu.py); on, the FIXED source's loads and the FAST source's issue groups leave the
    inline path for the helpers (the model's lookups are in the helpers)."""
    return env_bool("HBF_L2_MODEL", False)


def ring_overflow_log2() -> int:
    """HBF_RING_OVERFLOW_LOG2 (default 20, 0 = no stealing; else 10..26): log2 of the entries of the reference
    ring's overflow table in device memory (docs/runtime.md "ring"): 64 B per entry, so 20 costs 64 MiB of device
    memory (16: 4 MiB; 26: 4 GiB), allocated with the device state when a session attaches. An issuer waiting
    for its slot steals the posted, unconsumed completion of the slot's previous ticket into it, so a slot wait
    never depends on another warp's consumption (the deferred-consumption deadlock). A stolen completion waits
    there for its owner; one still untaken where a later one must go (its ticket 2^k behind) fails the run with
    RING_OVERFLOW. 0 restores the protocol without stealing (it can deadlock when the warps hold more unconsumed
    tickets than the ring's 4096 slots)."""
    v = env_int("HBF_RING_OVERFLOW_LOG2", 20, lo=0, hi=26)
    if 0 < v < 10:
        raise ConfigError("HBF_RING_OVERFLOW_LOG2 must be 0 (no stealing) or 10..26", value=v)
    return v


def backoff_max_ns() -> int:
    """HBF_BACKOFF_MAX_NS: nanosleep backoff cap while polling host-written words."""
    return env_int("HBF_BACKOFF_MAX_NS", 8192, lo=0)


def helper_ptx() -> Path:
    """HBFCC_HELPER_PTX (the one helper-PTX variable, the same hbfcc reads): the helper PTX module the
    runtime links; default the packaged direct build, runtime_cuda/ptx/hbf_helpers.ptx (it may not be
    built: see hbfcommon.resources). Compile-time variants of the helpers are selected through it, e.g. the TMA
    issue's per-run path for an A/B (issue 15, docs/design.md §3.3 "The issue cost"): the helpers built with
    ``NVCC_APPEND_FLAGS=-DHBF_TMA_BATCH=0 python setup.py helper-ptx direct OUT.ptx`` classify every run of a copy
    and make its requests one by one (bench/gpu_calls/stop45_tmacost.sh); the default build batches them."""
    v = os.environ.get("HBFCC_HELPER_PTX")
    if v:
        return Path(v)
    return resources.helper_ptx_path("direct")




def tma_device() -> bool:
    """HBF_TMA_DEVICE (default 1 since stop 55): model TMA and bulk async copies on the device (issue 15; hbf_tma.cuh,
    the descriptor layout fitted to and checked against the driver's encodings). On the card (H100, 2026-12-06 and
    2026-12-07): 84/84 semantic checks over 11 templates (tiled loads 1D-5D, multicast, stores, reduces, bulk copies,
    cp.async-mbarrier), the three Triton TMA kernels bit-identical with their counters, the increment experiment
    within 0.13 % (docs/RESULTS.md). 0: an instrumented TMA copy fails closed (UNSUPPORTED, recorded with its site)."""
    return env_bool("HBF_TMA_DEVICE", True)


def capacity_device() -> bool:
    """HBF_CAPACITY_DEVICE (default 0): register capacity ranges through the GPU runtime (issue 16). Its device
    half is NOT GPU-verified yet: without this opt-in, register_capacity_range refuses with UNSUPPORTED."""
    return env_bool("HBF_CAPACITY_DEVICE", False)


def triton_instrument() -> str:
    """HBF_TRITON_INSTRUMENT (default ``off``; ``load``): with ``load`` a Triton kernel compiled by Triton's own ptxas
    (no hbfcc at compile time: the compile costs what plain Triton's does) is instrumented at its load in an attached
    session with the Triton hooks: the runtime reconstructs Triton's ptxas run, verifies it reproduces the cached
    cubin byte for byte, and builds the kernel with eager hbfcc-ptxas (cached in the artifact store;
    runtime_cuda/triton_load.py, docs/design.md §3.5). A kernel that cannot be verified or built is NOT admitted."""
    v = os.environ.get("HBF_TRITON_INSTRUMENT", "").strip().lower()
    if v in ("", "0", "off"):
        return "off"
    if v == "load":
        return "load"
    raise ConfigError("HBF_TRITON_INSTRUMENT must be 'off' or 'load'", value=v)
