#!/usr/bin/env python3
"""Eidola experiments on one GPU (issue 7): E0 engine calibration/enactment error, E1 spin-wait flag
reads vs delay, E2 monitor/mwait (+ co-runner), E3 eidolon-count scaling, E4 input-size scaling,
timelines, device-side register_write, replay vs real ranks (bitwise).

    python3 bench/eidola_experiments.py --out bench/results            # everything
    python3 bench/eidola_experiments.py --only E1 --out /tmp/x         # one experiment

Each experiment runs in its own subprocess (a device trap or hang in one cannot lose the
others) and writes bench/results/eidola_<name>.json (+ PNG). eidola's module (eidola/src/eidola_kernels.cu)
and the workload's (workloads/gemv_allreduce/gemv_allreduce.cu) are built once with nvcc, as cubins.
"""
from __future__ import annotations

import argparse
import json
import logging
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hbfcommon.fsutil import atomic_write_json  # noqa: E402

import numpy as np  # noqa: E402

EXPERIMENTS = ("E0", "E1", "E2", "E3", "TL", "PASS", "REG", "E4")
log = logging.getLogger("eidola_bench")


def _json_default(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(type(o))


def _write(out: Path, name: str, obj: dict) -> Path:
    return atomic_write_json(out / f"eidola_{name}.json", obj, indent=1, default=_json_default)


def _device_info() -> dict:
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        return {"nvidia_smi": r.stdout.strip()}
    except Exception as e:  # noqa: BLE001
        return {"nvidia_smi_error": str(e)}


def _dist(x) -> dict:
    a = np.asarray(x, dtype=np.float64)
    if a.size == 0:
        return {"n": 0}
    return {"n": int(a.size), "mean": float(a.mean()), "median": float(np.median(a)),
            "std": float(a.std()), "p05": float(np.percentile(a, 5)), "p95": float(np.percentile(a, 95)),
            "p99": float(np.percentile(a, 99)), "min": float(a.min()), "max": float(a.max())}


def _runtime(module_path):
    from eidola.replay import EidolaRuntime
    return EidolaRuntime.create(module=module_path)


# ------------------------------------------------------------------------------------------------
# E0: engine (a) enactment timing, measured with the timing-lab probe (eidola_kernels.cu
# hbf_eidola_tprobe). name: (load kind, pipelined, pollers, staggered)
E0_PROBES = {
    "acquire.sys/dep/P1": ("acquire.sys", 0, 1, 0),      # the probe of the earlier E0 rows
    "acquire.sys/dep/P8": ("acquire.sys", 0, 8, 0),
    "relaxed.gpu/dep/P1": ("relaxed.gpu", 0, 1, 0),
    "volatile/dep/P1": ("volatile", 0, 1, 0),
    "relaxed.gpu/pipe8/P1": ("relaxed.gpu", 1, 1, 0),
    "volatile/pipe8/P1": ("volatile", 1, 1, 0),
    "relaxed.gpu/dep/P8-staggered": ("relaxed.gpu", 0, 8, 1),
    "relaxed.gpu/dep/P16-staggered": ("relaxed.gpu", 0, 16, 1),
    "relaxed.gpu/pipe8/P8": ("relaxed.gpu", 1, 8, 0),
    "relaxed.gpu/pipe8/P8-staggered": ("relaxed.gpu", 1, 8, 1),
}
# pipelined same-address loads of one thread are served together (run 1: 25 ns between stamps but a
# 128 ns bracket, and bracket inversions across pollers), so the reference probe is dependent loads
# on 8 SMs, staggered in phase.
E0_REF_PROBE = "relaxed.gpu/dep/P8-staggered"
# name: (store kind, layout, blocks, threads per block)
E0_ENGINES = {
    "legacy relaxed.sys/lane_late/2x1024": ("relaxed.sys", "lane_late", 2, 1024),   # the kernel before today
    "relaxed.sys/lane/2x1024": ("relaxed.sys", "lane", 2, 1024),
    "relaxed.gpu/lane/2x1024": ("relaxed.gpu", "lane", 2, 1024),
    "release.gpu/lane/2x1024": ("release.gpu", "lane", 2, 1024),
    "release.sys/lane/2x1024": ("release.sys", "lane", 2, 1024),
    "volatile/lane/2x1024": ("volatile", "lane", 2, 1024),
    "relaxed.gpu/lane/2x128": ("relaxed.gpu", "lane", 2, 128),
    "relaxed.gpu/lane/2x32": ("relaxed.gpu", "lane", 2, 32),
    "relaxed.gpu/warp/2x1024": ("relaxed.gpu", "warp", 2, 1024),
    "relaxed.gpu/warp/2x128": ("relaxed.gpu", "warp", 2, 128),
    "relaxed.gpu/warp/2x32": ("relaxed.gpu", "warp", 2, 32),
    "relaxed.sys/warp/2x128": ("relaxed.sys", "warp", 2, 128),
    "release.gpu/warp/2x128": ("release.gpu", "warp", 2, 128),
    "volatile/warp/2x128": ("volatile", "warp", 2, 128),
    "relaxed.gpu/warp_burst/2x128": ("relaxed.gpu", "warp_burst", 2, 128),   # last: new in run 2
    "relaxed.gpu/warp_burst/2x1024": ("relaxed.gpu", "warp_burst", 2, 1024),
}
E0_REF_ENGINE = "relaxed.gpu/warp/2x128"
E0_BURST_LAYOUTS = ("lane", "warp_burst")
E0_GOAL_NS = 100


def _timer_granularity(rt) -> dict:
    """%globaltimer update granularity: one thread reads it back to back and records every change
    (ns step, SM cycles between changes)."""
    maxc, iters = 8192, 400_000
    ch, sm = rt.alloc(maxc * 16), rt.alloc(32)
    rt.kernels.timer_probe(ch.ptr, maxc, iters, sm.ptr, stream=rt.streams[1])
    rt.sync()
    s = sm.download(np.uint64, 4).astype(np.int64)
    k = int(min(s[0], maxc))
    c = ch.download(np.uint64, 2 * k).reshape(k, 2).astype(np.int64)[1:]   # first change: partial interval
    steps, counts = np.unique(c[:, 0], return_counts=True)
    order = np.argsort(-counts)[:8]
    ns_per_read = s[2] / max(1, s[1])
    return {"timer_reads": int(s[1]), "changes": int(s[0]), "span_ns": int(s[2]), "span_cycles": int(s[3]),
            "sm_clock_ghz": float(s[3] / s[2]) if s[2] else None,
            "ns_per_timer_read": float(ns_per_read),
            "step_ns_most_common": [[int(steps[i]), int(counts[i])] for i in order],
            "step_ns_min": int(c[:, 0].min()) if len(c) else None,
            "step_ns_median": float(np.median(c[:, 0])) if len(c) else None,
            "cycles_between_changes_median": float(np.median(c[:, 1])) if len(c) else None}


class _E0Lab:
    """One E0 table (n flags 128 B apart, wakeups spacing_ns apart) and the launch of one
    eidolon + probe pair."""

    def __init__(self, rt, n: int, spacing: int):
        from eidola.replay import FlagRegion
        self.rt, self.n = rt, n
        stride = 128
        self.buf = rt.alloc(n * stride + 128)
        self.base = (self.buf.ptr + 127) // 128 * 128
        self.region = FlagRegion(self.base, n * stride, 1, "probe")
        self.addrs = np.array([self.base + i * stride for i in range(n)], np.uint64)
        self.wake = np.array([20000 + i * spacing for i in range(n)], np.int64)   # after the probe's warm-up
        self.d_addr = rt.array(self.addrs)
        self.d_exp = rt.array(np.ones(n, np.uint32))
        self.d_wake = rt.array(self.wake.astype(np.uint64))
        self.scratch = rt.alloc(128)
        self.rec = rt.alloc(16 * n * 32)
        self.meta = rt.alloc(16 * 32)
        self._reps: dict = {}

    def replay(self, shift: np.ndarray | None = None):
        """A Replay whose table has the wakeups ``wake - shift`` (per-entry calibration)."""
        from eidola.replay import Replay
        key = None if shift is None else shift.tobytes()
        if key in self._reps:
            return self._reps[key]
        w = self.wake if shift is None else self.wake - shift
        if not (np.diff(w) > 0).all():
            raise ValueError("per-entry shifts reorder the table")
        rep = Replay(self.rt, [self.region])
        for i in range(self.n):
            rep.register_write(int(self.addrs[i]), 1, 4, int(max(0, w[i])))
        rep.install(engine="eidolon", lag_ns=0)
        self._reps[key] = rep
        return rep

    def run(self, engine: tuple, probe: tuple, lag: int, shift: np.ndarray | None = None, pre_ns: int = 1500) -> dict:
        store, layout, blocks, threads = engine
        load, pipe, pollers, stagger = probe
        rep = self.replay(shift)
        rep.host.lag_ns = int(lag)
        self.buf.fill(0)
        rep.reset_launch()          # pushes the host state (lag) and synchronizes
        rep.launch_eidolon(blocks=blocks, threads=threads, store=store, layout=layout)
        self.rt.kernels.tprobe(rep.dev.ptr, self.d_addr.ptr, self.d_exp.ptr, self.d_wake.ptr, self.n,
                               pre_ns=pre_ns, stagger=bool(stagger), scratch=self.scratch.ptr, rec=self.rec.ptr,
                               meta=self.meta.ptr, pollers=pollers, load=load, pipelined=bool(pipe),
                               stream=self.rt.streams[1])
        self.rt.sync()
        rep.check("E0 eidolon + probe")
        rec = self.rec.download(np.uint64, pollers * self.n * 4).reshape(pollers, self.n, 4).astype(np.int64)
        meta = self.meta.download(np.uint64, pollers * 4).reshape(pollers, 4).astype(np.int64)
        issue = rep.enacted_rel().astype(np.int64)
        lagv = (shift if shift is not None else 0) + int(lag)
        hit, miss, first, polls = rec[..., 0], rec[..., 1], rec[..., 2], rec[..., 3]
        has_miss = miss > 0
        seen = hit.min(axis=0)                                   # earliest load that saw the value
        lo = np.where(has_miss, miss, -1).max(axis=0)            # latest load that did not
        lo = np.where(lo < 0, seen, lo)                          # none did (early flag): no bracket
        with np.errstate(invalid="ignore"):
            per_poll = np.where(polls > 1, (hit - first) / np.maximum(1, polls - 1), np.nan)
        return {"seen": seen, "lo": lo, "early": ~has_miss.any(axis=0), "issue": issue,
                "issue_err": issue - (self.wake - lagv), "err": seen - self.wake,
                "poller_width": np.where(has_miss, hit - miss, -1), "sample_ns": per_poll,
                "polls": polls, "smid": meta[:, 0], "period_warm_ns": meta[:, 1] / 16.0}


def _e0_config(lab: _E0Lab, engine: tuple, probe: tuple, reps: int, per_entry: bool = False) -> dict:
    """Calibrate the lag (reps runs at lag 0: median of first-seen - wakeup), then measure reps runs
    with the lag subtracted. per_entry: also a per-entry lag (median per flag over the calibration
    runs), measured on separate runs."""
    cal = [lab.run(engine, probe, 0) for _ in range(reps)]
    cal_err = np.stack([c["err"] for c in cal])
    lag = int(round(float(np.median(cal_err))))
    meas = [lab.run(engine, probe, lag) for _ in range(reps)]
    cat = {k: np.concatenate([m[k] for m in meas]) for k in ("err", "issue_err", "seen", "issue", "early")}
    ok = ~cat["early"]
    vis = cat["seen"] - cat["issue"]
    width = np.concatenate([m["seen"] - m["lo"] for m in meas])   # < 0: pollers disagree (inversion)
    pw = np.concatenate([m["poller_width"].ravel() for m in meas])
    samp = np.concatenate([m["sample_ns"].ravel() for m in meas])
    err = cat["err"][ok]
    res = {"engine": engine, "probe": probe, "lag_ns": lag,
           "uncalibrated_err_ns": _dist(cal_err.ravel()),
           "err_ns": _dist(err), "abs_err_ns": _dist(np.abs(err)),
           "issue_err_ns": _dist(cat["issue_err"]),
           "store_to_seen_ns": _dist(vis[ok]),
           "bracket_width_ns": _dist(width[ok & (width >= 0)]),
           "bracket_inversions": int((ok & (width < 0)).sum()),
           "per_poller_bracket_ns": _dist(pw[pw >= 0]),
           "sample_interval_ns": _dist(samp[np.isfinite(samp)]),
           "period_warm_ns": [float(x) for x in meas[0]["period_warm_ns"]],
           "smids": [int(x) for x in meas[0]["smid"]],
           "early_flags": int(cat["early"].sum()),
           "std_ns": {"err": float(np.std(err)), "issue_err": float(np.std(cat["issue_err"])),
                      "store_to_seen": float(np.std(vis[ok])),
                      "bracket_uniform": float(np.median(width[ok & (width >= 0)]) / np.sqrt(12)) if (ok & (width >= 0)).any() else None},
           "per_run_abs_p95_ns": [float(np.percentile(np.abs(m["err"][~m["early"]]), 95)) for m in meas]}
    res["goal_p95_abs_le_100ns"] = bool(res["abs_err_ns"]["p95"] <= E0_GOAL_NS)
    if per_entry:
        shift = np.round(np.median(cal_err, axis=0)).astype(np.int64)
        pe = [lab.run(engine, probe, 0, shift=shift) for _ in range(reps)]
        e = np.concatenate([m["err"][~m["early"]] for m in pe])
        ie = np.concatenate([m["issue_err"] for m in pe])
        res["per_entry"] = {"lag_ns": _dist(shift), "err_ns": _dist(e), "abs_err_ns": _dist(np.abs(e)),
                            "issue_err_ns": _dist(ie),
                            "goal_p95_abs_le_100ns": bool(np.percentile(np.abs(e), 95) <= E0_GOAL_NS),
                            "note": "lag per flag = median over the calibration runs of that flag's first-seen - wakeup; measured on separate runs"}
    return res


def exp_E0(rt, args) -> dict:
    """Engine (a) enactment error: probe variants x the reference engine, engine variants x the
    reference probe, each calibrated (lag = median first-seen - wakeup over calibration runs) and
    measured on separate runs; %globaltimer granularity; engine (b) with the old probes."""
    from eidola.replay import FlagRegion, Replay
    n = args.e0_writes
    spacing = 3000
    out: dict = {"writes": n, "spacing_ns": spacing, "reps": args.reps, "goal_ns": E0_GOAL_NS,
                 "method": ("n flags 128 B apart, wakeups 20 us + i*3 us after the probe kernel's start; an eidolon "
                            "kernel on reserved SMs stores them at wakeup - lag; the timing-lab probe "
                            "(hbf_eidola_tprobe) polls each flag from wakeup - 1.5 us on with every load stamped by "
                            "%globaltimer right before it issues; first-seen = the earliest stamp (over pollers) of a "
                            "load that saw the value; bracket = first-seen - the latest stamp of a load that did not; "
                            "error = first-seen - wakeup; issue error = the eidolon's own timer read that passed "
                            "the test - (wakeup - lag)"),
                 "reference_probe": E0_REF_PROBE, "reference_engine": E0_REF_ENGINE}
    try:
        out["timer"] = _timer_granularity(rt)
    except Exception as e:  # noqa: BLE001
        log.exception("timer probe")
        out["timer"] = {"error": repr(e)}
    lab = _E0Lab(rt, n, spacing)
    out["probes"], out["engines"] = {}, {}
    ref_engine = E0_ENGINES[E0_REF_ENGINE]
    for name, pr in E0_PROBES.items():
        try:
            out["probes"][name] = _e0_config(lab, ref_engine, pr, args.reps)
        except Exception as e:  # noqa: BLE001
            log.exception("E0 probe %s", name)
            out["probes"][name] = {"error": repr(e)}
    for name, en in E0_ENGINES.items():
        try:
            out["engines"][name] = _e0_config(lab, en, E0_PROBES[E0_REF_PROBE], args.reps, per_entry=True)
        except Exception as e:  # noqa: BLE001
            log.exception("E0 engine %s", name)
            out["engines"][name] = {"error": repr(e)}
    try:   # the configuration of the earlier E0 rows, on the new probe code
        out["baseline_legacy_engine_old_probe"] = _e0_config(
            lab, E0_ENGINES["legacy relaxed.sys/lane_late/2x1024"], E0_PROBES["acquire.sys/dep/P1"], args.reps)
    except Exception as e:  # noqa: BLE001
        out["baseline_legacy_engine_old_probe"] = {"error": repr(e)}
    # only layouts that store a burst of same-time entries at once are eligible: "warp" enacts a
    # warp's 32 entries one after another (E1, run 2: with 2 warps, 384 same-time flags landed ~20 us
    # late) and "lane_late" is the legacy kernel
    good = {k: v for k, v in out["engines"].items() if "error" not in v and E0_ENGINES[k][1] in E0_BURST_LAYOUTS}
    if good:
        best = min(good, key=lambda k: (good[k]["abs_err_ns"]["p95"], good[k]["abs_err_ns"]["p99"], good[k]["abs_err_ns"]["max"]))
        st, lay, bl, th = E0_ENGINES[best]
        out["engine_a_chosen"] = {"name": best, "store": st, "layout": lay, "blocks": bl, "threads": th,
                                  "lag_ns": good[best]["lag_ns"], "probe": E0_REF_PROBE,
                                  "abs_err_ns": good[best]["abs_err_ns"], "err_ns": good[best]["err_ns"]}
        out["engine_a_lag_estimate_ns"] = good[best]["lag_ns"]
    out["library_defaults"] = rt.kernels.eidolon_defaults()
    # engine (b): virtualized loads seen by the old probe kernels (they go through hbf_eidola_ld_flag)
    try:
        rep = Replay(rt, [FlagRegion(lab.base, n * 128, 1, "probe")])
        for i in range(n):
            rep.register_write(int(lab.addrs[i]), 1, 4, int(lab.wake[i]))
        rep.install(engine="virtual")
        seen, polls = rt.alloc(n * 8), rt.alloc(n * 4)
        d_exp64 = rt.array(np.ones(n, np.uint64))
        errs = []
        for _ in range(args.reps):
            lab.buf.fill(0)
            rep.reset_launch()
            rt.kernels.probe(rep.dev.ptr, lab.d_addr.ptr, d_exp64.ptr, n, seen.ptr, polls.ptr, 1,
                             stream=rt.streams[1])
            rt.sync()
            rep.check("engine (b) probe")
            errs.append(seen.download(np.uint64, n).astype(np.int64) - lab.wake)
        out["engine_b_error_ns"] = _dist(np.concatenate(errs))
    except Exception as e:  # noqa: BLE001
        log.exception("engine b")
        out["engine_b_error_ns"] = {"error": repr(e)}
    return out


def exp_REG(rt, args) -> dict:
    """register_write from the device setup kernel == from Python (order free), and the device's
    engine-(b) lookup agrees with the host table at sampled instants (probe with virtual loads)."""
    from eidola.replay import FlagRegion, Replay
    rng = np.random.default_rng(7)
    n = 4096
    buf = rt.alloc(n * 4 + 128)
    base = (buf.ptr + 127) // 128 * 128
    addrs = base + 4 * rng.permutation(n).astype(np.uint64)
    vals = rng.integers(1, 1 << 31, n).astype(np.uint64)
    wk = rng.integers(0, 50_000, n).astype(np.uint64)
    a = Replay(rt, [FlagRegion(base, n * 4, 1)])
    for i in range(n):
        a.register_write(int(addrs[i]), int(vals[i]), 4, int(wk[i]))
    b = Replay(rt, [FlagRegion(base, n * 4, 1)])
    cnt = b.register_from_device(addrs, vals, np.full(n, 4, np.uint32), wk)
    fa, fb = a.wtt.freeze(), b.wtt.freeze()
    same = [(e.addr, e.value, e.wakeup_ns) for e in fa.by_time] == [(e.addr, e.value, e.wakeup_ns) for e in fb.by_time]
    return {"entries": n, "device_registered": cnt, "tables_identical": bool(same)}


def _e1_shape(args, n_gpus=4, M=None):
    from workloads.gemv_allreduce.fused import GarShape
    return GarShape(n_gpus=n_gpus, M=M or args.M, Kl=args.Kl, tiles=args.tiles)


E1_BASES = {
    "kernel_start": "peer delay = wakeup of every peer flag (and tile) relative to the target kernel's start "
                    "(t0): the flags of all tiles land at t0 + delay",
    "tile_ready": "peer delay = wakeup relative to the moment target tile b is ready to wait (its flags "
                  "released, marks[3]), measured per tile as the median over calibration runs of the same "
                  "engine/wait at delay 0: flags of tile b land at ready[b] + delay",
}


def _eidolon_opts(args) -> dict | None:
    return getattr(args, "eidolon_opts", None)


def _sweep(rt, args, wait: str, engines, bases=("kernel_start",)) -> dict:
    from workloads.gemv_allreduce.fused import GemvAllReduce
    shape = _e1_shape(args)
    g = GemvAllReduce(rt, shape)
    ref = g.reference_y()
    delays = [d * 1000 for d in range(0, 41, args.e1_step_us)]
    res: dict = {"shape": vars(shape), "wait": wait, "delays_ns": delays, "engines": {},
                 "delay_definitions": {b: E1_BASES[b] for b in bases}, "eidolon_opts": _eidolon_opts(args)}
    for base in bases:
        for engine in engines:
            key = engine if base == "kernel_start" else f"{engine}@{base}"
            try:
                res["engines"][key] = _sweep_engine(rt, args, g, ref, shape, delays, wait, engine, base=base)
            except Exception as e:  # noqa: BLE001  (a device trap ends the context: later engines fail too)
                log.exception("sweep %s/%s failed", wait, key)
                res["engines"][key] = {"error": repr(e)}
    return res


def _tile_ready_ns(rt, args, g, shape, wait, engine) -> list[int]:
    """Per tile, when the target's tile is ready to wait (marks[3] - t0: flags released), median over
    calibration runs of the same engine/wait with every peer flag visible at 0."""
    from eidola.generator import uniform_delay
    from eidola.wtt import WriteTrackingTable
    from eidola.replay import Replay
    tr = uniform_delay(n_gpus=shape.n_gpus, tiles=shape.tiles, tile_rows=shape.tile_rows, delay_ns=0)
    rep = Replay(rt, [g.flag_region()])
    rep.use_table(WriteTrackingTable.from_trace(tr, g.bases()).freeze())
    rep.install(engine=engine, mon_mode=wait if wait != "spin" else "off", lag_ns=args.lag_ns if engine == "eidolon" else 0)
    r = []
    for _ in range(max(5, args.reps)):
        o = g.run_replay(rep, wait=wait, engine=engine, eidolon=_eidolon_opts(args))
        r.append(o["marks"][:, 3] - o["t0"])
    return [int(x) for x in np.median(np.stack(r), axis=0)]


def _sweep_engine(rt, args, g, ref, shape, delays, wait, engine, base="kernel_start") -> dict:
    from eidola.accounting import linear_fit
    from eidola.generator import per_tile_delay, uniform_delay
    from eidola.wtt import WriteTrackingTable
    from eidola.replay import Replay
    ready = _tile_ready_ns(rt, args, g, shape, wait, engine) if base == "tile_ready" else None
    if True:
        rows = []
        for d in delays:
            if ready is None:
                tr = uniform_delay(n_gpus=shape.n_gpus, tiles=shape.tiles, tile_rows=shape.tile_rows, delay_ns=d)
            else:
                tr = per_tile_delay(n_gpus=shape.n_gpus, tiles=shape.tiles, tile_rows=shape.tile_rows,
                                    base_ns=ready, delay_ns=d)
            rep = Replay(rt, [g.flag_region()])
            rep.use_table(WriteTrackingTable.from_trace(tr, g.bases()).freeze())
            rep.install(engine=engine, mon_mode=wait if wait != "spin" else "off", lag_ns=args.lag_ns if engine == "eidolon" else 0)
            for r in range(args.reps):
                o = g.run_replay(rep, wait=wait, engine=engine, eidolon=_eidolon_opts(args))
                acc = o["accounting"]
                ready_act = o["marks"][:, 3] - o["t0"]
                seen = o["seen_rel"].astype(np.int64)
                peers = [q for q in range(shape.n_gpus) if q != g.rank]
                rows.append({"delay_ns": d, "rep": r, "kernel_ns": o["kernel_ns"],
                             "flag_reads_thread": acc["flag_reads_thread"], "flag_reads_warp": acc["flag_reads_warp"],
                             "nonflag_reads_thread": acc["nonflag_reads_thread"], "nonflag_reads_warp": acc["nonflag_reads_warp"],
                             "monitor_arms": acc["monitor_arms"], "mwait_calls": acc["mwait_calls"],
                             "wake_word_reads": acc["wake_word_reads"], "virtual_loads": acc["virtual_loads"],
                             "y_bitwise_equal_reference": bool(np.array_equal(o["y"].view(np.uint32), ref.view(np.uint32))),
                             "wait_ns_median": float(np.median(o["marks"][:, 4] - o["marks"][:, 3])),
                             "seen_after_ready_ns_median": float(np.median(seen[:, peers].max(axis=1) - ready_act)),
                             "ready_ns_median": float(np.median(ready_act))})
        med = {}
        for d in delays:
            rr = [x for x in rows if x["delay_ns"] == d]
            med[d] = {k: float(np.median([x[k] for x in rr])) for k in
                      ("flag_reads_thread", "flag_reads_warp", "nonflag_reads_thread", "nonflag_reads_warp", "kernel_ns",
                       "wake_word_reads", "wait_ns_median", "seen_after_ready_ns_median")}
        xs = [d / 1000 for d in delays]
        fl = [med[d]["flag_reads_thread"] for d in delays]
        nf = [x["nonflag_reads_thread"] for x in rows]
        knee = [i for i, d in enumerate(delays) if d >= args.knee_us * 1000]
        summary = {"delay_base": base, "delay_definition": E1_BASES[base],
                   "fit_flag_reads_thread_vs_delay_us": linear_fit(xs, fl),
                   "fit_above_knee": linear_fit([xs[i] for i in knee], [fl[i] for i in knee]) if len(knee) >= 2 else None,
                   "knee_us": args.knee_us,
                   "fit_flag_reads_warp_vs_delay_us": linear_fit(xs, [med[d]["flag_reads_warp"] for d in delays]),
                   "fit_wait_ns_vs_delay_us": linear_fit(xs, [med[d]["wait_ns_median"] for d in delays]),
                   "flag_reads_thread_min": min(fl), "flag_reads_thread_max": max(fl),
                   "flag_spread_rel": (max(fl) - min(fl)) / max(1.0, float(np.mean(fl))),
                   "nonflag_reads_thread_unique": sorted(set(nf)),
                   "nonflag_constant": len(set(nf)) == 1,
                   "all_outputs_bitwise_equal": all(x["y_bitwise_equal_reference"] for x in rows)}
        out = {"rows": rows, "median_by_delay": med, "summary": summary}
        if ready is not None:
            out["tile_ready_ns"] = ready
            summary["tile_ready_ns_range"] = [min(ready), max(ready)]
        return out


def exp_E1(rt, args) -> dict:
    return _sweep(rt, args, "spin", ("virtual", "virtual_paced", "eidolon"), bases=("kernel_start", "tile_ready"))


def exp_E2(rt, args) -> dict:
    bases = ("kernel_start", "tile_ready")
    out = {"hoare": _sweep(rt, args, "hoare", ("virtual", "eidolon"), bases=bases),
           "mesa": _sweep(rt, args, "mesa", ("virtual", "eidolon"), bases=bases)}
    try:
        out["corunner"] = _corunner(rt, args)
    except Exception as e:  # noqa: BLE001
        log.exception("co-runner failed")
        out["corunner"] = {"error": repr(e)}
    return out


def _corunner(rt, args) -> dict:
    # what the freed issue slots buy a co-running kernel (target waits 40 us)
    from eidola.generator import uniform_delay
    from eidola.replay import Replay
    from workloads.gemv_allreduce.fused import GemvAllReduce
    shape = _e1_shape(args)
    g = GemvAllReduce(rt, shape)
    tr = uniform_delay(n_gpus=shape.n_gpus, tiles=shape.tiles, tile_rows=shape.tile_rows, delay_ns=40_000)
    co = {"blocks": rt.sm_count * 4, "threads": 256, "iters": args.corunner_iters}
    rows = []
    for engine in ("virtual", "eidolon"):
        for wait in ("spin", "hoare"):
            rep = Replay(rt, [g.flag_region()])
            rep.register_trace(tr, g.bases())
            rep.install(engine=engine, mon_mode="off" if wait == "spin" else wait,
                        lag_ns=args.lag_ns if engine == "eidolon" else 0)
            for r in range(args.reps):
                o = g.run_replay(rep, wait=wait, engine=engine, corunner=co)
                rows.append({"engine": engine, "wait": wait, "rep": r, **o["corunner"], "kernel_ns": o["kernel_ns"]})
    alone = []
    for r in range(args.reps):
        c = g._launch_corunner(**co)
        rt.sync()
        alone.append(g._corunner_result(c))
    return {"config": co, "with_target": rows, "alone": alone,
            "note": "co-runner = issue-bound FMA loop (8 independent chains), 4 blocks/SM, launched just before the target; 'span_ns' = its whole duration (first block start to last block end), overlapping the target's 40 us wait"}


def exp_E3(rt, args) -> dict:
    from eidola.accounting import linear_fit
    from eidola.generator import uniform_delay
    from eidola.wtt import WriteTrackingTable
    from eidola.replay import Replay
    from workloads.gemv_allreduce.fused import GarShape, GemvAllReduce
    ns = [3, 7, 15, 31, 63, 127, 255]
    res: dict = {"eidolons": ns, "delay_ns": args.e3_delay_ns, "configs": {}}
    configs = [("native", "spin"), ("virtual", "spin"), ("virtual", "hoare"), ("eidolon", "spin"), ("eidolon", "hoare")]
    rows = []
    for n in ns:
        shape = GarShape(n_gpus=n + 1, M=args.M, Kl=args.Kl, tiles=args.tiles)
        g = GemvAllReduce(rt, shape)
        ref = g.reference_y()
        for delay in (0, args.e3_delay_ns):
            tr = uniform_delay(n_gpus=shape.n_gpus, tiles=shape.tiles, tile_rows=shape.tile_rows, delay_ns=delay)
            t_setup = time.perf_counter()
            frozen = WriteTrackingTable.from_trace(tr, g.bases()).freeze()
            freeze_s = time.perf_counter() - t_setup
            for engine, wait in configs:
                if engine == "native" and delay != 0:
                    continue
                t_setup = time.perf_counter()
                rep = Replay(rt, [g.flag_region()])
                rep.use_table(frozen)
                rep.install(engine=engine, mon_mode="off" if wait == "spin" else wait,
                            lag_ns=args.lag_ns if engine == "eidolon" else 0)
                setup_s = time.perf_counter() - t_setup
                ks = []
                eq = True
                for r in range(args.reps):
                    o = g.run_replay(rep, wait=wait, engine=engine, eidolon_blocks=args.eidolon_blocks or None)
                    ks.append(o["kernel_ns"])
                    eq = eq and bool(np.array_equal(o["y"].view(np.uint32), ref.view(np.uint32)))
                rows.append({"eidolons": n, "delay_ns": delay, "engine": engine, "wait": wait,
                             "kernel_ns": ks, "kernel_ns_median": float(np.median(ks)), "setup_s": setup_s,
                             "wtt_freeze_s": freeze_s,
                             "wtt_entries": len(rep.frozen), "y_bitwise_equal": eq,
                             "flag_reads_thread": o["accounting"]["flag_reads_thread"]})
        log.info("E3 n=%d done", n)
    res["rows"] = rows
    # eidola's own cost: replay (flags visible at 0) minus the native control (flags pre-set)
    nat = {r["eidolons"]: r["kernel_ns_median"] for r in rows if r["engine"] == "native"}
    res["replay_over_native"] = {
        f"{e}/{w}": {n: r["kernel_ns_median"] / nat[n] for r in rows for n in [r["eidolons"]]
                     if r["engine"] == e and r["wait"] == w and r["delay_ns"] == 0 and n in nat}
        for e, w in configs if e != "native"}
    res["overhead_vs_native_ns"] = {
        f"{e}/{w}": {n: r["kernel_ns_median"] - nat[n] for r in rows for n in [r["eidolons"]]
                     if r["engine"] == e and r["wait"] == w and r["delay_ns"] == 0 and n in nat}
        for e, w in configs if e != "native"}
    for engine, wait in configs:
        for delay in (0, args.e3_delay_ns):
            rr = [r for r in rows if r["engine"] == engine and r["wait"] == wait and r["delay_ns"] == delay]
            if not rr:
                continue
            t = [r["kernel_ns_median"] for r in rr]
            fit = linear_fit(ns, t)
            res["configs"][f"{engine}/{wait}/delay{delay}"] = {
                "fit": fit, "t1_ns": fit["intercept"] + fit["slope"], "te_ns": fit["slope"],
                "ratio_255_over_3": t[-1] / t[0], "kernel_ns_median": t}
    return res


def exp_E4(rt, args) -> dict:
    from eidola.accounting import linear_fit
    from eidola.generator import uniform_delay
    from eidola.wtt import WriteTrackingTable
    from eidola.replay import Replay
    from workloads.gemv_allreduce.fused import GarShape, GemvAllReduce
    Ms = [1024, 4096, 8192, 16384, 32768]
    rows = []
    for n in (3, 15, 255):
        for M in Ms:
            shape = GarShape(n_gpus=n + 1, M=M, Kl=args.Kl, tiles=args.tiles)
            g = GemvAllReduce(rt, shape)
            tr = uniform_delay(n_gpus=shape.n_gpus, tiles=shape.tiles, tile_rows=shape.tile_rows, delay_ns=0)
            frozen = WriteTrackingTable.from_trace(tr, g.bases()).freeze()
            for wait in ("spin", "hoare"):
                rep = Replay(rt, [g.flag_region()])
                rep.use_table(frozen)
                rep.install(engine="virtual", mon_mode="off" if wait == "spin" else wait)
                ks = [g.run_replay(rep, wait=wait, engine="virtual")["kernel_ns"] for _ in range(args.reps)]
                rows.append({"eidolons": n, "M": M, "wait": wait, "kernel_ns": ks, "kernel_ns_median": float(np.median(ks))})
            del g
            rt.close()
        log.info("E4 n=%d done", n)
    fits = {}
    for n in (3, 15, 255):
        for wait in ("spin", "hoare"):
            rr = [r for r in rows if r["eidolons"] == n and r["wait"] == wait]
            fits[f"{n}/{wait}"] = linear_fit([r["M"] for r in rr], [r["kernel_ns_median"] for r in rr])
    return {"M": Ms, "Kl": args.Kl, "tiles": args.tiles, "engine": "virtual", "rows": rows, "fits": fits}


def _try_plot(path, segs, title) -> None:
    from eidola.timeline import plot_timeline
    try:
        plot_timeline(path, segs, title=title)
    except ImportError as e:   # no matplotlib on the GPU machine: --replot draws it from the JSON
        log.warning("timeline PNG skipped: %s", e)


def replot(out: Path) -> None:
    """Draw every PNG from the JSONs in ``out`` (timelines from their Chrome trace JSON)."""
    from eidola.timeline import Segment, plot_timeline
    titles = {"ideal": "GEMV+AllReduce replay (uniform 8 us trace), 3 eidolons, engine (b)",
              "jitter": "GEMV+AllReduce replay (jittery link-model trace), 3 eidolons, engine (b)",
              "real4": "GEMV+AllReduce, 4 real ranks co-resident on one H200"}
    for name, title in titles.items():
        p = out / f"eidola_timeline_{name}.json"
        if p.exists():
            ev = [e for e in json.loads(p.read_text())["traceEvents"] if e["ph"] == "X"]
            segs = [Segment(e["pid"], e["tid"], e["name"], e["args"]["start_ns"], e["args"]["end_ns"]) for e in ev]
            plot_timeline(out / f"eidola_timeline_{name}.png", segs, title=title)
    plots(out)


def exp_TL(rt, args) -> dict:
    """Timelines: replay at 10 us (ideal-ish) and a jittery synthetic trace (non-ideal), plus
    real ranks co-resident on one GPU, compared bitwise with the replay."""
    from eidola.generator import LinkModel, generate, uniform_delay
    from eidola.timeline import segments_from_marks, write_chrome_trace
    from eidola.trace import write_trace
    from eidola.replay import Replay
    from workloads.gemv_allreduce.fused import GemvAllReduce, run_real
    out_dir = Path(args.out)
    shape = _e1_shape(args)
    g = GemvAllReduce(rt, shape)
    res: dict = {}
    traces = {"ideal": uniform_delay(n_gpus=4, tiles=shape.tiles, tile_rows=shape.tile_rows, delay_ns=8000),
              "jitter": generate(n_gpus=4, tiles=shape.tiles, tile_rows=shape.tile_rows, compute_ns=6000,
                                 link=[LinkModel(), LinkModel(jitter_ns=500), LinkModel(jitter_ns=4000, start_skew_ns=10000),
                                       LinkModel(latency_ns=2000)], seed=1)}
    for name, tr in traces.items():
        write_trace(out_dir / f"eidola_trace_{name}.jsonl.gz", tr)
        rep = Replay(rt, [g.flag_region()])
        rep.register_trace(tr, g.bases())
        rep.install(engine="virtual")
        o = g.run_replay(rep, wait="spin", engine="virtual")
        segs = segments_from_marks(o["marks"], gpu=0, t0=o["t0"])
        write_chrome_trace(out_dir / f"eidola_timeline_{name}.json", segs, title=f"replay {name}")
        _try_plot(out_dir / f"eidola_timeline_{name}.png", segs, f"GEMV+AllReduce replay ({name} trace), 3 eidolons")
        res[name] = {"kernel_ns": o["kernel_ns"], "spin_ns_median": float(np.median(o["marks"][:, 4] - o["marks"][:, 3]))}
    # real ranks co-resident on one GPU (peer pointers = same-device pointers)
    try:
        from workloads.gemv_allreduce.fused import GarShape
        shape = GarShape(n_gpus=4, M=args.M, Kl=args.Kl, tiles=64)
        g = GemvAllReduce(rt, shape)
        real = run_real(rt, shape, seed=0)
        segs = []
        for r in real:
            segs += segments_from_marks(r["marks"], gpu=r["rank"], t0=min(x["t0"] for x in real))
        write_chrome_trace(out_dir / "eidola_timeline_real4.json", segs, title="4 real ranks on one GPU")
        _try_plot(out_dir / "eidola_timeline_real4.png", segs, "GEMV+AllReduce, 4 ranks co-resident on one H200")
        ref = g.reference_y()
        res["real4"] = {"kernel_ns": [r["kernel_ns"] for r in real],
                        "rank0_y_bitwise_equal_replay_reference": bool(np.array_equal(real[0]["y"].view(np.uint32), ref.view(np.uint32))),
                        "ranks_bitwise_identical": all(np.array_equal(real[0]["y"].view(np.uint32), r["y"].view(np.uint32)) for r in real),
                        "accounting_rank0": real[0]["accounting"]}
    except Exception as e:  # noqa: BLE001
        res["real4_error"] = repr(e)
    return res


SPIN_CU = r"""
extern "C" __global__ void spin_kernel(const unsigned* flags, unsigned seq, unsigned long long* polls) {
    if (threadIdx.x == 0) {   /* an UNINSTRUMENTED spin-wait: hbfcc's flags pass rewrites the load */
        unsigned long long n = 0;
        while (*(volatile const unsigned*)&flags[blockIdx.x * 32] != seq) ++n;
        polls[blockIdx.x] = n;
    }
}
"""


def exp_PASS(rt, args) -> dict:
    """hbfcc flags pass on an uninstrumented spin kernel: nvcc -> PTX -> flags pass -> ptxas -> load
    with the driver API; flag reads counted by the extern API must equal the kernel's own poll
    count + 1 per block, and under engine (b) the kernel finishes although memory is never written."""
    import ctypes
    import shutil
    import tempfile
    from hbfcc.passes.flags import build_extern_ptx, rewrite_text
    from eidola.replay import EIDOLA_STATE_GLOBAL, FlagRegion, Replay
    from runtime_cuda import cudrv
    nvcc = shutil.which("nvcc")
    tmp = Path(tempfile.mkdtemp())
    (tmp / "spin.cu").write_text(SPIN_CU)
    subprocess.run([nvcc, "-arch=compute_90a", "-ptx", str(tmp / "spin.cu"), "-o", str(tmp / "spin.ptx")], check=True)
    ext = build_extern_ptx(tmp).read_text()
    metas: dict = {}
    for variant, mw in (("flags", False), ("mwait", True)):
        meta: dict = {}
        text = rewrite_text((tmp / "spin.ptx").read_text(), ext, meta, mwait=mw)
        (tmp / f"spin_{variant}.ptx").write_text(text)
        subprocess.run(["ptxas", "-arch=sm_90a", str(tmp / f"spin_{variant}.ptx"), "-o",
                        str(tmp / f"spin_{variant}.cubin")], check=True)
        metas[variant] = {k: v for k, v in meta["flags"].items() if k != "sites"}

    mods = {}
    for variant in metas:
        mod = rt.load_module(tmp / f"spin_{variant}.cubin", ("spin_kernel",))
        mods[variant] = mod
    blocks = 64
    flags = rt.alloc(blocks * 128 + 128)
    base = (flags.ptr + 127) // 128 * 128
    polls = rt.alloc(blocks * 8)
    out = {"pass_report": metas, "blocks": blocks, "runs": []}
    for variant, engine in (("flags", "virtual"), ("flags", "eidolon"), ("mwait", "virtual"), ("mwait", "eidolon")):
        mod = mods[variant]
        rep = Replay(rt, [FlagRegion(base, blocks * 128, 1, "spin_flags")], arm_slots=blocks * 32 * 2)
        for b in range(blocks):
            rep.register_write(base + b * 128, 1, 4, 2000 + 300 * b)
        rep.install(engine=engine, mon_mode="hoare" if variant == "mwait" else "off",
                    lag_ns=args.lag_ns if engine == "eidolon" else 0)
        for r in range(args.reps):
            flags.fill(0)
            polls.fill(0)
            rep.reset_launch()
            rt.activate()
            if not rep.bind_module(mod.handle):
                raise RuntimeError(f"spin_{variant}.cubin has no {EIDOLA_STATE_GLOBAL}")
            if engine == "eidolon":
                rep.launch_eidolon(blocks=2)
            mod.launch("spin_kernel", (blocks,), (32,),
                       [ctypes.c_uint64(base), ctypes.c_uint32(1), ctypes.c_uint64(polls.ptr)],
                       stream=rt.streams[1])
            rt.sync()
            rep.check("flags-pass spin kernel")
            p = polls.download(np.uint64, blocks)
            acc = rep.accounting()
            # flags variant: one read per loop iteration (polls + 1 per block); mwait variant: each
            # iteration also makes the monitor's read, so 2 x (polls + 1) per block
            per_iter = 2 if variant == "mwait" else 1
            out["runs"].append({"variant": variant, "engine": engine, "rep": r, "polls_sum": int(p.sum()),
                                "flag_reads_thread": acc["flag_reads_thread"], "virtual_loads": acc["virtual_loads"],
                                "mwait_calls": acc["mwait_calls"], "wake_word_reads": acc["wake_word_reads"],
                                "reads_exact": acc["flag_reads_thread"] == per_iter * (int(p.sum()) + blocks),
                                "t0_set": int(rep.host.t0) != (1 << 64) - 1})
    out["all_counts_exact"] = all(x["reads_exact"] for x in out["runs"])
    return out


FUNCS = {"PASS": exp_PASS, "E0": exp_E0, "REG": exp_REG, "E1": exp_E1, "E2": exp_E2, "E3": exp_E3, "E4": exp_E4, "TL": exp_TL}


def plots(out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def load(n):
        p = out / f"eidola_{n}.json"
        return json.loads(p.read_text()) if p.exists() else None

    e1, e2 = load("E1"), load("E2")
    if e1 and "result" in e1:
        fig, axes = plt.subplots(1, 3 if e2 and "result" in e2 else 1, figsize=(15, 4), squeeze=False)
        panels = [("spin-wait (E1)", e1["result"])]
        if e2 and "result" in e2:
            panels += [("mwait Hoare (E2)", e2["result"]["hoare"]), ("mwait Mesa (E2)", e2["result"]["mesa"])]
        for ax, (title, res) in zip(axes[0], panels):
            for eng, data in res["engines"].items():
                if "error" in data:
                    continue
                d = res["delays_ns"]
                med = data["median_by_delay"]
                ax.plot([x / 1000 for x in d], [med[str(x)]["flag_reads_thread"] if str(x) in med else med[x]["flag_reads_thread"] for x in d],
                        "o-", label=f"flag reads ({eng})")
                ax.plot([x / 1000 for x in d], [med[str(x)]["nonflag_reads_warp"] if str(x) in med else med[x]["nonflag_reads_warp"] for x in d],
                        "s--", label=f"non-flag warp reads ({eng})")
            ax.set_xlabel("peer write delay (us)")
            ax.set_ylabel("reads")
            ax.set_title(title)
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "eidola_E1_E2_flag_reads.png", dpi=110)
        plt.close(fig)
    e3 = load("E3")
    if e3 and "result" in e3:
        fig, ax = plt.subplots(figsize=(6, 4))
        ns = e3["result"]["eidolons"]
        for k, v in e3["result"]["configs"].items():
            ax.plot(ns, [t / 1000 for t in v["kernel_ns_median"]], "o-", label=k)
        ax.set_xlabel("eidolons")
        ax.set_ylabel("target kernel time (us)")
        ax.legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(out / "eidola_E3_scaling.png", dpi=110)
        plt.close(fig)
    e4 = load("E4")
    if e4 and "result" in e4:
        fig, ax = plt.subplots(figsize=(6, 4))
        rows = e4["result"]["rows"]
        for n in (3, 15, 255):
            for wait, st in (("spin", "-"), ("hoare", "--")):
                rr = [r for r in rows if r["eidolons"] == n and r["wait"] == wait]
                ax.plot([r["M"] for r in rr], [r["kernel_ns_median"] / 1000 for r in rr], "o" + st, label=f"{n} eidolons {wait}")
        ax.set_xlabel("M")
        ax.set_ylabel("target kernel time (us)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "eidola_E4_input_scaling.png", dpi=110)
        plt.close(fig)


def _e0_cfg_summary(c: dict) -> dict:
    if "error" in c:
        return {"error": c["error"][:200]}
    d = lambda k, qs=("median", "p95", "p99", "max"): {q: round(c[k][q], 1) for q in qs if q in c[k]}  # noqa: E731
    out = {"lag_ns": c["lag_ns"], "err": d("err_ns", ("median", "p05", "p95")), "abs_err": d("abs_err_ns"),
           "issue_err": d("issue_err_ns", ("median", "p05", "p95", "max")), "std_ns": {k: (round(v, 1) if v is not None else None) for k, v in c["std_ns"].items()},
           "bracket_width": d("bracket_width_ns", ("median", "p95")), "sample_interval": d("sample_interval_ns", ("median", "p95")),
           "period_warm_ns_median": round(float(np.median(c["period_warm_ns"])), 1), "inversions": c["bracket_inversions"],
           "early": c["early_flags"], "goal": c["goal_p95_abs_le_100ns"]}
    if "per_entry" in c:
        out["per_entry_abs_err"] = {q: round(c["per_entry"]["abs_err_ns"][q], 1) for q in ("median", "p95", "p99", "max")}
    return out


def _e0_summary(r: dict) -> dict:
    if "probes" not in r:   # an E0 JSON from before the timing lab
        return {k: r.get(k) for k in ("engine_a_lag_estimate_ns", "goal_p95_abs_le_100ns_engine_a")}
    res = {"timer": {k: r["timer"].get(k) for k in ("step_ns_most_common", "step_ns_min", "ns_per_timer_read",
                                                      "sm_clock_ghz", "cycles_between_changes_median", "error")
                     if k in r["timer"]},
           "probes": {k: _e0_cfg_summary(v) for k, v in r["probes"].items()},
           "engines": {k: _e0_cfg_summary(v) for k, v in r["engines"].items()},
           "baseline": _e0_cfg_summary(r["baseline_legacy_engine_old_probe"]),
           "chosen": {k: v for k, v in (r.get("engine_a_chosen") or {}).items() if k not in ("abs_err_ns", "err_ns")},
           "library_defaults": r.get("library_defaults")}
    b = r.get("engine_b_error_ns", {})
    if "median" in b:
        res["engine_b_error"] = {q: round(b[q], 1) for q in ("median", "p95", "max")}
    return res


def summary(out: Path) -> dict:
    """The headline numbers of every experiment JSON in ``out`` (printed by the parent run)."""
    res = {}
    for name in EXPERIMENTS:
        p = out / f"eidola_{name}.json"
        if not p.exists():
            res[name] = "missing"
            continue
        d = json.loads(p.read_text())
        if "error" in d:
            res[name] = {"error": d["error"][:300]}
            continue
        r = d["result"]
        if name == "E0":
            res[name] = _e0_summary(r)
        elif name == "REG":
            res[name] = r
        elif name == "PASS":
            res[name] = {"all_counts_exact": r["all_counts_exact"], "report": r["pass_report"],
                         "runs": [{k: x[k] for k in ("variant", "engine", "polls_sum", "flag_reads_thread", "mwait_calls", "t0_set")}
                                  for x in r["runs"]]}
        elif name in ("E1", "E2"):
            sweeps = {"spin": r} if name == "E1" else {"hoare": r["hoare"], "mesa": r["mesa"]}
            res[name] = {}
            for w, sw in sweeps.items():
                for eng, data in sw["engines"].items():
                    if "error" in data:
                        res[name][f"{w}/{eng}"] = {"error": data["error"][:200]}
                        continue
                    sm = data["summary"]
                    fk = sm.get("fit_above_knee") or {}
                    res[name][f"{w}/{eng}"] = {"r2": round(sm["fit_flag_reads_thread_vs_delay_us"]["r2"], 5),
                                               "r2_above_knee": round(fk.get("r2", float("nan")), 5),
                                               "slope_above_knee": round(fk.get("slope", float("nan")), 2),
                                               "slope_per_us": round(sm["fit_flag_reads_thread_vs_delay_us"]["slope"], 2),
                                               "flag_min": sm["flag_reads_thread_min"], "flag_max": sm["flag_reads_thread_max"],
                                               "spread": round(sm["flag_spread_rel"], 4), "nonflag": sm["nonflag_reads_thread_unique"],
                                               "bitwise": sm["all_outputs_bitwise_equal"]}
            if name == "E2" and "error" not in r["corunner"]:
                rows = r["corunner"]["with_target"]
                res[name]["corunner_span_ns"] = {f"{e}/{w}": float(np.median([x["span_ns"] for x in rows if x["engine"] == e and x["wait"] == w]))
                                                 for e in ("virtual", "eidolon") for w in ("spin", "hoare")}
                res[name]["corunner_span_ns"]["alone"] = float(np.median([x["span_ns"] for x in r["corunner"]["alone"]]))
        elif name == "E3":
            res[name] = {k: {"t1_ns": round(v["t1_ns"]), "te_ns": round(v["te_ns"], 2), "r2": round(v["fit"]["r2"], 4),
                             "ratio_255_over_3": round(v["ratio_255_over_3"], 3)} for k, v in r["configs"].items()}
            res[name]["bitwise_all"] = all(x["y_bitwise_equal"] for x in r["rows"])
            res[name]["overhead_vs_native_ns"] = r.get("overhead_vs_native_ns")
            res[name]["replay_over_native"] = {k: {n: round(x, 3) for n, x in v.items()} for k, v in (r.get("replay_over_native") or {}).items()}
        elif name == "E4":
            res[name] = {k: {"r2": round(v["r2"], 4), "slope_ns_per_row": round(v["slope"], 3)} for k, v in r["fits"].items()}
        elif name == "TL":
            res[name] = {k: v for k, v in r.items() if k != "real4"}
            if "real4" in r:
                res[name]["real4"] = {k: v for k, v in r["real4"].items() if k != "accounting_rank0"}
    return res


def results_rows(out: Path, *, date: str, card: str, command: str) -> str:
    """Markdown rows for docs/RESULTS.md from the JSONs in ``out`` (numbers only as measured)."""
    S = summary(out)
    rows = []

    def row(what, number, js):
        rows.append(f"| {what} | {number} | {date} | {card} | `{command}` | {js} |")

    e0 = S.get("E0")
    if isinstance(e0, dict) and "probes" in e0:
        t = e0["timer"]
        row("eidola E0 %globaltimer update granularity (one thread, back-to-back reads)",
            f"steps (ns, count): {t.get('step_ns_most_common')}; {t.get('ns_per_timer_read', float('nan')):.2f} ns per read; "
            f"SM clock {t.get('sm_clock_ghz', float('nan')):.3f} GHz", "bench/results/eidola_E0.json")

        def cfg(label, c):
            if "error" in c:
                return
            row(f"eidola E0 engine (a) enactment error, {label}",
                f"lag {c['lag_ns']} ns; calibrated error median {c['err']['median']:.0f}, |err| median {c['abs_err']['median']:.0f} / p95 {c['abs_err']['p95']:.0f} / p99 {c['abs_err']['p99']:.0f} / max {c['abs_err']['max']:.0f} ns; "
                f"std: total {c['std_ns']['err']}, engine issue {c['std_ns']['issue_err']}, store->seen {c['std_ns']['store_to_seen']}, probe bracket/sqrt12 {c['std_ns']['bracket_uniform']} ns; "
                f"probe bracket median {c['bracket_width']['median']:.0f} ns, sample interval {c['sample_interval'].get('median', float('nan')):.0f} ns"
                + (f"; per-flag lag: |err| p95 {c['per_entry_abs_err']['p95']:.0f}" if "per_entry_abs_err" in c else "")
                + f" -- goal p95<=100 ns {'met' if c['goal'] else 'NOT met'}", "bench/results/eidola_E0.json")
        for k, c in e0["probes"].items():
            cfg(f"probe {k} x engine {E0_REF_ENGINE}", c)
        for k, c in e0["engines"].items():
            cfg(f"engine {k} x probe {E0_REF_PROBE}", c)
        cfg("baseline: legacy engine x probe acquire.sys/dep/P1 (the earlier rows' configuration)", e0["baseline"])
    if isinstance(e0, dict) and "engine_b_error" in e0:
        b = e0["engine_b_error"]
        row("eidola E0 engine (b) virtualized loads: first-seen - wakeup (1 poller through hbf_eidola_ld_flag)",
            f"median {b['median']:.0f}, p95 {b['p95']:.0f}, max {b['max']:.0f} ns", "bench/results/eidola_E0.json")
    for name, label in (("E1", "spin-wait"), ("E2", "monitor/mwait")):
        e = S.get(name)
        if not isinstance(e, dict) or "error" in e:
            continue
        for k, v in e.items():
            if k == "corunner_span_ns" or "error" in v:
                continue
            base = "tile_ready" if k.endswith("@tile_ready") else "kernel_start"
            row(f"eidola {name} {label} {k}: flag reads (per thread) vs peer delay 0-40 us, delay from {base} ({E1_BASES[base]}), 128 tiles x 3 eidolons, M=1024 Kl=2048",
                f"{v['flag_min']:.0f} .. {v['flag_max']:.0f} reads, slope {v['slope_per_us']} /us, R^2 {v['r2']} (delays >= 8 us: R^2 {v['r2_above_knee']}, slope {v['slope_above_knee']} /us), spread {v['spread'] * 100:.1f} %; "
                f"non-flag {v['nonflag']} (constant: {len(v['nonflag']) == 1}); outputs bitwise = reference: {v['bitwise']}",
                f"bench/results/eidola_{name}.json")
        if "corunner_span_ns" in e:
            c = e["corunner_span_ns"]
            row("eidola E2 co-runner (issue-bound FMA, 4 blocks/SM) duration while the target waits 40 us",
                "; ".join(f"{k} {v / 1000:.1f} us" for k, v in c.items()), "bench/results/eidola_E2.json")
    e3 = S.get("E3")
    if isinstance(e3, dict) and "error" not in e3:
        for k, v in e3.items():
            if not isinstance(v, dict) or "t1_ns" not in v:
                continue
            row(f"eidola E3 target kernel time vs eidolons 3..255, fit t = t1 + n*te, {k}",
                f"t1 {v['t1_ns'] / 1000:.2f} us, te {v['te_ns']:.1f} ns/eidolon, R^2 {v['r2']}, t(255)/t(3) = {v['ratio_255_over_3']}",
                "bench/results/eidola_E3.json")
    if isinstance(e3, dict) and e3.get("replay_over_native"):
        row("eidola E3 cost of Eidola itself: replayed kernel / native control (all peer flags pre-set, no replay), flags visible at 0",
            "; ".join(f"{k}: " + ", ".join(f"{n}:{x}" for n, x in v.items()) for k, v in e3["replay_over_native"].items()),
            "bench/results/eidola_E3.json")
    e4 = S.get("E4")
    if isinstance(e4, dict) and "error" not in e4:
        row("eidola E4 target kernel time vs M (1024..32768), linear fits (eidolons/wait)",
            "; ".join(f"{k}: R^2 {v['r2']}, {v['slope_ns_per_row']} ns/row" for k, v in e4.items()), "bench/results/eidola_E4.json")
    tl = S.get("TL")
    if isinstance(tl, dict) and "error" not in tl:
        r4 = tl.get("real4", {})
        row("eidola timelines + 4 real ranks co-resident on one GPU (peer pointers) vs replay",
            f"replay kernel {tl.get('ideal', {}).get('kernel_ns')} ns (uniform 8 us), {tl.get('jitter', {}).get('kernel_ns')} ns (jitter); "
            f"real ranks bitwise identical: {r4.get('ranks_bitwise_identical')}, rank 0 = replay reference: {r4.get('rank0_y_bitwise_equal_replay_reference')}",
            "bench/results/eidola_TL.json, eidola_timeline_*.json/png")
    ps = S.get("PASS")
    if isinstance(ps, dict) and "error" not in ps:
        row("eidola hbfcc flags pass on an uninstrumented spin kernel (64 blocks), flags-only and spin->monitor/mwait, engines a/b",
            f"counts exact (reads = iterations x reads/iteration): {ps['all_counts_exact']}; "
            + "; ".join(f"{x['variant']}/{x['engine']}: {x['flag_reads_thread']} reads" for x in ps["runs"][::max(1, len(ps['runs']) // 4)]),
            "bench/results/eidola_PASS.json")
    rg = S.get("REG")
    if isinstance(rg, dict) and "error" not in rg:
        row("eidola register_write from the device setup kernel vs from Python (4096 entries, random order)",
            f"device registered {rg['device_registered']}; tables identical: {rg['tables_identical']}", "bench/results/eidola_REG.json")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--only", choices=EXPERIMENTS, action="append")
    ap.add_argument("--module", default=None, help="prebuilt eidola module (eidola.replay.build_module's cubin)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--M", type=int, default=1024)
    ap.add_argument("--Kl", type=int, default=2048)
    ap.add_argument("--tiles", type=int, default=128)
    ap.add_argument("--e1-step-us", type=int, default=4)
    ap.add_argument("--knee-us", type=int, default=8, help="E1/E2 second fit over delays >= this (past the compute phase)")
    ap.add_argument("--e0-writes", type=int, default=1000)
    ap.add_argument("--e3-delay-ns", type=int, default=10_000)
    ap.add_argument("--eidolon-blocks", type=int, default=0, help="0 = auto (2..8 by table size)")
    ap.add_argument("--lag-ns", type=int, default=None, help="engine (a) calibration; default from E0's JSON")
    ap.add_argument("--corunner-iters", type=int, default=3000)
    ap.add_argument("--timeout", type=int, default=240, help="per experiment subprocess (s)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--replot", action="store_true", help="only draw the PNGs from the JSONs in --out")
    ap.add_argument("--summary-only", action="store_true", help="only print the summary of --out")
    ap.add_argument("--results-rows", action="store_true", help="print docs/RESULTS.md rows for --out")
    ap.add_argument("--card", default="NVIDIA H200")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    out = Path(args.out)
    if args.results_rows:
        print(results_rows(out, date=time.strftime("%Y-%m-%d", time.gmtime()), card=args.card,
                           command="python3 bench/eidola_experiments.py --out $OUT/res"))
        return 0
    if args.summary_only:
        print("SUMMARY " + json.dumps(summary(out), default=_json_default))
        return 0
    if args.replot:
        replot(out)
        print("SUMMARY " + json.dumps(summary(out), default=_json_default))
        return 0
    if args.module is None:
        from eidola.replay import build_module
        from workloads.gemv_allreduce.fused import build_module as build_workload
        args.module = str(build_module())
        build_workload()   # cached: the experiment children find it built
    args.eidolon_opts = None
    p = out / "eidola_E0.json"
    try:
        e0 = json.loads(p.read_text())["result"]
    except Exception:  # noqa: BLE001
        e0 = {}
    ch = e0.get("engine_a_chosen")
    if ch:   # E0's chosen eidolon configuration (its lag was calibrated for it)
        args.eidolon_opts = {"store": ch["store"], "layout": ch["layout"], "threads": ch["threads"]}
    if args.lag_ns is None:
        try:
            args.lag_ns = int(e0.get("engine_a_min8_lag_estimate_ns", e0.get("engine_a_lag_estimate_ns", 500)))
        except Exception:  # noqa: BLE001
            args.lag_ns = 500   # the measured H200 mean (notes/eidola-on-hardware.md) until E0 ran
    todo = args.only or list(EXPERIMENTS)
    if args.child:
        name = todo[0]
        rt = _runtime(args.module)
        t = time.perf_counter()
        rec = {"experiment": name, "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "host": platform.node(), "device": _device_info(), "argv": sys.argv, "lag_ns_used": args.lag_ns,
               "eidolon_opts_used": args.eidolon_opts}
        try:
            rec["result"] = FUNCS[name](rt, args)
        except Exception as e:  # noqa: BLE001
            log.exception("experiment %s failed", name)
            rec["error"] = repr(e)
        rec["wall_s"] = time.perf_counter() - t
        _write(out, name, rec)
        print(json.dumps({"experiment": name, "ok": "error" not in rec, "wall_s": round(rec["wall_s"], 1)}))
        return 0 if "error" not in rec else 1
    rc = 0
    for name in todo:
        cmd = [sys.executable, __file__, "--child", "--only", name, "--out", str(out), "--module", args.module,
               "--reps", str(args.reps), "--M", str(args.M), "--Kl", str(args.Kl), "--tiles", str(args.tiles),
               "--e1-step-us", str(args.e1_step_us), "--e0-writes", str(args.e0_writes), "--knee-us", str(args.knee_us),
               "--e3-delay-ns", str(args.e3_delay_ns), "--eidolon-blocks", str(args.eidolon_blocks),
               "--corunner-iters", str(args.corunner_iters)]
        if name != "E0" and not (name in ("E1", "E2", "E3") and (out / "eidola_E0.json").exists()):
            cmd += ["--lag-ns", str(args.lag_ns)]
        try:
            r = subprocess.run(cmd, timeout=args.timeout)
            rc |= r.returncode
        except subprocess.TimeoutExpired:
            log.error("experiment %s timed out after %d s", name, args.timeout)
            _write(out, name, {"experiment": name, "error": f"timeout after {args.timeout} s"})
            rc |= 1
    try:
        plots(out)
    except Exception:  # noqa: BLE001
        log.exception("plots failed")
    print("SUMMARY " + json.dumps(summary(out), default=_json_default))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
