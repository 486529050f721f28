#!/usr/bin/env python3
"""Issue 13 goal 1 on the GPU: no hang, no fault, bit-identical outputs, on a stress matrix.

    PYTHONUNBUFFERED=1 python3 bench/devpath_matrix.py --out $OUT/dm            # 3-9 min (budget 540 s)
    PYTHONUNBUFFERED=1 python3 bench/devpath_matrix.py --out $OUT/dm --quick    # 2-5 min (budget 300 s)
    python3 bench/devpath_matrix.py --cpu-check --out DIR                       # no GPU: compile + admission

Run time is set by the hangs: each costs --case-timeout (10 s) plus a new child (~6-8 s); the
one-per-dimension (--quick) cases run first in every source, and --budget-s bounds the whole run
(cases past it are recorded as not_run, the JSON stays complete).

Kernels (bench/devpath_common.py): Triton kernels compiled twice in one Triton cache (``*_plain`` with
CUDA's ptxas, ``*_hbf`` with hbfcc-ptxas, as bench/runtime_triton.py does) -- a streaming fp16/fp32
reduction (the issue's cases: 8192 elements per program, 4 warps, 1024 and 2048 programs; 65536
elements per program at 512 programs, single-shot and looped), copies with 1 B..64 B per lane and
1 KiB..256 KiB of loads per block, masked tails (n not a multiple of 16: unvectorized), 4 independent
loads in flight per thread, stores to a registered range, integer atomics (a histogram, an atomic
sum) on and next to a registered range, num_warps 1/2/4/8/32 (32 = 1024 threads), grids from 1
program to 10x the resident bound (SMs x min(32, 2048 / threads)), two kernels at once on two
streams -- and nvcc kernels (float4 copy, scalar tail, atomic histogram, 1024-thread shared-memory
reduction, 4 loads in flight) built with ``nvcc -cubin`` and ``hbfcc -cubin`` and bound with
``Session.bind_module(module, artifact=<the .hbfcc.json hbfcc wrote>)``.

Per case: the plain build runs with nothing registered; then the case's inputs (``rw`` cases: also its
outputs) are registered as timing ranges and the hbf build runs on the same inputs. Status: ``ok``
(outputs byte-identical), ``mismatch``, ``hang`` (no end within --case-timeout: the parent killed
the child), ``fault`` (CUDA error / DeviceFailure / the child died: the next case runs in a new child),
``refused`` (registration or launch refused), ``not_instrumented`` / ``not_admitted`` (the hbf build
is not what it should be), ``error`` (a bench problem), ``not_run``. Recorded: kernel times (median of
CUDA-event reps; instrumented reps skipped when the checked launch took > 1 s), the session
counters of the checked launch (Session.counters() delta: every per-op field the runtime has, summed,
plus the per-kernel fields), registers/spills/stack (Triton + the hbfcc artifact), resident blocks
per SM (driver occupancy).

Sources (--sources): fixed0 (fixed, read_ns = write_ns = 0), fixed20us (20 us), fast (nominal's fast
queue model); also fixed2us. Each source's case list runs in child processes with their own hbfd.

Writes <out>/devpath_matrix.json after every case; one line per case on stdout.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import devpath_common as DC  # noqa: E402
from devpath_common import log  # noqa: E402

ESIZE = {"int8": 1, "float16": 2, "bfloat16": 2, "float32": 4, "int32": 4}
ROLES = {  # kernel -> (input args, output args)
    "reduce": (("x",), ("out",)), "copy": (("x",), ("y",)), "hist": (("x",), ("h",)),
    "asum": (("x",), ("out",)), "add4": (("a", "b", "c", "d"), ("o",)),
}
ACCUMULATES = ("hist", "asum")
DEFAULT_SOURCES = "fixed0,fixed20us,fast"


# ------------------------------------------------------------------------------------------------
# the case list (pure: tested on the CPU)
# ------------------------------------------------------------------------------------------------
def resident_bound(sms: int, warps: int) -> int:
    """Blocks the GPU can hold at once by the thread and block limits alone (an upper bound on the
    resident capacity; registers and shared memory can only lower it: kernel_hbf.blocks_per_sm)."""
    return sms * min(32, 2048 // (32 * warps))


def case_list(sms: int, *, quick: bool = False, nvcc: bool = True) -> list[dict]:
    cases: list[dict] = []

    def tri(kernel, dtype, epp, block, warps, grid, *, tail=0, reg="in", nb=None, why="", q=False):
        n = grid * epp - tail
        const = {"EPP": epp, "BLOCK": block} | ({"NB": nb} if nb else {})
        name = (f"{kernel}_{dtype}_e{epp}_b{block}_w{warps}_g{grid}" + ("_tail" if tail else "")
                + ("_rw" if reg == "inout" else ""))
        threads = 32 * warps
        esize = ESIZE[dtype]
        cases.append({"name": name, "kind": "triton", "kernel": kernel, "dtype": dtype, "const": const,
                      "warps": warps, "threads": threads, "grid": grid, "n": n, "ints": [n], "register": reg,
                      "why": why, "quick": q, "resident_bound": resident_bound(sms, warps),
                      "grid_over_bound": round(grid / resident_bound(sms, warps), 3),
                      "load_bytes_per_block": epp * esize * (4 if kernel == "add4" else 1),
                      "bytes_per_lane_per_load": min(16, block * esize // threads) if not tail else esize})

    rb4 = resident_bound(sms, 4)
    # the issue's cases
    tri("reduce", "float16", 8192, 8192, 4, 1024, why="issue 13: completes today", q=True)
    tri("reduce", "float16", 8192, 8192, 4, 2048, why="issue 13: hangs today (fixed and fast)", q=True)
    tri("reduce", "float16", 65536, 65536, 4, 512, why="issue 13: IllegalAddress today (single-shot block)", q=True)
    tri("reduce", "float16", 65536, 4096, 4, 512, why="issue 13's 65536-element programs, looped 4096 at a time")
    # grids: 1 program .. 10x the resident bound
    tri("reduce", "float16", 8192, 8192, 4, 1, why="one program", q=True)
    tri("reduce", "float16", 8192, 8192, 4, rb4, why="grid = resident bound")
    tri("reduce", "float16", 8192, 8192, 4, 10 * rb4, why="grid = 10x resident bound", q=True)
    # warps per block: 1, 2, 8, 32 (1024 threads)
    tri("reduce", "float16", 8192, 8192, 1, resident_bound(sms, 1), why="1 warp per block", q=True)
    tri("reduce", "float16", 8192, 8192, 2, resident_bound(sms, 2), why="2 warps per block")
    tri("reduce", "float16", 8192, 8192, 8, resident_bound(sms, 8), why="8 warps per block")
    tri("reduce", "float16", 8192, 8192, 32, resident_bound(sms, 32), why="1024 threads per block", q=True)
    tri("reduce", "float16", 8192, 8192, 32, 10 * resident_bound(sms, 32), why="1024 threads, 10x resident bound")
    # masked tail (n % 16 != 0: Triton cannot vectorize)
    tri("reduce", "float16", 8192, 8192, 4, 1024, tail=37, why="masked tail", q=True)
    # vector widths and bytes per block
    tri("copy", "int8", 1024, 128, 4, rb4, why="1 KiB per block, 1 B per lane", q=True)
    tri("copy", "float16", 8192, 256, 4, rb4, why="16 KiB per block, 4 B per lane")
    tri("copy", "float32", 8192, 256, 4, rb4, why="32 KiB per block, 8 B per lane")
    tri("copy", "float32", 65536, 512, 4, 4 * sms, why="256 KiB per block, 16 B per lane", q=True)
    tri("copy", "float16", 16384, 4096, 4, rb4, why="64 B per lane: 4 vector loads in flight per thread")
    tri("copy", "float32", 8192, 512, 4, 1000, tail=37, why="masked tail: scalar accesses")
    tri("copy", "float16", 8192, 1024, 4, rb4, reg="inout", why="stores to a registered range", q=True)
    # atomics
    tri("hist", "int32", 4096, 1024, 4, rb4, nb=256, why="atomics next to a registered input")
    tri("hist", "int32", 4096, 1024, 4, rb4, nb=256, reg="inout", why="atomics on a registered range", q=True)
    tri("asum", "int32", 4096, 1024, 4, rb4, reg="inout", why="one atomic per program on a registered word")
    # several loads in flight per thread
    tri("add4", "float32", 4096, 1024, 4, rb4, why="4 independent loads in flight per thread", q=True)
    tri("add4", "float32", 4096, 1024, 4, 1000, tail=37, why="4 loads in flight, masked tail")
    # two kernels at once on two streams
    a = dict(cases[0])
    b = {"kernel": "copy", "dtype": "float16", "const": {"EPP": 8192, "BLOCK": 1024}, "warps": 4, "threads": 128,
         "grid": 1024, "n": 1024 * 8192, "ints": [1024 * 8192], "register": "in", "kind": "triton"}
    cases.append({"name": "streams2_reduce_copy_g1024", "kind": "streams2", "parts": [a, b], "quick": True,
                  "why": "two instrumented kernels at once on two streams"})
    if nvcc:
        n22 = 1 << 22
        nv = [("nv_copy4", 8 * sms, 256, {"n4": n22 // 4}, "float4 grid-stride copy", True),
              ("nv_copy4", 80 * sms, 256, {"n4": 80 * sms * 256 * 2}, "float4 copy, 10x resident bound", False),
              ("nv_copy1", 4 * sms, 128, {"n": n22 + 3}, "scalar copy, odd length", False),
              ("nv_hist", 8 * sms, 256, {"n": n22, "nb": 256}, "atomic histogram", True),
              ("nv_reduce", 2 * sms, 1024, {"n": n22}, "1024-thread shared-memory reduction", False),
              ("nv_add4", 8 * sms, 256, {"n4": n22 // 4}, "4 float4 loads in flight", False)]
        for k, g, blk, p, why, q in nv:
            cases.append({"name": f"{k}_g{g}_t{blk}", "kind": "nvcc", "kernel": k, "grid": g, "threads": blk,
                          "params": p, "why": why, "quick": q, "register": "in"})
    # the one-per-dimension subset first: a run that uses up its time budget has covered each dimension
    cases = [c for c in cases if c.get("quick")] + ([] if quick else [c for c in cases if not c.get("quick")])
    return cases


def specs_of(cases: list[dict]) -> list[dict]:
    out = []
    for c in cases:
        if c["kind"] == "triton":
            out.append(c)
        elif c["kind"] == "streams2":
            out.extend(c["parts"])
    return out


# ------------------------------------------------------------------------------------------------
# child: one source's cases
# ------------------------------------------------------------------------------------------------
class Ctx:
    pass


def _inputs(c: dict, gen) -> dict:
    import torch
    n, dt = c["n"], c["dtype"]
    ins = {}
    for name in ROLES[c["kernel"]][0]:
        if c["kernel"] == "hist":
            ins[name] = torch.randint(0, 1 << 20, (n,), device="cuda", dtype=torch.int32, generator=gen)
        elif c["kernel"] == "asum":
            ins[name] = torch.randint(-1000, 1000, (n,), device="cuda", dtype=torch.int32, generator=gen)
        elif dt == "int8":
            ins[name] = torch.randint(-100, 100, (n,), device="cuda", dtype=torch.int8, generator=gen)
        else:
            ins[name] = torch.randn(n, device="cuda", dtype=getattr(torch, dt), generator=gen)
    return ins


def _outputs(c: dict) -> dict:
    import torch
    k, n = c["kernel"], c["n"]
    if k == "reduce":
        t = {"out": torch.empty(c["grid"], device="cuda", dtype=torch.float32)}
    elif k == "copy":
        t = {"y": torch.empty(n, device="cuda", dtype=getattr(torch, c["dtype"]))}
    elif k == "hist":
        return {"h": torch.zeros(c["const"]["NB"], device="cuda", dtype=torch.int32)}
    elif k == "asum":
        return {"out": torch.zeros(1, device="cuda", dtype=torch.int32)}
    else:
        t = {"o": torch.empty(n, device="cuda", dtype=torch.float32)}
    for v in t.values():
        v.view(torch.uint8).fill_(0x5A)   # a sentinel: an unwritten output never matches a written one
    return t


def _tlaunch(K, c: dict, sfx: str, tens: dict):
    DC.use_ptxas(sfx)
    fn = getattr(K, f"{c['kernel']}_{sfx}")
    args = [tens[name] if name in tens else c["n"] for name, _ty in DC.KERNEL_ARGS[c["kernel"]]]
    return fn[(c["grid"],)](*args, num_warps=c["warps"], **c["const"])


def _register(s, tensors: list, label: str) -> list:
    rs = []
    try:
        for i, t in enumerate(tensors):
            rs.append(s.register_timing_range(t.data_ptr(), t.numel() * t.element_size(), label=f"{label}.{i}"))
    except BaseException:
        _unregister(s, rs)
        raise
    return rs


def _unregister(s, rs: list) -> None:
    for r in rs:
        try:
            s.unregister(r)
        except Exception as e:  # noqa: BLE001
            log(f"unregister {getattr(r, 'range_id', r)}: {e}")


def _reg_tensors(c: dict, ins: dict, outs: dict) -> list:
    return list(ins.values()) + (list(outs.values()) if c.get("register") == "inout" else [])


def _brief_counters(d: dict) -> dict:
    return DC.csummary(d)


def _timing(rec: dict, key: str, launch, sync, reps: int, b2b: int = 0) -> None:
    """``key`` (one launch after an idle GPU, each rep) and, with ``b2b`` > 0, ``key`` with ``_b2b`` (the mean of
    ``b2b`` launches back to back, each rep: DC.event_times with n)."""
    if reps <= 0:
        return
    ms = DC.event_times(launch, reps, sync)
    rec[key] = {"median": DC.stats(ms)["median"], "all": [round(x, 5) for x in ms]}
    if b2b > 0:
        mb = DC.event_times(launch, reps, sync, n=b2b)
        rec[key.replace("_ms", "_b2b_ms")] = {"median": DC.stats(mb)["median"], "all": [round(x, 5) for x in mb],
                                              "launches": b2b}


def _b2b_for(ctx, first_s: float) -> int:
    """The back-to-back launches for the instrumented timing: none where ``b2b`` launches would take longer than
    twice the rep limit (the fast model's long kernels)."""
    return ctx.b2b if ctx.b2b > 0 and first_s * ctx.b2b <= 2.0 * ctx.rep_limit_s else 0


def run_triton(ctx: Ctx, c: dict, phase) -> dict:
    import torch
    K, s = ctx.K, ctx.s
    rec: dict = {}
    t = time.time()
    for sfx in ("plain", "hbf"):
        DC.warm(K, c, sfx)
    rec["warm_s"] = round(time.time() - t, 2)
    phase("run")
    gen = torch.Generator(device="cuda").manual_seed(1234)
    ins = _inputs(c, gen)
    po, ho = _outputs(c), _outputs(c)
    ctx.keep.append((ins, po, ho))
    torch.cuda.synchronize()
    kp = _tlaunch(K, c, "plain", {**ins, **po})
    torch.cuda.synchronize()
    ref = {k: v.clone() for k, v in po.items()}
    _timing(rec, "plain_ms", lambda: _tlaunch(K, c, "plain", {**ins, **po}), torch.cuda.synchronize, ctx.reps_plain,
            ctx.b2b)
    rec["kernel_plain"] = {"n_regs": getattr(kp, "n_regs", None), "n_spills": getattr(kp, "n_spills", None),
                           "shared": int(getattr(kp.metadata, "shared", 0) or 0),
                           "blocks_per_sm": DC.driver_blocks_per_sm(kp.function, c["threads"],
                                                                    int(getattr(kp.metadata, "shared", 0) or 0))}
    rs = _register(s, _reg_tensors(c, ins, ho), c["name"])
    try:
        before = s.counters(publish=False)["kernels"]
        phase("hbf")
        t0 = time.perf_counter()
        kh = _tlaunch(K, c, "hbf", {**ins, **ho})
        s.synchronize()
        rec["hbf_first_s"] = round(time.perf_counter() - t0, 4)
        after = s.counters(publish=False)["kernels"]
        rec["counters"] = _brief_counters(DC.kernel_delta(before, after, [f"{c['kernel']}_hbf"]))
        rec["kernel_hbf"] = DC.kernel_info(s, kh, c["threads"])
        bps = rec["kernel_hbf"]["blocks_per_sm"]
        if bps:
            rec["resident_blocks_hbf"] = bps * ctx.sms
            rec["grid_over_resident_hbf"] = round(c["grid"] / (bps * ctx.sms), 3)
        rec["identical"] = {k: DC.bytes_equal(ref[k], ho[k]) for k in ref}
        if c["kernel"] == "hist":
            rec["plain_hist_total_ok"] = int(ref["h"].sum().item()) == c["n"]
        phase("hbf-timing")
        if rec["hbf_first_s"] < ctx.rep_limit_s:
            _timing(rec, "hbf_ms", lambda: _tlaunch(K, c, "hbf", {**ins, **ho}), s.synchronize, ctx.reps_hbf,
                    _b2b_for(ctx, rec["hbf_first_s"]))
    finally:
        _unregister(s, rs)
    return _finished(rec)


def _finished(rec: dict) -> dict:
    """The case's status and, when both builds were timed, its instrumented/plain ratio."""
    rec["status"] = _status(rec)
    if rec.get("plain_ms") and rec.get("hbf_ms"):
        rec["ratio"] = rec["hbf_ms"]["median"] / rec["plain_ms"]["median"]
    if rec.get("plain_b2b_ms") and rec.get("hbf_b2b_ms"):
        rec["ratio_b2b"] = rec["hbf_b2b_ms"]["median"] / rec["plain_b2b_ms"]["median"]
    return rec


def _status(rec: dict) -> str:
    kh = rec.get("kernel_hbf") or {}
    if kh and not kh.get("has_hb_issue"):
        return "not_instrumented"
    if kh and not kh.get("admitted"):
        return "not_admitted"
    ident = rec.get("identical") or {}
    return "ok" if ident and all(ident.values()) else "mismatch"


def run_streams2(ctx: Ctx, c: dict, phase) -> dict:
    import torch
    K, s = ctx.K, ctx.s
    rec: dict = {}
    for p in c["parts"]:
        for sfx in ("plain", "hbf"):
            DC.warm(K, p, sfx)
    phase("run")
    gen = torch.Generator(device="cuda").manual_seed(99)
    parts = []
    for p in c["parts"]:
        parts.append((p, _inputs(p, gen), _outputs(p), _outputs(p)))
    ctx.keep.append(parts)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    torch.cuda.synchronize()

    def both(sfx: str):
        ks = []
        for (p, ins, po, ho), st in zip(parts, streams):
            with torch.cuda.stream(st):
                ks.append(_tlaunch(K, p, sfx, {**ins, **(po if sfx == "plain" else ho)}))
        return ks
    both("plain")
    torch.cuda.synchronize()
    refs = [{k: v.clone() for k, v in po.items()} for (_p, _i, po, _h) in parts]
    regs = []
    for p, ins, _po, ho in parts:
        regs += _reg_tensors(p, ins, ho)
    rs = _register(s, regs, c["name"])
    try:
        before = s.counters(publish=False)["kernels"]
        phase("hbf")
        t0 = time.perf_counter()
        ks = both("hbf")
        s.synchronize()
        rec["hbf_first_s"] = round(time.perf_counter() - t0, 4)
        after = s.counters(publish=False)["kernels"]
        rec["counters"] = {p["kernel"]: _brief_counters(DC.kernel_delta(before, after, [f"{p['kernel']}_hbf"]))
                           for p, *_r in parts}
        rec["kernel_hbf"] = {p["kernel"]: DC.kernel_info(s, k, p["threads"]) for (p, *_r), k in zip(parts, ks)}
        rec["identical"] = {f"{p['kernel']}.{k}": DC.bytes_equal(ref[k], ho[k])
                            for (p, _i, _po, ho), ref in zip(parts, refs) for k in ref}
    finally:
        _unregister(s, rs)
    st = [_status({"kernel_hbf": kh, "identical": {"x": True}}) for kh in rec["kernel_hbf"].values()]
    bad = [x for x in st if x != "ok"]
    rec["status"] = bad[0] if bad else ("ok" if all(rec["identical"].values()) else "mismatch")
    return rec


def _nv_tensors(c: dict, gen) -> tuple[dict, dict, list]:
    """inputs, outputs, argument list [("t", name) | ("i64", v) | ("u32", v)] of an nvcc case."""
    import torch
    k, p = c["kernel"], c["params"]

    def f32(n):
        return torch.randn(n, device="cuda", dtype=torch.float32, generator=gen)

    def sentinel(n, dt=torch.float32):
        t = torch.empty(n, device="cuda", dtype=dt)
        t.view(torch.uint8).fill_(0x5A)
        return t
    if k == "nv_copy4":
        n = 4 * p["n4"]
        return {"x": f32(n)}, {"y": sentinel(n)}, [("t", "x"), ("t", "y"), ("i64", p["n4"])]
    if k == "nv_copy1":
        return {"x": f32(p["n"])}, {"y": sentinel(p["n"])}, [("t", "x"), ("t", "y"), ("i64", p["n"])]
    if k == "nv_hist":
        x = torch.randint(0, 1 << 20, (p["n"],), device="cuda", dtype=torch.int32, generator=gen)
        return ({"x": x}, {"h": torch.zeros(p["nb"], device="cuda", dtype=torch.int32)},
                [("t", "x"), ("t", "h"), ("i64", p["n"]), ("u32", p["nb"])])
    if k == "nv_reduce":
        return {"x": f32(p["n"])}, {"out": sentinel(c["grid"])}, [("t", "x"), ("t", "out"), ("i64", p["n"])]
    if k == "nv_add4":
        n = 4 * p["n4"]
        ins = {q: f32(n) for q in "abcd"}
        return ins, {"o": sentinel(n)}, [("t", "a"), ("t", "b"), ("t", "c"), ("t", "d"), ("t", "o"), ("i64", p["n4"])]
    raise ValueError(f"unknown nvcc kernel {k}")


def _nv_args(spec: list, tens: dict) -> list:
    out = []
    for kind, v in spec:
        if kind == "t":
            out.append(ctypes.c_uint64(tens[v].data_ptr()))
        elif kind == "i64":
            out.append(ctypes.c_int64(int(v)))
        else:
            out.append(ctypes.c_uint32(int(v)))
    return out


def run_nvcc(ctx: Ctx, c: dict, phase) -> dict:
    import torch

    from runtime_cuda import cudrv
    s, nv = ctx.s, ctx.nv
    if nv is None:
        return {"status": "error", "error": f"nvcc kernels unavailable: {ctx.nv_error}"}
    phase("run")
    rec: dict = {"bind": nv["bind"]}
    k = c["kernel"]
    gen = torch.Generator(device="cuda").manual_seed(7)
    ins, po, spec = _nv_tensors(c, gen)
    ho = {q: (torch.zeros_like(v) if k == "nv_hist" else v.clone()) for q, v in po.items()}
    ctx.keep.append((ins, po, ho))
    grid, block = (c["grid"],), (c["threads"],)
    fp, fh, b = nv["plain"][k], nv["hbf"][k], nv["binding"]
    torch.cuda.synchronize()
    cudrv.launch(fp, grid, block, _nv_args(spec, {**ins, **po}))
    torch.cuda.synchronize()
    ref = {q: v.clone() for q, v in po.items()}
    _timing(rec, "plain_ms", lambda: cudrv.launch(fp, grid, block, _nv_args(spec, {**ins, **po})),
            torch.cuda.synchronize, ctx.reps_plain, ctx.b2b)
    rs = _register(s, _reg_tensors(c, ins, ho), c["name"])
    try:
        before = s.counters(publish=False)["kernels"]
        phase("hbf")
        t0 = time.perf_counter()
        s.launch(fh, grid, block, _nv_args(spec, {**ins, **ho}), kernel=k, binding=b)
        s.synchronize()
        rec["hbf_first_s"] = round(time.perf_counter() - t0, 4)
        after = s.counters(publish=False)["kernels"]
        rec["counters"] = _brief_counters(DC.kernel_delta(before, after, [k]))
        info = b.kernel(k)
        rec["kernel_hbf"] = {"has_hb_issue": bool(ctx.nv_has_hb), "admitted": bool(info and info.admitted),
                             "instrumented": bool(b.instrumented), "reasons": (info.reasons[:3] if info else None),
                             "blocks_per_sm": DC.driver_blocks_per_sm(fh, c["threads"], 0)}
        rec["identical"] = {q: DC.bytes_equal(ref[q], ho[q]) for q in ref}
        phase("hbf-timing")
        if rec["hbf_first_s"] < ctx.rep_limit_s:
            _timing(rec, "hbf_ms", lambda: s.launch(fh, grid, block, _nv_args(spec, {**ins, **ho}), kernel=k, binding=b),
                    s.synchronize, ctx.reps_hbf, _b2b_for(ctx, rec["hbf_first_s"]))
    finally:
        _unregister(s, rs)
    return _finished(rec)


def child(a) -> None:
    import torch

    import runtime_cuda
    work = Path(os.environ["TRITON_CACHE_DIR"]).parent
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    nvb = json.loads(Path(a.nvcc_json).read_text()) if a.nvcc_json and Path(a.nvcc_json).is_file() else {}
    cases = select(case_list(sms, quick=a.quick, nvcc=not a.no_nvcc), a.only)
    K = DC.load_kernels(work)
    if a.child == "compile":
        DC.emit("-", "ready", {"n_cases": 1, "sms": sms, "names": ["compile"]})
        DC.emit(0, "start", {"timeout": a.compile_timeout})
        t = time.time()
        res = DC.compile_all(DC.spec_jobs(K, specs_of(cases)), threads=a.compile_threads)
        DC.emit(0, "end", {"status": "ok" if all(v.get(b) == "ok" for v in res.values() for b in ("plain", "hbf"))
                           else "error", "seconds": round(time.time() - t, 1), "specializations": res})
        DC.emit("-", "done")
        sys.stdout.flush()
        os._exit(0)
    tmp = Path(tempfile.mkdtemp(prefix=f"hbf-devpath-{a.child}-"))
    prof = DC.source_profile(tmp, a.child)
    with DC.hbfd_daemon(tmp, prof) as sock:
        s = runtime_cuda.attach(socket=sock)
        s.install_triton_hooks()
        ctx = Ctx()
        ctx.K, ctx.s, ctx.sms = K, s, sms
        # every tensor a case launched on stays allocated for the child's life: torch's caching allocator
        # then never hands a later case an address an admitted launch received (issue 13 item 4 would
        # refuse that registration; this matrix is about the device path)
        ctx.keep = []
        ctx.reps_plain, ctx.reps_hbf, ctx.rep_limit_s = a.reps_plain, a.reps_hbf, a.rep_limit_s
        ctx.b2b = a.b2b
        ctx.nv, ctx.nv_error, ctx.nv_has_hb = None, nvb.get("error", "not built"), nvb.get("hbf_has_hb_issue")
        if nvb and "error" not in nvb and any(c["kind"] == "nvcc" for c in cases):
            try:
                ctx.nv = DC.bind_nvcc(s, nvb)
            except Exception as e:  # noqa: BLE001
                ctx.nv_error = f"bind failed: {type(e).__name__}: {e}"
        m = s.state.media
        DC.emit("-", "ready", {"n_cases": len(cases), "names": [c["name"] for c in cases], "sms": sms,
                               "media": {"timing_source": int(m.timing_source), "fixed_read_ns": int(m.fixed_read_ns),
                                         "fixed_write_ns": int(m.fixed_write_ns)},
                               "profile_timing_model": json.loads(prof.read_text())["timing_model"],
                               "nvcc_bind": ctx.nv["bind"] if ctx.nv else ctx.nv_error})
        for i in range(a.start, len(cases)):
            c = cases[i]
            DC.emit(i, "start", {"name": c["name"], "timeout": a.compile_timeout})

            def phase(name, i=i):
                DC.emit(i, "phase", {"phase": name, "timeout": a.case_timeout})
            t = time.time()
            try:
                run = {"triton": run_triton, "streams2": run_streams2, "nvcc": run_nvcc}[c["kind"]]
                rec = run(ctx, c, phase)
            except BaseException as e:  # noqa: BLE001
                kind = DC.classify_exception(e)
                rec = {"status": kind, **DC.exc_record(e)}
                if kind == "fault":
                    rec.update(name=c["name"], seconds=round(time.time() - t, 2))
                    DC.emit(i, "fault", rec)
                    sys.stdout.flush()
                    os._exit(3)
            rec.update(name=c["name"], seconds=round(time.time() - t, 2))
            DC.emit(i, "end", rec)
        DC.emit("-", "done")
        s.close()
    sys.stdout.flush()
    os._exit(0)


def select(cases: list[dict], only: str) -> list[dict]:
    if not only:
        return cases
    keys = [k for k in only.split(",") if k]
    return [c for c in cases if any(k in c["name"] for k in keys)]


# ------------------------------------------------------------------------------------------------
# parent
# ------------------------------------------------------------------------------------------------
def case_line(src: str, i: int, rec: dict) -> str:
    st = rec.get("status", "?")
    name = rec.get("name", "?")
    s = f"{src:9s} #{i:02d} {name:44s} {st:16s}"
    if rec.get("plain_ms"):
        s += f" plain {rec['plain_ms']['median']:.4f} ms"
    if rec.get("hbf_ms"):
        s += f" hbf {rec['hbf_ms']['median']:.4f} ms"
    elif rec.get("hbf_first_s") is not None:
        s += f" hbf(first, wall) {rec['hbf_first_s']:.3f} s"
    if rec.get("ratio"):
        s += f" x{rec['ratio']:.2f}"
    if rec.get("ratio_b2b"):
        s += f" (back to back x{rec['ratio_b2b']:.2f})"
    c = rec.get("counters") or {}
    c = c if "ops_total" in c else (next(iter(c.values()), {}) if c else {})
    ot = c.get("ops_total") or {}
    if ot.get("requests"):
        s += f" req {ot['requests']} ovh/req {ot.get('overhead_ns', 0) / ot['requests'] / 1e3:.2f} us"
    if st not in ("ok",):
        s += "  " + str(rec.get("detail") or rec.get("error") or "")[:200].replace("\n", " ")
    return s


def summarize(res: dict) -> dict:
    out = {}
    for src, d in res["sources"].items():
        cases = [c for c in d["cases"] if c]
        counts: dict = {}
        for c in cases:
            counts[c.get("status", "?")] = counts.get(c.get("status", "?"), 0) + 1
        ratios = [c["ratio"] for c in cases if c.get("ratio")]
        ratios_b2b = [c["ratio_b2b"] for c in cases if c.get("ratio_b2b")]
        out[src] = {"counts": counts, "not_ok": {c["name"]: c.get("status") for c in cases if c.get("status") != "ok"},
                    "ratio": DC.stats(ratios) if ratios else None,
                    "ratio_b2b": DC.stats(ratios_b2b) if ratios_b2b else None,
                    "all_ok": bool(cases) and all(c.get("status") == "ok" for c in cases)}
        ch = d.get("children") or []
        if ch and all(c.get("outcome") not in ("done", "hang", "fault", "budget") and c.get("next_start") == 0
                      for c in ch):   # no child got through its setup
            out[src]["setup_failed"] = (ch[-1].get("stderr_tail") or "")[-1500:]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"))
    ap.add_argument("--sources", default=DEFAULT_SOURCES, help=f"comma list of {', '.join(DC.SOURCES)}")
    ap.add_argument("--quick", action="store_true", help="one case per dimension (~2 min)")
    ap.add_argument("--only", default="", help="comma list of substrings of case names")
    ap.add_argument("--case-timeout", type=float, default=None,
                    help="seconds one step of a case (plain run, instrumented launch, timing) may take before the "
                         "case counts as a hang (default 10; --quick 6); the legitimate ones take well under 1 s")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="wall-time budget of the whole run, shared among the sources; cases past it are not_run "
                         "(default 540; --quick 300)")
    ap.add_argument("--setup-timeout", type=float, default=120.0, help="child start (torch, hbfd, attach)")
    ap.add_argument("--compile-timeout", type=float, default=300.0)
    ap.add_argument("--compile-threads", type=int, default=8)
    ap.add_argument("--reps-plain", type=int, default=5)
    ap.add_argument("--reps-hbf", type=int, default=3)
    ap.add_argument("--rep-limit-s", type=float, default=1.0, help="no instrumented reps when the checked launch took longer")
    ap.add_argument("--b2b", type=int, default=10,
                    help="also time this many launches back to back per rep (queued behind a GPU sleep: a workload's "
                         "launch train, where only the first follows an idle GPU); 0: off")
    ap.add_argument("--no-nvcc", action="store_true")
    ap.add_argument("--work", default="", help="work directory (Triton/hbfcc caches) to reuse across runs; default: a new one")
    ap.add_argument("--cpu-check", action="store_true",
                    help="no GPU: compile every Triton specialization for sm_90a (plain + hbfcc-ptxas), check admission")
    ap.add_argument("--child", default="")
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--nvcc-json", default="")
    a = ap.parse_args()
    if a.case_timeout is None:
        a.case_timeout = 6.0 if a.quick else 10.0
    if a.budget_s is None:
        a.budget_s = 300.0 if a.quick else 540.0
    if a.b2b < 0:
        ap.error(f"--b2b must be >= 0 (launches back to back; 0: off), got {a.b2b}")
    if a.child:
        child(a)
        return 0
    t_start = time.time()
    srcs = [x for x in a.sources.split(",") if x]
    for x in srcs:
        if x not in DC.SOURCES:
            ap.error(f"unknown source {x!r} (known: {', '.join(DC.SOURCES)})")
    out, jpath, work, env = DC.prepare_run(a.out, "devpath_matrix", a.work)
    if a.cpu_check:
        r = DC.cpu_check(DC.load_kernels(work), specs_of(select(case_list(132, quick=a.quick), a.only)))
        DC.write_json(out / "devpath_matrix_cpu_check.json", r)
        ok = all(v["ok"] for v in r.values())
        log(f"cpu-check: {sum(v['ok'] for v in r.values())}/{len(r)} specializations ok -> {out}")
        return 0 if ok else 1
    cmd = "python3 bench/devpath_matrix.py" + "".join(f" {x}" for x in sys.argv[1:] if not x.startswith("--out"))
    res: dict = {"what": "issue 13 goal 1: stress matrix, plain vs instrumented build with the inputs registered",
                 "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "command": cmd,
                 "gpu": DC.gpu_info(), "args": vars(a), "sources": {}}
    DC.write_json(jpath, res)
    common = ["--case-timeout", str(a.case_timeout), "--compile-timeout", str(a.compile_timeout),
              "--reps-plain", str(a.reps_plain), "--reps-hbf", str(a.reps_hbf), "--rep-limit-s", str(a.rep_limit_s), "--b2b", str(a.b2b),
              "--compile-threads", str(a.compile_threads)] + (["--quick"] if a.quick else []) + \
             (["--only", a.only] if a.only else []) + (["--no-nvcc"] if a.no_nvcc else [])
    if not a.no_nvcc:
        log("building the nvcc kernels (nvcc and hbfcc -cubin)")
        res["nvcc_build"] = DC.build_nvcc(work, env)
        (work / "nvcc.json").write_text(json.dumps(res["nvcc_build"]))
        common += ["--nvcc-json", str(work / "nvcc.json")]
        log(f"nvcc: {json.dumps(res['nvcc_build'])[:400]}")
    penv = dict(os.environ, PYTHONUNBUFFERED="1")
    argv0 = [sys.executable, str(Path(__file__).resolve())]

    log("compiling every Triton specialization (plain + hbf) into the shared cache")
    comp: dict = {}
    sv = DC.supervise(lambda st: argv0 + ["--child", "compile"] + common, n_cases=None,
                      case_timeout=a.compile_timeout, setup_timeout=a.setup_timeout,
                      on_record=lambda i, r: comp.update(r), err_dir=work / "stderr", tag="compile", env=penv)
    res["compile"] = {"status": comp.get("status"), "seconds": comp.get("seconds"),
                      "failed": {k: v for k, v in (comp.get("specializations") or {}).items()
                                 if any(x != "ok" for x in v.values())},
                      "n": len(comp.get("specializations") or {}), "children": sv["children"],
                      "error": comp.get("error") or comp.get("detail")}
    log(f"compile: {res['compile']['status']} in {comp.get('seconds')} s, {res['compile']['n']} specializations, "
        f"failed {list(res['compile']['failed'])[:6]}")
    DC.write_json(jpath, res)

    for si, src in enumerate(srcs):
        left = a.budget_s - (time.time() - t_start)
        stop_at = time.monotonic() + max(0.0, left) / (len(srcs) - si)
        log(f"=== source {src} (budget {max(0.0, left) / (len(srcs) - si):.0f} s)")
        # the names as the parent sees them (an H200 has 132 SMs; the child's ready line has the real ones)
        guess = [c["name"] for c in select(case_list(132, quick=a.quick, nvcc=not a.no_nvcc), a.only)]
        d = res["sources"][src] = {"cases": [None] * len(guess), "names": guess}

        def on_ready(obj, d=d):
            d["names"] = obj.get("names", d["names"])
            if len(d["cases"]) < len(d["names"]):
                d["cases"] += [None] * (len(d["names"]) - len(d["cases"]))
            for k in ("media", "profile_timing_model", "nvcc_bind", "sms"):
                if k in obj:
                    d[k] = obj[k]

        def on_record(i, rec, d=d, src=src):
            if i >= len(d["cases"]):
                d["cases"] += [None] * (i + 1 - len(d["cases"]))
            if "name" not in rec and i < len(d["names"]):
                rec["name"] = d["names"][i]
            d["cases"][i] = rec
            log(case_line(src, i, rec))
            DC.write_json(jpath, res)
        sv = DC.supervise(lambda st, src=src: argv0 + ["--child", src, "--start", str(st)] + common, n_cases=len(guess),
                          case_timeout=a.case_timeout, setup_timeout=a.setup_timeout, on_record=on_record,
                          on_ready=on_ready, err_dir=work / "stderr", tag=src, env=penv, stop_at=stop_at)
        d["children"] = sv["children"]
        d["budget_hit"] = sv["budget_hit"]
        res["summary"] = summarize(res)
        DC.write_json(jpath, res)
        log(f"{src}: {json.dumps(res['summary'][src]['counts'])}")
    res["summary"] = summarize(res)
    res["all_ok"] = all(v["all_ok"] for v in res["summary"].values())
    res["seconds"] = round(time.time() - t_start, 1)
    DC.write_json(jpath, res)
    log(json.dumps({k: v["counts"] for k, v in res["summary"].items()}))
    log(f"all_ok={res['all_ok']}  -> {jpath}")
    return 0 if res["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
