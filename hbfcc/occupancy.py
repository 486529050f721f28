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

H100/H200 (sm_90) limits, from the CUDA occupancy calculator's rules: 65536 registers per SM,
allocated per warp in units of 256 (8 per thread), at most 255 per thread, 64 resident warps and
32 resident blocks per SM.
"""
from __future__ import annotations

import re
from typing import Optional

REGS_PER_SM = 65536
REG_UNIT = 8                 # per-thread allocation granularity (256 per warp)
MAX_REGS = 255
MAX_WARPS_PER_SM = 64
MAX_BLOCKS_PER_SM = 32
MIN_BOUND = 24               # never ask ptxas for less than this

_ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([\w$.]+)", re.M)
_NTID = re.compile(r"\.(reqntid|maxntid)\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?")
_MAXNREG = re.compile(r"\.maxnreg\s+(\d+)")


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


def entry_headers(ptx: str) -> dict[str, tuple[int, int]]:
    """Per entry: (span of its header text between the name and the opening brace)."""
    out = {}
    for m in _ENTRY.finditer(ptx):
        brace = ptx.find("{", m.end())
        if brace < 0:
            continue
        out[m.group(1)] = (m.end(), brace)
    return out


def entry_threads(ptx: str) -> dict[str, Optional[int]]:
    """Threads per block each entry declares (``.reqntid`` / ``.maxntid``), else None."""
    res: dict[str, Optional[int]] = {}
    for name, (a, b) in entry_headers(ptx).items():
        hdr = ptx[a:b]
        # the parameter list may contain parentheses but never these directives
        m = _NTID.search(hdr)
        if m is None:
            res[name] = None
            continue
        n = 1
        for g in m.groups()[1:]:
            if g is not None:
                n *= int(g)
        res[name] = n
    return res


def plan(ptx: str, plain: dict[str, Optional[int]], instrumented: dict[str, Optional[int]]) -> dict[str, dict]:
    """Per entry: the guard decision. ``plain``/``instrumented``: registers from ``ptxas -v``."""
    threads = entry_threads(ptx)
    out: dict[str, dict] = {}
    for name, t in threads.items():
        p, i = plain.get(name), instrumented.get(name)
        d: dict = {"threads_per_block": t, "plain_registers": p, "instrumented_registers": i,
                   "bound": None, "applied": False}
        if t is None:
            d["reason"] = "block size not declared (.reqntid/.maxntid): guard not applicable"
        elif p is None or i is None:
            d["reason"] = "register counts unavailable"
        else:
            bound = register_bound(p, t)
            d["bound"] = bound
            d["blocks_per_sm_plain"] = blocks_per_sm(p, t)
            d["blocks_per_sm_instrumented"] = blocks_per_sm(i, t)
            if i <= bound:
                d["reason"] = "instrumented build already within the bound"
            else:
                d["applied"] = True
                d["reason"] = f".maxnreg {bound} keeps {d['blocks_per_sm_plain']} block(s)/SM " \
                              f"(unguarded: {d['blocks_per_sm_instrumented']})"
        out[name] = d
    return out


def apply(ptx: str, caps: dict[str, int]) -> str:
    """Add (or lower) ``.maxnreg`` on the named entries."""
    if not caps:
        return ptx
    heads = sorted(((a, b, n) for n, (a, b) in entry_headers(ptx).items() if n in caps), reverse=True)
    for a, b, name in heads:
        hdr = ptx[a:b]
        m = _MAXNREG.search(hdr)
        if m is not None:
            cap = min(int(m.group(1)), caps[name])
            hdr = hdr[:m.start()] + f".maxnreg {cap}" + hdr[m.end():]
        else:
            hdr = hdr.rstrip() + f"\n.maxnreg {caps[name]}\n"
        ptx = ptx[:a] + hdr + ptx[b:]
    return ptx
