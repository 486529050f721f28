"""Occupancy guard: keep an instrumented kernel's register-limited occupancy equal to the plain build's.

Why: hbfcc links the helper PTX textually, so ptxas assembles each module in whole-program mode and
allocates a directly called helper's registers on top of the caller's values that live across the
call (bench/helper_registers.py). A Triton matmul goes from 122 to ~214 registers: at 256 threads per
block the register file then holds one block per SM instead of two, and the kernel slows down although
no helper runs on the native path (hbfcc tests the fast-reject band inline; the calls sit on cold
branches). With ``.maxnreg B`` on the entry, B the largest register count that keeps the plain build's
blocks per SM, ptxas keeps occupancy and spills around the (cold) helper calls instead.

The guard needs the block size, so it applies only to entries that declare it (``.reqntid`` or
``.maxntid``: every Triton kernel, CUDA kernels with ``__launch_bounds__``), and the plain build's
register count (the baseline ``ptxas -v`` hbfcc-ptxas runs anyway). Shared memory is not known to
hbfcc (Triton passes it at launch), so the bound is the register bound alone: conservative.

A pipeline stage on the AST (:func:`guard_stage`): the decision per entry (:func:`plan`) and the
``.maxnreg`` directive it adds or lowers (:func:`apply`) read and edit the entries' directives.

The launch bound (:func:`launch_plan`, :func:`launch_stage`; HBFCC_LAUNCH_BOUND, default on) is the
other half, for entries that do NOT declare their block size (nvcc kernels without
``__launch_bounds__``): the plain build launches with any block the register file takes at its
register count (1024 threads up to 64 registers), the instrumented one only with what its own count
allows (H200: a 1024-thread nvcc reduction failed with LAUNCH_OUT_OF_RESOURCES instrumented). So such
an entry gets ``.maxntid T``, T the plain build's largest launchable block, when the instrumented
count would refuse it; ptxas then keeps the registers within 65536 / T (spilling around the helper
calls) and every launch the plain build accepts is accepted.

H100/H200 (sm_90) limits, from the CUDA occupancy calculator's rules: 65536 registers per SM,
allocated per warp in units of 256 (8 per thread), at most 255 per thread, 64 resident warps and
32 resident blocks per SM.

What ptxas makes of an entry's directives (:func:`ptxas_entry_cap`: the register cap it compiles the
entry, and in a relocatable build every module-local function the entry calls, under) is measured on
ptxas 13.0 for sm_90a (the "max regcount of N" of its errors; tests/hbfcc/test_rdc_cap.py checks it).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from .native_entry import SUFFIX as NATIVE_SUFFIX
from .ptx.model import Directive, Function, Module

REGS_PER_SM = 65536
REG_UNIT = 8                 # per-thread allocation granularity (256 per warp)
MAX_REGS = 255
MAX_WARPS_PER_SM = 64
MAX_BLOCKS_PER_SM = 32
MIN_BOUND = 24               # never ask ptxas for less than this
MAX_THREADS_PER_SM = MAX_WARPS_PER_SM * 32
SUB_PARTITIONS = 4           # an SM's register file is four files of 16384; a block's warps are spread over them
MIN_MAXNREG = 24             # ptxas raises a smaller .maxnreg to this

PASS_NAME = "occupancy_guard"


def _alloc(regs: int) -> int:
    return min(MAX_REGS + 1, -(-max(regs, 1) // REG_UNIT) * REG_UNIT)


def blocks_per_sm(regs: int, threads: int) -> int:
    """Resident blocks per SM allowed by registers, warps and the block limit (not shared memory)."""
    warps = -(-threads // 32)
    by_regs = REGS_PER_SM // (_alloc(regs) * 32 * warps)
    return min(MAX_BLOCKS_PER_SM, MAX_WARPS_PER_SM // warps, by_regs)


def register_bound(plain_regs: int, threads: int) -> int:
    """The largest per-thread register count with as many blocks per SM as ``plain_regs``."""
    want = blocks_per_sm(plain_regs, threads)
    best = max(plain_regs, MIN_BOUND)
    for r in range(REG_UNIT, MAX_REGS + 1, REG_UNIT):
        if r >= best and blocks_per_sm(r, threads) >= want:
            best = r
    if blocks_per_sm(MAX_REGS, threads) >= want:
        best = MAX_REGS
    return best


def instrumented_entries(module: Module) -> list[Function]:
    """The entries the occupancy decisions concern: every entry with a body but the native entries
    (``<k>__hbnat``, hbfcc/native_entry.py), which reach no helper and keep the plain kernel's directives."""
    return [f for f in module.items if type(f) is Function and f.is_entry and f.body is not None
            and not f.name.endswith(NATIVE_SUFFIX)]


