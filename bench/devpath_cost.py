#!/usr/bin/env python3
"""Issue 13 goals 2 and 3 on the GPU: what the device timing path costs, and who pays for it.

    PYTHONUNBUFFERED=1 python3 bench/devpath_cost.py --out $OUT/dc                      # 2-5 min (budget 540 s)
    PYTHONUNBUFFERED=1 python3 bench/devpath_cost.py --out $OUT/dc --parts unrelated --unrelated-gib 60
    python3 bench/devpath_cost.py --cpu-check --out DIR                                  # no GPU

Parts (each runs in a child process with its own hbfd and the source it needs; a watchdog per step
as in bench/devpath_matrix.py: a step that does not end in --launch-timeout is recorded as a hang):

* ``stream`` (fixed 0 ns): a bandwidth-bound fp16 streaming reduction and copy over --stream-gib
  (default 1 GiB; 16384 elements per program, 4 warps, grid = n / 16384 >> the resident capacity), and the
  same two with the loop unrolled by Triton (``sreduce``/``scopy``, tl.static_range: a straight-line body).
  The hbf build reads the registered tensor, the plain build an unregistered clone (the gate refuses a
  plain kernel on a registered range). --reps interleaved pairs: hbf/plain ratio (median, p10/p90,
  spread; goal <= 1.3), and per launch the helper's cost per request from the counters
  (overhead_ns / requests: the counters keep a SUM per kernel, so this is a per-launch mean).
* ``probe`` (fixed 0 ns): the per-request distribution from a dedicated probe, ``latprobe``: one
  warp per program, R dependent rounds of (%globaltimer, load whose address depends on it,
  %globaltimer once the value is there); idle (1 program) and at full occupancy (resident blocks per
  SM from the driver x SMs). Plain build, hbf on an unregistered tensor, hbf on the registered one;
  added = registered - median(unregistered hbf): with a 0 ns modeled latency that is the helper's
  issue + wait cost per warp-request.
* ``consume`` (fixed 2 us): a load, ~--work-ns of independent integer work (a fixed iteration count
  calibrated on the plain build: NOT a time-based spin, which would absorb the issue cost), then the
  use. added_total = median(registered total) - median(unregistered total), issue to use (goal <= 100 ns).
* ``little`` (fixed 20 us): latency-bound fp16 reductions with 1, 2 and 8 vector loads in flight per
  thread (8 waves of the resident grid): measured time vs Little's law (requests in flight = resident
  warps x requests per warp-round; time = requests / (in flight / latency)) and the discrete waves
  form; the counters per request (modeled_ns, wall_ns, service_ns, overhead_ns, wait_*) and the
  round time they explain (latency + k x issue cost + lateness) next to the measured round time.
* ``unrelated`` (fixed 0 ns): Triton matmuls (fp16 4096^3 and bf16 8192x8192x4096, the kernel of
  bench/triton_matmul_overhead.py) plain vs hbf, with nothing registered and with --unrelated-gib of
  bf16 tensors registered that they never touch (goal <= 1.02), then a bf16 matmul reading one of the
  registered tensors: it must run instrumented (counters show its requests) and match the plain build.

Writes <out>/devpath_cost.json after every part; progress on stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import devpath_common as DC  # noqa: E402
from devpath_common import log  # noqa: E402

STREAM_EPP, STREAM_BLOCK = 16384, 2048
STREAM_KERNELS = ("reduce", "copy", "sreduce", "scopy")   # s*: the loop unrolled by Triton
PROBE_R = 32
# (elements per program, per round): 1, 2, 8 loads/thread in flight; the last two both 8 in flight, one round per
# program (per-block costs -- prologue, first until, exit flush -- fall on every 20 us round) and eight (a stream)
LITTLE = ((8192, 512), (8192, 2048), (8192, 8192), (65536, 8192))
# parts in run order: (name, timing source, variant); one part = one watchdog "case"
PART_TABLE = ([(f"stream_{k}", "fixed0", k) for k in STREAM_KERNELS] + [("probe", "fixed0", None),
               ("unrelated", "fixed0", None), ("consume", "fixed2us", None)]
              + [(f"little_e{e}_b{b}", "fixed20us", (e, b)) for e, b in LITTLE])
PARTS = tuple(p[0] for p in PART_TABLE)
SOURCES_IN_ORDER = tuple(dict.fromkeys(p[1] for p in PART_TABLE))


def select_parts(spec: str) -> list[str]:
    """--parts: comma list of part names or prefixes (stream = stream_reduce + stream_copy)."""
    keys = [k for k in spec.split(",") if k]
    bad = [k for k in keys if not any(p.startswith(k) for p in PARTS)]
    if bad:
        raise SystemExit(f"unknown part(s) {', '.join(bad)} (known: {', '.join(PARTS)})")
    return [p for p in PARTS if any(p.startswith(k) for k in keys)]
LITTLE_WAVES = 8
MM_CFGS = (("fp16_4096_128x256x64_s3w8", "float16", 4096, 4096, 4096, 128, 256, 64, 8, 3, 8),
           ("bf16_8192x8192x4096_128x256x64_s3w8", "bfloat16", 8192, 8192, 4096, 128, 256, 64, 8, 3, 8))
MM_READ = 1024    # the matmul that reads a registered tensor: M = N = K (bf16, the bf16 config's tiles)


def stream_spec(kernel: str, gib: float) -> dict:
    n = int(gib * (1 << 30)) // 2 // STREAM_EPP * STREAM_EPP
    return {"kernel": kernel, "dtype": "float16", "const": {"EPP": STREAM_EPP, "BLOCK": STREAM_BLOCK}, "warps": 4,
            "threads": 128, "grid": n // STREAM_EPP, "n": n, "ints": [n]}


def probe_spec() -> dict:
    return {"kernel": "latprobe", "dtype": "int32", "const": {"R": PROBE_R}, "warps": 1, "threads": 32, "ints": []}


def consume_spec() -> dict:
    return {"kernel": "consume", "dtype": "int32", "const": {"R": PROBE_R}, "warps": 1, "threads": 32, "ints": [4096]}


def little_spec(epp: int, block: int, grid: int = 1) -> dict:
    return {"kernel": "reduce", "dtype": "float16", "const": {"EPP": epp, "BLOCK": block}, "warps": 4, "threads": 128,
            "grid": grid, "n": grid * epp, "ints": [grid * epp]}


def all_specs(a) -> list[dict]:
    return ([stream_spec(k, a.stream_gib) for k in STREAM_KERNELS] + [probe_spec(), consume_spec()]
            + [little_spec(e, b) for e, b in LITTLE])


def mm_source() -> str:
    """The Triton tutorial's grouped matmul (workloads/triton_kernels.py) as mm_plain and mm_hbf."""
    from triton_matmul_overhead import KERNELS

    from workloads import triton_kernels as TK
    return TK.source(KERNELS)