def _threads(f: Function) -> Optional[int]:
    """Threads per block the entry declares: its first ``.reqntid`` / ``.maxntid`` (x*y*z), else None."""
    for d in f.directives:
        if d.name in ("reqntid", "maxntid"):
            n = 1
            for a in d.args:
                if a != ",":
                    n *= int(a, 0)
            return n
    return None


def _directive_int(f: Function, name: str) -> Optional[int]:
    for d in f.directives:
        if d.name == name and d.args:
            return int(d.args[0], 0)
    return None


def ptxas_entry_cap(f: Function) -> Optional[tuple[int, str]]:
    """(the register cap ptxas derives from an entry's own directives, the directives that set it), or
    None when they set none (then ``-maxrregcount`` applies, if given; it does not where they set one).
    ptxas 13.0, sm_90a, measured (tests/hbfcc/test_rdc_cap.py):

    * ``.maxnreg N``: N as given (not rounded), raised to 24, ignored above 255; it replaces the cap
      ``.maxntid``/``.reqntid`` alone would give (``.maxntid 1024`` + ``.maxnreg 100``: 100);
    * the block size (``.maxntid``/``.reqntid``, x*y*z threads in whole warps) with ``.minnctapersm B``
      (1 when absent; ignored, with a warning, when B > 32 or B blocks exceed 2048 threads): the register
      file of each of the four sub-partitions (16384) over its share of the B blocks' warps, rounded up
      (warps are placed four-wide), per thread, rounded down to 8, at most 255 -- 1024 threads: 64,
      1024 x 2: 32, 768 or 672: 80, 640: 96;
    * both, with ``.minnctapersm`` given: the smaller (``.maxntid 1024, .minnctapersm 1, .maxnreg 100``: 64).
    """
    n = _directive_int(f, "maxnreg")
    if n is not None and n > MAX_REGS:
        n = None
    t = _threads(f)
    b = _directive_int(f, "minnctapersm")
    derived = None
    if t is not None:
        warps = -(-t // 32)
        if b is not None and (b > MAX_BLOCKS_PER_SM or b < 1 or warps * 32 * b > MAX_THREADS_PER_SM):
            b = None
        per_part = -(-(warps * (b or 1)) // SUB_PARTITIONS)
        derived = min(MAX_REGS, REGS_PER_SM // SUB_PARTITIONS // (per_part * 32) // REG_UNIT * REG_UNIT)
    shape = (f".{'reqntid' if any(d.name == 'reqntid' for d in f.directives) else 'maxntid'} {t}"
             + (f" .minnctapersm {b}" if b is not None else "")) if t is not None else ""
    if n is not None:
        n = max(n, MIN_MAXNREG)
        if derived is not None and b is not None and derived < n:
            return derived, shape
        return n, f".maxnreg {n}"
    if derived is not None:
        return derived, shape
    return None


def entry_threads(module: Module) -> dict[str, Optional[int]]:
    """Threads per block each entry declares (``.reqntid`` / ``.maxntid``), else None."""
    return {f.name: _threads(f) for f in instrumented_entries(module)}


def plan(module: Module, plain: dict[str, Optional[int]], instrumented: dict[str, Optional[int]],
         hot: Optional[dict[str, Optional[int]]] = None) -> dict[str, dict]:
    """Per entry: the guard decision. ``plain``/``instrumented``: registers per function (hbfcc.toolchain);
    ``hot``: what the entry's own code needs (the rewrite assembled with helpers that do nothing): the
    bound is never below it (rounded up to the allocation unit), so ptxas spills in the helpers, not in
    the kernel's hot path."""
    out: dict[str, dict] = {}
    hot = hot or {}
    for name, t in entry_threads(module).items():
        p, i = plain.get(name), instrumented.get(name)
        h = hot.get(name)
        d: dict = {"threads_per_block": t, "plain_registers": p, "instrumented_registers": i,
                   "hot_path_registers": h, "bound": None, "applied": False}
        if t is None:
            d["reason"] = "block size not declared (.reqntid/.maxntid): guard not applicable"
        elif p is None or i is None:
            d["reason"] = "register counts unavailable"
        else:
            bound = register_bound(p, t)
            if h is not None:
                bound = max(bound, min(MAX_REGS, _alloc(h)))
            d["bound"] = bound
            d["blocks_per_sm_plain"] = blocks_per_sm(p, t)
            d["blocks_per_sm_instrumented"] = blocks_per_sm(i, t)
            if i <= bound:
                d["reason"] = "instrumented build already within the bound"
            else:
                d["applied"] = True
                d["blocks_per_sm_guarded"] = blocks_per_sm(bound, t)
                d["reason"] = f".maxnreg {bound}: {d['blocks_per_sm_guarded']} block(s)/SM (plain " \
                              f"{d['blocks_per_sm_plain']}, unguarded {d['blocks_per_sm_instrumented']})"
        out[name] = d
    return out


def max_block_threads(regs: int) -> int:
    """The largest block (threads, a multiple of 32, at most 1024) the register file takes at ``regs``
    registers per thread."""
    return max(32, min(1024, REGS_PER_SM // (_alloc(regs) * 32) * 32))


def _user_cap_keeps(user_cap: Optional[int], tp: int) -> Optional[str]:
    """Why no ``.maxntid`` is needed when the caller's ``-maxrregcount`` already keeps a ``tp``-thread block
    launchable (ptxas applies it to an entry with no bound of its own, and ignores it for one that has
    ``.maxntid``: the bound would lift the caller's cap, ``-maxrregcount=40`` + ``.maxntid 1024``: 64)."""
    if user_cap is not None and max_block_threads(user_cap) >= tp:
        return f"-maxrregcount {user_cap} already keeps a {tp}-thread block launchable (a .maxntid would lift it)"
    return None


def launch_plan(module: Module, plain: dict[str, Optional[int]],
                instrumented: dict[str, Optional[int]], user_cap: Optional[int] = None) -> dict[str, dict]:
    """Per entry without a declared block size: does the instrumented build still launch every block
    the plain one does? If not, ``.maxntid`` = the plain build's largest launchable block (none where the
    caller's ``-maxrregcount``, ``user_cap``, keeps that block launchable)."""
    out: dict[str, dict] = {}
    for name, t in entry_threads(module).items():
        if t is not None:
            continue                      # a declared block size: ptxas already keeps it launchable
        p, i = plain.get(name), instrumented.get(name)
        d: dict = {"plain_registers": p, "instrumented_registers": i, "maxntid": None, "applied": False}
        if p is None or i is None:
            d["reason"] = "register counts unavailable"
        else:
            tp, ti = max_block_threads(p), max_block_threads(i)
            d["plain_max_threads"], d["instrumented_max_threads"] = tp, ti
            if _user_cap_keeps(user_cap, tp):
                d["reason"] = _user_cap_keeps(user_cap, tp)
            elif ti >= tp:
                d["reason"] = "the instrumented build launches every block the plain one does"
            else:
                d["applied"], d["maxntid"] = True, tp
                d["reason"] = f".maxntid {tp}: the plain build launches up to {tp} threads per block, " \
                              f"the instrumented one ({i} registers) only {ti}"
        out[name] = d
    return out


def launch_plan_before(module: Module, plain: dict[str, Optional[int]],
                       callers: frozenset[str], user_cap: Optional[int] = None) -> Optional[dict[str, dict]]:
    """The launch bound decided BEFORE the instrumented build, from the plain build alone: every entry
    without a declared block size that calls a timing helper (``callers``) gets ``.maxntid`` = the
    plain build's largest launchable block; one that calls none is the plain build's code and keeps
    what it launches. None when an entry's plain register count is unknown (then :func:`launch_plan`
    decides after the build).

    Why not wait for the instrumented count: the helper calls put every instrumented entry of the direct
    helper build above the bound (the 27 such entries of the 17 CUDA fixtures: 94-130 registers against
    64 at 1024 threads; docs/hbfcc.md, "What building through hbfcc costs"), so the build :func:`launch_plan`
    needs first is assembled only to be assembled again with the bound -- a whole-program ptxas of the
    instrumented module thrown away, ~45 % of an nvcc build's ptxas time. Where the bound would not
    have been needed (an entry whose instrumented count still fits the plain build's largest block),
    it is not binding: ptxas keeps the registers it needs, and the entry launches every block it did.
    ``user_cap``: the caller's ``-maxrregcount``; where it keeps the block launchable, no ``.maxntid``
    (it would lift the caller's cap)."""
    out: dict[str, dict] = {}
    for name, t in entry_threads(module).items():
        if t is not None:
            continue                      # a declared block size: ptxas already keeps it launchable
        p = plain.get(name)
        if p is None:
            return None
        tp = max_block_threads(p)
        if name not in callers:
            out[name] = {"plain_registers": p, "instrumented_registers": None, "maxntid": None, "applied": False,
                         "plain_max_threads": tp, "decided": "before the instrumented build",
                         "reason": "calls no timing helper: launches every block the plain build does"}
            continue
        if _user_cap_keeps(user_cap, tp):
            out[name] = {"plain_registers": p, "instrumented_registers": None, "maxntid": None, "applied": False,
                         "plain_max_threads": tp, "decided": "before the instrumented build",
                         "reason": _user_cap_keeps(user_cap, tp)}
            continue
        out[name] = {"plain_registers": p, "instrumented_registers": None, "maxntid": tp, "applied": True,
                     "plain_max_threads": tp, "decided": "before the instrumented build",
                     "reason": f".maxntid {tp}: the plain build launches up to {tp} threads per block (set "
                               f"before the instrumented build: it then launches every one of them)"}
    return out


def _edit_entries(module: Module, caps: dict[str, int], edit) -> Module:
    """``edit(directives, cap) -> directives`` on each named entry with a body."""
    if not caps:
        return module
    items = []
    for it in module.items:
        if type(it) is Function and it.is_entry and it.body is not None and it.name in caps:
            it = replace(it, directives=tuple(edit(list(it.directives), caps[it.name])))
        items.append(it)
    return replace(module, items=tuple(items))


def apply_maxntid(module: Module, caps: dict[str, int]) -> Module:
    """Add ``.maxntid N`` to the named entries (they declare no block size)."""
    return _edit_entries(module, caps, lambda ds, n: ds + [Directive("maxntid", (str(n),))])


LAUNCH_PASS_NAME = "launch_bound"


def launch_stage(module: Module, meta: dict) -> Module:
    """The stage ``(module, meta) -> module``: ``.maxntid`` on the entries ``meta["launch_bound"]``
    (the decisions of :func:`launch_plan`) applies it to."""
    return apply_maxntid(module, {n: d["maxntid"] for n, d in meta.get(LAUNCH_PASS_NAME, {}).items()
                                  if d["applied"]})


def _with_maxnreg(ds: list, cap: int) -> list:
    j = next((k for k, d in enumerate(ds) if d.name == "maxnreg"), None)
    if j is None:
        ds.append(Directive("maxnreg", (str(cap),)))
    else:
        ds[j] = replace(ds[j], args=(str(min(int(ds[j].args[0], 0), cap)),))
    return ds


def apply(module: Module, caps: dict[str, int]) -> Module:
    """Add ``.maxnreg`` to the named entries (after their other directives), or lower the one they have."""
    return _edit_entries(module, caps, _with_maxnreg)


def guard_stage(module: Module, meta: dict) -> Module:
    """The stage ``(module, meta) -> module``: ``.maxnreg`` on the entries ``meta["occupancy_guard"]``
    (the decisions of :func:`plan`) applies the guard to."""
    return apply(module, {n: d["bound"] for n, d in meta.get(PASS_NAME, {}).items() if d["applied"]})