def mm_warm(Kmm, cfg, sfx: str):
    import torch
    _n, dt, M, N, Kd, BM, BN, BK, GM, ns, nw = cfg
    DC.use_ptxas(sfx)
    t = getattr(torch, dt)
    return getattr(Kmm, "mm_" + sfx).warmup(t, t, t, M, N, Kd, Kd, 1, N, 1, N, 1, grid=(1,), BM=BM, BN=BN, BK=BK,
                                            GM=GM, num_stages=ns, num_warps=nw)


def mm_launch(Kmm, cfg, sfx: str, A, B, C):
    _n, _dt, _M, _N, _K, BM, BN, BK, GM, ns, nw = cfg
    M, Kd = A.shape
    N = B.shape[1]
    DC.use_ptxas(sfx)
    grid = (-(-M // BM) * -(-N // BN),)
    return getattr(Kmm, "mm_" + sfx)[grid](A, B, C, M, N, Kd, A.stride(0), A.stride(1), B.stride(0), B.stride(1),
                                           C.stride(0), C.stride(1), BM=BM, BN=BN, BK=BK, GM=GM, num_stages=ns,
                                           num_warps=nw)


# ------------------------------------------------------------------------------------------------
# child
# ------------------------------------------------------------------------------------------------
class Ctx:
    pass


def _launch(ctx, c: dict, sfx: str, tens: dict, grid: int | None = None, ints: list | None = None):
    DC.use_ptxas(sfx)
    fn = getattr(ctx.K, f"{c['kernel']}_{sfx}")
    iv = list(ints if ints is not None else c.get("ints", ()))
    args = []
    for name, ty in DC.KERNEL_ARGS[c["kernel"]]:
        args.append(tens[name] if name in tens else iv.pop(0))
    return fn[(grid or c["grid"],)](*args, num_warps=c["warps"], **c["const"])


def _reg(ctx, t, label: str):
    return ctx.s.register_timing_range(t.data_ptr(), t.numel() * t.element_size(), label=label)


def _delta(ctx, before: dict, names) -> dict:
    return DC.csummary(DC.kernel_delta(before, ctx.s.counters(publish=False)["kernels"], names))


def _snap(ctx) -> dict:
    return ctx.s.counters(publish=False)["kernels"]


def _per_request(cs: dict, field: str = "overhead_ns") -> float | None:
    """field per request; helper time (overhead_ns) per request served by the helpers (the inline path's
    requests, cs["inline_requests"], have no measured helper time)."""
    ot = cs.get("ops_total") or {}
    n = ot.get("requests", 0) - (cs.get("inline_requests", 0) if field == "overhead_ns" else 0)
    return ot[field] / n if n > 0 and field in ot else None


def part_stream(ctx, a, phase, kname: str) -> dict:
    import torch
    out: dict = {"gib": a.stream_gib, "goal_ratio": 1.3, "kernel": kname}
    c = stream_spec(kname, a.stream_gib)
    phase(f"{kname}: compile", a.compile_timeout)
    for sfx in ("plain", "hbf"):
        DC.warm(ctx.K, c, sfx)
    phase(f"{kname}: plain", a.launch_timeout)
    x = torch.randn(c["n"], device="cuda", dtype=torch.float16)
    x2 = x.clone()
    if "out" in dict(DC.KERNEL_ARGS[kname]):      # a reduction (else a copy into y)
        po = {"out": torch.empty(c["grid"], device="cuda", dtype=torch.float32)}
        ho = {"out": torch.empty(c["grid"], device="cuda", dtype=torch.float32)}
    else:
        po = {"y": torch.empty_like(x)}
        ho = {"y": torch.empty_like(x)}
    ctx.keep.append((x, x2, po, ho))
    kp = _launch(ctx, c, "plain", {"x": x2, **po})
    torch.cuda.synchronize()
    r = _reg(ctx, x, f"stream.{kname}")
    rec: dict = {"n": c["n"], "grid": c["grid"], "bytes_read": c["n"] * 2, "config": c["const"]}
    try:
        b0 = _snap(ctx)
        phase(f"{kname}: hbf checked launch", a.launch_timeout)
        t0 = time.perf_counter()
        kh = _launch(ctx, c, "hbf", {"x": x, **ho})
        ctx.s.synchronize()
        rec["hbf_first_s"] = round(time.perf_counter() - t0, 4)
        rec["counters"] = _delta(ctx, b0, [f"{kname}_hbf"])
        rec["identical"] = all(DC.bytes_equal(po[k], ho[k]) for k in po)
        rec["kernel_hbf"] = DC.kernel_info(ctx.s, kh, 128)
        bps = rec["kernel_hbf"]["blocks_per_sm"]
        rec["kernel_plain_blocks_per_sm"] = DC.driver_blocks_per_sm(kp.function, 128, int(kp.metadata.shared or 0))
        if bps:
            rec["grid_over_resident_hbf"] = round(c["grid"] / (bps * ctx.sms), 2)
        if rec["hbf_first_s"] > a.rep_limit_s:
            rec["pairs"] = None
            rec["note"] = f"checked launch took {rec['hbf_first_s']} s > --rep-limit-s: no timing pairs"
        else:
            per_launch: list = []
            snap = [_snap(ctx)]

            def after_pair(i):
                phase(f"{kname}: pair {i + 1}", a.launch_timeout)
                d = _delta(ctx, snap[0], [f"{kname}_hbf"])
                snap[0] = _snap(ctx)
                per_launch.append(d)
            phase(f"{kname}: pairs", a.launch_timeout)
            rec["pairs"] = DC.pairs(lambda: _launch(ctx, c, "plain", {"x": x2, **po}),
                                    lambda: _launch(ctx, c, "hbf", {"x": x, **ho}), a.reps, ctx.s.synchronize,
                                    after_pair=after_pair)
            ovh = [v for v in (_per_request(d) for d in per_launch) if v is not None]
            rec["helper_ns_per_request_per_launch"] = DC.stats(ovh)
            rec["wait_overhead_ns_per_wait_per_launch"] = DC.stats(
                [d["per_wait"]["wait_overhead_ns"] for d in per_launch if (d.get("per_wait") or {}).get("wait_overhead_ns") is not None])
            rec["meets_goal"] = rec["pairs"]["pair_ratio"]["median"] <= out["goal_ratio"]
            rec["GBps_plain"] = c["n"] * 2 / (rec["pairs"]["plain_ms"]["median"] * 1e-3) / 1e9
            rec["GBps_hbf"] = c["n"] * 2 / (rec["pairs"]["hbf_ms"]["median"] * 1e-3) / 1e9
    finally:
        ctx.s.unregister(r)
    out.update(rec)
    log(f"stream {kname}: first {rec.get('hbf_first_s')} s, identical {rec.get('identical')}, ratio "
        f"{(rec.get('pairs') or {}).get('pair_ratio', {}).get('median')}")
    out["status"] = "ok" if out.get("identical") else "mismatch"
    return out


def _probe_lane0(t, G: int, R: int, cols: int = 1):
    """lane 0 of every (program, round >= 1): the warp-request's value (rounds 0 warm up)."""
    v = t.view(G, R, 32, cols)[:, 1:, 0, :].reshape(-1, cols).cpu().numpy().astype("int64")
    return v


def _prime(ctx, c: dict, tens_fn) -> object:
    """Load the hbf module (a grid-1 launch on scratch tensors, nothing registered: its native version)
    so that its occupancy can be read before the measured launches."""
    import torch
    tens = tens_fn(1)
    ctx.keep.append(tens)
    k = _launch(ctx, c, "hbf", tens, grid=1)
    torch.cuda.synchronize()
    return k


def part_probe(ctx, a, phase, _v=None) -> dict:
    import torch
    c = probe_spec()
    R = PROBE_R
    phase("compile", a.compile_timeout)
    for sfx in ("plain", "hbf"):
        DC.warm(ctx.K, c, sfx)

    def tens(G, src=None):
        return {"x": src if src is not None else torch.randint(0, 1000, (G * R * 32,), device="cuda", dtype=torch.int32),
                "t": torch.zeros(G * R * 32, device="cuda", dtype=torch.int64),
                "vout": torch.zeros(G * 32, device="cuda", dtype=torch.int32)}
    phase("prime", a.launch_timeout)
    kh = _prime(ctx, c, tens)
    bps, how = DC.resident_blocks_per_sm(kh, 32)
    Gfull = max(1, bps) * ctx.sms
    out: dict = {"R": R, "blocks_per_sm_hbf": bps, "blocks_per_sm_from": how, "full_programs": Gfull, "kernel_hbf": DC.kernel_info(ctx.s, kh, 32),
                 "what": "ns from a %globaltimer stamp before the load (its address depends on the stamp) to one "
                         "taken once the value is there, lane 0 of each warp, rounds 1..R-1"}
    x = torch.randint(0, 1000, (Gfull * R * 32,), device="cuda", dtype=torch.int32)
    x2 = x.clone()
    ctx.keep.append((x, x2))
    # the unregistered twin must lie outside [first range - 64 KiB guard, last range end) to take the inline
    # fast reject only; recorded so the baseline can be judged
    out["addresses"] = {"registered": hex(x.data_ptr()), "unregistered": hex(x2.data_ptr()), "bytes": x.numel() * 4}
    r = _reg(ctx, x, "probe.x")
    try:
        for mode, G in (("idle", 1), ("full", Gfull)):
            res: dict = {"programs": G}
            vals = {}
            for tag, sfx, src in (("plain", "plain", x2), ("hbf_unregistered", "hbf", x2), ("hbf_registered", "hbf", x)):
                phase(f"{mode}: {tag}", a.launch_timeout)
                tt = tens(G, src[: G * R * 32])
                ctx.keep.append(tt)
                b0 = _snap(ctx)
                _launch(ctx, c, sfx, tt, grid=G)
                ctx.s.synchronize()
                if sfx == "hbf":
                    res[f"counters_{tag}"] = _delta(ctx, b0, ["latprobe_hbf"])
                vals[tag] = _probe_lane0(tt["t"], G, R)[:, 0]
                res[tag] = DC.stats(vals[tag].tolist())
            base = statistics.median(vals["hbf_unregistered"].tolist())
            res["added_ns"] = DC.stats((vals["hbf_registered"] - base).tolist())
            res["added_vs_plain_ns"] = DC.stats((vals["hbf_registered"] - statistics.median(vals["plain"].tolist())).tolist())
            res["counters_helper_ns_per_request"] = _per_request(res.get("counters_hbf_registered") or {})
            out[mode] = res
            log(f"probe {mode}: registered p50 {res['hbf_registered'].get('median')} ns, unregistered p50 "
                f"{res['hbf_unregistered'].get('median')} ns, added p50 {res['added_ns'].get('median')} "
                f"p90 {res['added_ns'].get('p90')}; counters overhead/request {res['counters_helper_ns_per_request']}")
    finally:
        ctx.s.unregister(r)
    out["status"] = "ok"
    return out


def part_consume(ctx, a, phase, _v=None) -> dict:
    import torch
    c = consume_spec()
    R = PROBE_R
    phase("compile", a.compile_timeout)
    for sfx in ("plain", "hbf"):
        DC.warm(ctx.K, c, sfx)
    G_busy = ctx.sms
    x = torch.randint(0, 1000, (G_busy * R * 32,), device="cuda", dtype=torch.int32)
    x2 = x.clone()
    ctx.keep.append((x, x2))

    def run(sfx, src, G, iters):
        tt = {"x": src[: G * R * 32], "t": torch.zeros(G * R * 32 * 3, device="cuda", dtype=torch.int64),
              "vout": torch.zeros(G * 32, device="cuda", dtype=torch.int32)}
        ctx.keep.append(tt)
        b0 = _snap(ctx)
        _launch(ctx, c, sfx, tt, grid=G, ints=[iters])
        ctx.s.synchronize()
        cs = _delta(ctx, b0, ["consume_hbf"]) if sfx == "hbf" else None
        v = _probe_lane0(tt["t"], G, R, 3)
        return {"work": v[:, 0], "exposed": v[:, 1], "total": v[:, 2]}, cs, tt["vout"]
    phase("calibrate", a.launch_timeout)
    it0 = 4096
    v0, _cs, _vo = run("plain", x2, 1, it0)
    w0 = statistics.median(v0["work"].tolist())
    iters = max(16, int(round(it0 * a.work_ns / max(1.0, w0))))
    out: dict = {"latency_ns": ctx.fixed_read_ns, "work_goal_ns": a.work_ns, "iters": iters,
                 "calibration": {"iters": it0, "work_median_ns": w0}, "goal_added_ns": 100,
                 "addresses": {"registered": hex(x.data_ptr()), "unregistered": hex(x2.data_ptr())},
                 "what": "total = issue-to-use on %globaltimer (stamp before the load .. stamp once the value is "
                         "used), work = before the load .. after the work, exposed = after the work .. use"}
    r = _reg(ctx, x, "consume.x")
    try:
        for mode, G in (("idle", 1), ("one_warp_per_sm", G_busy)):
            res: dict = {"programs": G}
            vals, vouts = {}, {}
            for tag, sfx, src in (("plain", "plain", x2), ("hbf_unregistered", "hbf", x2), ("hbf_registered", "hbf", x)):
                phase(f"{mode}: {tag}", a.launch_timeout)
                v, cs, vo = run(sfx, src, G, iters)
                vals[tag], vouts[tag] = v, vo
                res[tag] = {k: DC.stats(arr.tolist()) for k, arr in v.items()}
                if cs is not None:
                    res[f"counters_{tag}"] = cs
            m = {t: {k: statistics.median(vals[t][k].tolist()) for k in ("work", "exposed", "total")} for t in vals}
            res["added_total_ns"] = m["hbf_registered"]["total"] - m["hbf_unregistered"]["total"]
            res["added_total_vs_plain_ns"] = m["hbf_registered"]["total"] - m["plain"]["total"]
            res["added_exposed_ns"] = m["hbf_registered"]["exposed"] - m["hbf_unregistered"]["exposed"]
            res["added_work_ns"] = m["hbf_registered"]["work"] - m["hbf_unregistered"]["work"]
            res["values_identical"] = DC.bytes_equal(vouts["plain"], vouts["hbf_registered"])
            res["meets_goal"] = res["added_total_ns"] <= out["goal_added_ns"]
            out[mode] = res
            log(f"consume {mode}: work p50 {m['plain']['work']:.0f} ns; added total {res['added_total_ns']:.0f} ns "
                f"(vs plain {res['added_total_vs_plain_ns']:.0f}), exposed {res['added_exposed_ns']:.0f}, "
                f"issue side (work) {res['added_work_ns']:.0f}")
    finally:
        ctx.s.unregister(r)
    out["status"] = "ok" if all(out[m]["values_identical"] for m in ("idle", "one_warp_per_sm")) else "mismatch"
    return out


def little_model(*, grid: int, resident_blocks: int, warps: int, rounds: int, total_requests: int, latency_ns: int,
                 measured_ns: float, counters: dict) -> dict:
    """Little's-law and waves predictions of a latency-bound stream, and what the counters explain."""
    in_flight_blocks = min(grid, resident_blocks)
    k = total_requests / (grid * warps * rounds) if grid and rounds else 0.0
    ot = counters.get("ops_total") or {}
    bpr = ot.get("bytes", 0) / total_requests if total_requests else None
    ll = DC.littles_law(total_requests=total_requests, warps_in_flight=in_flight_blocks * warps,
                        inflight_per_warp=k, latency_ns=latency_ns, bytes_per_request=bpr)
    wv = DC.waves_time_ns(grid=grid, resident_blocks=resident_blocks, rounds_per_block=rounds, round_ns=latency_ns)
    pr = counters.get("per_request") or {}
    pw = counters.get("per_wait") or {}
    round_meas = measured_ns * in_flight_blocks / (grid * rounds)
    explained = latency_ns + k * pr.get("overhead_ns", 0.0) + pw.get("wait_overhead_ns", 0.0)
    return {"requests_per_warp_round": k, "warps_in_flight": in_flight_blocks * warps, "little": ll,
            "waves_ns": wv, "measured_ns": measured_ns, "measured_over_little": measured_ns / ll["time_ns"],
            "measured_over_waves": measured_ns / wv, "within_5pct": abs(measured_ns / ll["time_ns"] - 1.0) <= 0.05,
            "round_measured_ns": round_meas, "round_explained_ns": explained,
            "round_explained_terms": {"latency_ns": latency_ns, "k_x_overhead_per_request_ns": k * pr.get("overhead_ns", 0.0),
                                      "lateness_per_wait_ns": pw.get("wait_overhead_ns", 0.0)},
            "per_request": pr, "per_wait": pw}


def part_little(ctx, a, phase, variant) -> dict:
    import torch
    L = ctx.fixed_read_ns
    out: dict = {"latency_ns": L, "waves": LITTLE_WAVES, "goal": "measured within 5 % of Little's law"}
    epp, block = variant
    c0 = little_spec(epp, block)
    key = f"e{epp}_b{block}"
    phase(f"{key}: compile", a.compile_timeout)
    for sfx in ("plain", "hbf"):
        DC.warm(ctx.K, c0, sfx)
    phase(f"{key}: prime", a.launch_timeout)
    kh = _prime(ctx, c0, lambda G: {"x": torch.zeros(G * epp, device="cuda", dtype=torch.float16),
                                    "out": torch.zeros(G, device="cuda", dtype=torch.float32)})
    bps, how = DC.resident_blocks_per_sm(kh, 128)
    bps = max(1, bps)
    resident = bps * ctx.sms
    grid = LITTLE_WAVES * resident
    c = little_spec(epp, block, grid)
    rounds = epp // block
    x = torch.randn(c["n"], device="cuda", dtype=torch.float16)
    x2 = x.clone()
    po = {"out": torch.empty(grid, device="cuda", dtype=torch.float32)}
    ho = {"out": torch.empty(grid, device="cuda", dtype=torch.float32)}
    ctx.keep.append((x, x2, po, ho))
    rec: dict = {"config": c["const"], "grid": grid, "blocks_per_sm_hbf": bps, "blocks_per_sm_from": how,
                 "resident_blocks": resident,
                 "rounds_per_program": rounds, "loads_per_thread_per_round": block * 2 // 128 // 16 or 1,
                 "kernel_hbf": DC.kernel_info(ctx.s, kh, 128)}
    phase(f"{key}: plain", a.launch_timeout)
    _launch(ctx, c, "plain", {"x": x2, **po})
    torch.cuda.synchronize()
    rec["plain_ms"] = DC.stats(DC.event_times(lambda: _launch(ctx, c, "plain", {"x": x2, **po}), 3,
                                              torch.cuda.synchronize))
    r = _reg(ctx, x, f"little.{key}")
    try:
        b0 = _snap(ctx)
        phase(f"{key}: hbf checked launch", a.launch_timeout)
        t0 = time.perf_counter()
        _launch(ctx, c, "hbf", {"x": x, **ho})
        ctx.s.synchronize()
        rec["hbf_first_s"] = round(time.perf_counter() - t0, 4)
        cs = _delta(ctx, b0, ["reduce_hbf"])
        rec["counters"] = cs
        rec["identical"] = DC.bytes_equal(po["out"], ho["out"])
        if rec["hbf_first_s"] <= a.rep_limit_s:
            phase(f"{key}: hbf reps", a.launch_timeout)
            rec["hbf_ms"] = DC.stats(DC.event_times(lambda: _launch(ctx, c, "hbf", {"x": x, **ho}), 3,
                                                    ctx.s.synchronize))
            meas = rec["hbf_ms"]["median"] * 1e6
        else:
            meas = rec["hbf_first_s"] * 1e9
            rec["note"] = "measured = the checked launch's wall time (it took longer than --rep-limit-s)"
        req = (cs.get("ops_total") or {}).get("requests", 0)
        if req:
            rec["model"] = little_model(grid=grid, resident_blocks=resident, warps=4, rounds=rounds,
                                        total_requests=req, latency_ns=L, measured_ns=meas, counters=cs)
            mo = rec["model"]
            log(f"little {key}: measured {meas / 1e3:.1f} us, Little {mo['little']['time_ns'] / 1e3:.1f} us "
                f"(x{mo['measured_over_little']:.2f}), waves {mo['waves_ns'] / 1e3:.1f} us; round measured "
                f"{mo['round_measured_ns']:.0f} ns vs explained {mo['round_explained_ns']:.0f} ns; "
                f"k={mo['requests_per_warp_round']:.2f}")
        else:
            rec["model"] = None
            log(f"little {key}: no requests counted")
    finally:
        ctx.s.unregister(r)
    out.update(rec)
    out["status"] = "ok" if out.get("identical") else "mismatch"
    return out


def part_unrelated(ctx, a, phase, _v=None) -> dict:
    import torch
    Kmm = ctx.Kmm
    out: dict = {"registered_gib": a.unrelated_gib, "goal_ratio": 1.02, "reps": a.mm_reps}
    phase("compile", a.compile_timeout)
    for cfg in MM_CFGS:
        for sfx in ("plain", "hbf"):
            mm_warm(Kmm, cfg, sfx)
    torch.manual_seed(0)
    setups = {}
    for cfg in MM_CFGS:
        name, dt, M, N, Kd = cfg[:5]
        t = getattr(torch, dt)
        A = torch.randn(M, Kd, device="cuda", dtype=t)
        B = torch.randn(Kd, N, device="cuda", dtype=t)
        Cp, Ch = torch.empty(M, N, device="cuda", dtype=t), torch.empty(M, N, device="cuda", dtype=t)
        ctx.keep.append((A, B, Cp, Ch))
        setups[name] = (cfg, A, B, Cp, Ch)

    def measure(state: str) -> None:
        for name, (cfg, A, B, Cp, Ch) in setups.items():
            phase(f"{state}: {name}", a.launch_timeout)
            for _ in range(3):
                mm_launch(Kmm, cfg, "plain", A, B, Cp)
                mm_launch(Kmm, cfg, "hbf", A, B, Ch)
            ctx.s.synchronize()
            b0 = _snap(ctx)
            p = DC.pairs(lambda: mm_launch(Kmm, cfg, "plain", A, B, Cp), lambda: mm_launch(Kmm, cfg, "hbf", A, B, Ch),
                         a.mm_reps, ctx.s.synchronize)
            p["hbf_counters"] = _delta(ctx, b0, ["mm_hbf"])
            p["identical"] = DC.bytes_equal(Cp, Ch)
            p["meets_goal"] = p["pair_ratio"]["median"] <= out["goal_ratio"]
            out.setdefault(name, {})[state] = p
            log(f"unrelated {name} [{state}]: plain {p['plain_ms']['median']:.3f} ms hbf {p['hbf_ms']['median']:.3f} ms "
                f"pair ratio {p['pair_ratio']['median']:.4f} (p10 {p['pair_ratio']['p10']:.4f} p90 {p['pair_ratio']['p90']:.4f})")
    measure("nothing_registered")
    phase("register", a.launch_timeout + a.unrelated_gib)
    t0 = time.time()
    regs, rs = [], []
    try:
        for i in range(int(a.unrelated_gib)):
            t = torch.empty(1 << 29, device="cuda", dtype=torch.bfloat16)
            if i == 0:
                t.normal_()
            regs.append(t)
            rs.append(_reg(ctx, t, f"unrelated.{i}"))
        ctx.keep.append(regs)
        out["register_s"] = round(time.time() - t0, 2)
        out["ranges"] = len(rs)
        log(f"unrelated: {len(rs)} x 1 GiB bf16 registered in {out['register_s']} s")
        measure("registered_elsewhere")
        # a matmul that reads a registered tensor: must run instrumented
        phase("reading a registered tensor", a.launch_timeout)
        cfg = MM_CFGS[1]
        n = MM_READ
        Ar = regs[0][: n * n].view(n, n)
        Ac = Ar.clone()
        Br = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        C1 = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
        C2 = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
        ctx.keep.append((Ac, Br, C1, C2))
        mm_launch(Kmm, cfg, "plain", Ac, Br, C1)
        torch.cuda.synchronize()
        b0 = _snap(ctx)
        t1 = time.perf_counter()
        mm_launch(Kmm, cfg, "hbf", Ar, Br, C2)
        ctx.s.synchronize()
        rd = {"M=N=K": n, "seconds": round(time.perf_counter() - t1, 4), "counters": _delta(ctx, b0, ["mm_hbf"]),
              "identical": DC.bytes_equal(C1, C2)}
        rd["requests"] = (rd["counters"].get("ops_total") or {}).get("requests", 0)
        rd["runs_instrumented"] = rd["requests"] > 0
        out["reading_registered"] = rd
        log(f"unrelated: matmul reading a registered tensor: {rd['requests']} requests, identical {rd['identical']}")
    finally:
        for r in rs:
            ctx.s.unregister(r)
    ok = all(v[s]["identical"] for k, v in out.items() if isinstance(v, dict) and "nothing_registered" in v
             for s in ("nothing_registered", "registered_elsewhere") if s in v)
    out["status"] = "ok" if ok and out.get("reading_registered", {}).get("identical") else "mismatch"
    return out


PART_FN = {"stream": part_stream, "probe": part_probe, "consume": part_consume, "little": part_little,
           "unrelated": part_unrelated}


def part_run(name: str):
    """(function, variant) of a part."""
    variant = {p[0]: p[2] for p in PART_TABLE}[name]
    return PART_FN[name.split("_")[0]], variant


def child(a) -> None:
    import torch

    import runtime_cuda
    work = Path(os.environ["TRITON_CACHE_DIR"]).parent
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    K = DC.load_kernels(work)
    Kmm = DC.import_source(work / "tk_devpath_mm.py", mm_source(), "tk_devpath_mm")
    if a.child == "compile":
        DC.emit("-", "ready", {"n_cases": 1, "sms": sms, "names": ["compile"]})
        DC.emit(0, "start", {"timeout": a.compile_timeout})
        t = time.time()
        jobs = DC.spec_jobs(K, all_specs(a))
        for cfg in MM_CFGS:
            jobs[f"mm:{cfg[0]}"] = lambda sfx, cfg=cfg: mm_warm(Kmm, cfg, sfx)
        res = DC.compile_all(jobs, threads=a.compile_threads)
        DC.emit(0, "end", {"status": "ok" if all(v.get(b) == "ok" for v in res.values() for b in ("plain", "hbf"))
                           else "error", "seconds": round(time.time() - t, 1), "specializations": res})
        DC.emit("-", "done")
        sys.stdout.flush()
        os._exit(0)
    parts = [p for p in select_parts(a.parts) if dict((q[0], q[1]) for q in PART_TABLE)[p] == a.child]
    tmp = Path(tempfile.mkdtemp(prefix=f"hbf-devcost-{a.child}-"))
    prof = DC.source_profile(tmp, a.child)
    with DC.hbfd_daemon(tmp, prof) as sock:
        s = runtime_cuda.attach(socket=sock)
        s.install_triton_hooks()
        ctx = Ctx()
        ctx.K, ctx.Kmm, ctx.s, ctx.sms, ctx.keep = K, Kmm, s, sms, []
        ctx.fixed_read_ns = int(s.state.media.fixed_read_ns)
        DC.emit("-", "ready", {"n_cases": len(parts), "names": parts, "sms": sms,
                               "media": {"timing_source": int(s.state.media.timing_source),
                                         "fixed_read_ns": int(s.state.media.fixed_read_ns),
                                         "fixed_write_ns": int(s.state.media.fixed_write_ns)}})
        for i in range(a.start, len(parts)):
            name = parts[i]
            DC.emit(i, "start", {"name": name, "timeout": a.compile_timeout})

            def phase(what, timeout, i=i):
                DC.emit(i, "phase", {"phase": what, "timeout": timeout})
            t = time.time()
            try:
                fn, variant = part_run(name)
                rec = fn(ctx, a, phase, variant)
            except BaseException as e:  # noqa: BLE001
                kind = DC.classify_exception(e)
                rec = {"status": kind, **DC.exc_record(e)}
                if kind == "fault":
                    rec.update(name=name, seconds=round(time.time() - t, 1))
                    DC.emit(i, "fault", rec)
                    sys.stdout.flush()
                    os._exit(3)
            rec.update(name=name, seconds=round(time.time() - t, 1), source=a.child)
            DC.emit(i, "end", rec)
        DC.emit("-", "done")
        s.close()
    sys.stdout.flush()
    os._exit(0)


# ------------------------------------------------------------------------------------------------
# parent
# ------------------------------------------------------------------------------------------------
def _get(d, *path):
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def summarize(parts: dict) -> dict:
    """The numbers of the issue's goals, from the part records."""
    s: dict = {}
    for k in STREAM_KERNELS:
        st = parts.get(f"stream_{k}")
        if st:
            s[f"stream_{k}_ratio"] = {"median": _get(st, "pairs", "pair_ratio", "median"),
                                      "p10": _get(st, "pairs", "pair_ratio", "p10"),
                                      "p90": _get(st, "pairs", "pair_ratio", "p90"),
                                      "goal": 1.3, "meets": st.get("meets_goal"),
                                      "helper_ns_per_request_per_launch_median":
                                          _get(st, "helper_ns_per_request_per_launch", "median")}
    pr = parts.get("probe") or {}
    for m in ("idle", "full"):
        if m in pr:
            s[f"probe_{m}_added_ns"] = {q: _get(pr, m, "added_ns", q) for q in ("median", "p10", "p90", "p99")} | {
                "counters_helper_ns_per_request": _get(pr, m, "counters_helper_ns_per_request")}
    co = parts.get("consume") or {}
    for m in ("idle", "one_warp_per_sm"):
        if m in co:
            s[f"consume_{m}_added_total_ns"] = {"value": _get(co, m, "added_total_ns"), "goal": 100,
                                               "meets": _get(co, m, "meets_goal")}
    for e, b in LITTLE:
        li = parts.get(f"little_e{e}_b{b}")
        if li:
            s[f"little_e{e}_b{b}"] = {"measured_over_little": _get(li, "model", "measured_over_little"),
                                      "within_5pct": _get(li, "model", "within_5pct"),
                                      "round_measured_ns": _get(li, "model", "round_measured_ns"),
                                      "round_explained_ns": _get(li, "model", "round_explained_ns")}
    un = parts.get("unrelated") or {}
    for cfg in MM_CFGS:
        if cfg[0] in un:
            s[f"unrelated_{cfg[0]}"] = {st_: _get(un, cfg[0], st_, "pair_ratio", "median")
                                        for st_ in ("nothing_registered", "registered_elsewhere")} | {
                "goal": 1.02, "meets": _get(un, cfg[0], "registered_elsewhere", "meets_goal")}
    if "reading_registered" in un:
        s["unrelated_reading_registered"] = {"requests": _get(un, "reading_registered", "requests"),
                                             "identical": _get(un, "reading_registered", "identical")}
    s["status"] = {k: v.get("status") for k, v in parts.items()}
    return s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"))
    ap.add_argument("--parts", default="stream,probe,unrelated,consume,little",
                    help=f"comma list of part names or prefixes ({', '.join(PARTS)})")
    ap.add_argument("--stream-gib", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=9, help="interleaved plain/hbf pairs of the stream (>= 7)")
    ap.add_argument("--mm-reps", type=int, default=15)
    ap.add_argument("--work-ns", type=int, default=20_000, help="independent work between a load and its use")
    ap.add_argument("--unrelated-gib", type=int, default=8, help="GiB of bf16 tensors registered (issue: 60)")
    ap.add_argument("--launch-timeout", type=float, default=10.0,
                    help="seconds one step (a launch and its synchronize, a timing pair) may take before the part "
                         "counts as a hang")
    ap.add_argument("--budget-s", type=float, default=540.0,
                    help="wall-time budget of the whole run, shared among the sources; parts past it are not_run")
    ap.add_argument("--rep-limit-s", type=float, default=2.0, help="no timing reps when the checked launch took longer")
    ap.add_argument("--setup-timeout", type=float, default=120.0)
    ap.add_argument("--compile-timeout", type=float, default=300.0)
    ap.add_argument("--compile-threads", type=int, default=8)
    ap.add_argument("--cpu-check", action="store_true", help="no GPU: compile the Triton kernels for sm_90a, check admission")
    ap.add_argument("--work", default="", help="work directory (Triton/hbfcc caches) to reuse across runs; default: a new one")
    ap.add_argument("--child", default="")
    ap.add_argument("--start", type=int, default=0)
    a = ap.parse_args()
    select_parts(a.parts)
    if a.reps < 1 or a.mm_reps < 1 or a.unrelated_gib < 0 or a.stream_gib <= 0:
        ap.error("--reps/--mm-reps must be >= 1, --unrelated-gib >= 0, --stream-gib > 0")
    if a.child:
        child(a)
        return 0
    t_start = time.time()
    out, jpath, work, env = DC.prepare_run(a.out, "devpath_cost", a.work)
    if a.cpu_check:
        r = DC.cpu_check(DC.load_kernels(work), all_specs(a))
        DC.write_json(out / "devpath_cost_cpu_check.json", r)
        log(f"cpu-check: {sum(v['ok'] for v in r.values())}/{len(r)} specializations ok -> {out}")
        return 0 if all(v["ok"] for v in r.values()) else 1
    cmd = "python3 bench/devpath_cost.py" + "".join(f" {x}" for x in sys.argv[1:] if not x.startswith("--out"))
    res: dict = {"what": "issue 13 goals 2-3: device timing path cost, latency overlap, Little's law, unrelated kernels",
                 "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "command": cmd, "gpu": DC.gpu_info(),
                 "args": vars(a), "parts": {}}
    DC.write_json(jpath, res)
    common = ["--parts", a.parts, "--stream-gib", str(a.stream_gib), "--reps", str(a.reps), "--mm-reps", str(a.mm_reps),
              "--work-ns", str(a.work_ns), "--unrelated-gib", str(a.unrelated_gib),
              "--launch-timeout", str(a.launch_timeout), "--rep-limit-s", str(a.rep_limit_s),
              "--compile-timeout", str(a.compile_timeout), "--compile-threads", str(a.compile_threads)]
    penv = dict(os.environ, PYTHONUNBUFFERED="1")
    argv0 = [sys.executable, str(Path(__file__).resolve())]
    log("compiling the Triton kernels (plain + hbf) into the shared cache")
    comp: dict = {}
    sv = DC.supervise(lambda st: argv0 + ["--child", "compile"] + common, n_cases=None, case_timeout=a.compile_timeout,
                      setup_timeout=a.setup_timeout, on_record=lambda i, r: comp.update(r), err_dir=work / "stderr",
                      tag="compile", env=penv)
    res["compile"] = {"status": comp.get("status"), "seconds": comp.get("seconds"),
                      "failed": {k: v for k, v in (comp.get("specializations") or {}).items()
                                 if any(x != "ok" for x in v.values())},
                      "children": sv["children"], "error": comp.get("error") or comp.get("detail")}
    log(f"compile: {res['compile']['status']} in {comp.get('seconds')} s; failed {list(res['compile']['failed'])}")
    DC.write_json(jpath, res)
    wanted = select_parts(a.parts)
    groups = [(src, [p for p, s_, _v in PART_TABLE if s_ == src and p in wanted]) for src in SOURCES_IN_ORDER]
    groups = [(src, names) for src, names in groups if names]
    n_left = sum(len(nm) for _s, nm in groups)
    for src, names in groups:
        left = max(0.0, a.budget_s - (time.time() - t_start))
        share = left * len(names) / n_left     # the budget left, shared by part
        n_left -= len(names)
        stop_at = time.monotonic() + share
        log(f"=== {src}: {', '.join(names)} (budget {share:.0f} s)")

        def on_record(i, rec, names=names, src=src):
            name = rec.get("name") or names[i]
            rec.setdefault("source", src)
            res["parts"][name] = rec
            res["summary"] = summarize(res["parts"])
            DC.write_json(jpath, res)
            log(f"part {name}: {rec.get('status')} in {rec.get('seconds')} s "
                f"{str(rec.get('detail') or rec.get('error') or '')[:300]}")
        sv = DC.supervise(lambda st, src=src: argv0 + ["--child", src, "--start", str(st)] + common,
                          n_cases=len(names),
                          case_timeout=a.launch_timeout, setup_timeout=a.setup_timeout, on_record=on_record,
                          err_dir=work / "stderr", tag=src, env=penv, stop_at=stop_at)
        res.setdefault("children", {})[src] = sv["children"]
        DC.write_json(jpath, res)
    res["summary"] = summarize(res["parts"])
    res["seconds"] = round(time.time() - t_start, 1)
    DC.write_json(jpath, res)
    log(json.dumps(res["summary"], default=str)[:3000])
    log(f"-> {jpath}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
