#!/usr/bin/env python3
"""Thermal experiment: five throttling policies × 600 / 3,600 / 86,400 s at an OCP speed grade's operating
point (HBFSim paper §6.3), in simulated time on the CPU (card: "CPU (simulated time)").

Operating point (``--profile``, default ocp-sg1): one HBF stack offered its grade's full read bandwidth
(SG1 8 ch x 48 GB/s = 384 GB/s; SG2 16 x 96 = 1,536 GB/s; SG3 16 x 192 = 3,072 GB/s), 5 W idle + 8.4e-11 J/B
(37.3 / 134.0 / 263.0 W); the package ROM fit on profiles/thermal/hbf-package-8hi.json (SG2/SG3 are 16-high
parts: no 16-high package geometry exists, so their heat goes into the 8-high stack's layers and the
retention ledger maps their 16 dies onto the 8 thermal layers, two dies per layer).
Scenarios (GPU board power from a declared source — no GPU is used):
  h200-700W       constant 700 W (H200 under bf16 GEMM, measured ~693 W), coolant 35 C (profile)
  w45-1400W       stress: constant 1400 W (an assumed next-generation compute die) with 45 C
                  facility water (ASHRAE W45 class) -- chosen so the HBF stack reaches the
                  controller's thresholds; the compute die is far past its own limit there
  w45-trace       stress, hash-bound trace: 60 s at 1400 W / 60 s at 400 W, 1 s samples, ±20 W
                  noise, 45 C water

Retention/refresh: the whole stack (256 GiB) is registered as one zone; reads spread evenly over it
(weights streamed every token), so read disturb and retention both feed the refresh scheduler.
Refresh is tracked in groups of 256 physical blocks (256 MiB) so that 86,400 s stays fast: bytes,
order rules and PEC per block are unchanged; only the unit of one plan is coarser (disclosed in
the JSON as refresh_group_blocks).

    .venv/bin/python bench/thermal_policies.py [--horizons 600 3600 86400] [--out bench/results/thermal_policies.json.gz]
"""
from __future__ import annotations

import argparse
import hashlib
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hbfcommon.fsutil import atomic_write_bytes, atomic_write_json  # noqa: E402

from hbfcommon.profile import load_profile  # noqa: E402
from hbfd.reliability.hazard import HazardSweep  # noqa: E402
from hbfd.reliability.ledger import BlockLedger, ReliabilityParams  # noqa: E402
from hbfd.reliability.refresh import RefreshScheduler  # noqa: E402
from hbfd.thermal import load_rom_for  # noqa: E402
from hbfd.thermal.controller import POLICIES, PolicyConfig, make_policy  # noqa: E402
from hbfd.thermal.power import DEFAULT_HBM  # noqa: E402
from hbfd.thermal.simulate import Scenario, run_closed_loop  # noqa: E402
from hbfd.thermal.telemetry import ConstantSource, TelemetryGuard, TraceSource  # noqa: E402

GROUP = 256


def make_trace(path: Path, horizon_s: float) -> str:
    rng = np.random.default_rng(11)
    rows = ["t_ns,gpu_power_w,gpu_temp_c"]
    for s in range(int(horizon_s) + 2):
        base = 1400.0 if (s // 60) % 2 == 0 else 400.0
        rows.append(f"{s * 1_000_000_000},{base + rng.uniform(-20, 20):.3f},{55.0:.1f}")
    path.write_text("\n".join(rows) + "\n")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_one(prof, rom, scen: str, policy: str, horizon: float, trace: tuple[Path, str] | None) -> dict:
    th, g, e, r = prof.thermal, prof.geometry, prof.energy, prof.reliability
    bw = float(g.aggregate_bytes_per_s)                 # the grade's bandwidth, offered in full
    rom_layers = sum(1 for o in rom.output_names if o.startswith("hbf_l"))
    layers = min(g.stack_height, rom_layers)
    cfg = PolicyConfig.from_profile(th, policy, dt_s=rom.dt_s)
    if scen == "h200-700W":
        src = ConstantSource(700.0, 55.0)
        ambient = th.ambient_c
    elif scen == "w45-1400W":
        src = ConstantSource(1400.0, 70.0)
        ambient = 45.0
    else:
        src = TraceSource(*trace)
        ambient = 45.0
    rom.d = np.full(len(rom.output_names), ambient)
    guard = TelemetryGuard(src, int((th.telemetry_max_age_ms or 1000.0) * 1e6) + 500_000_000)
    sc = Scenario(horizon_s=horizon, offered_read_bytes_per_s=bw, media_bytes_per_s=bw,
                  idle_w=e.idle_w, j_per_byte=e.j_per_byte, read_j=e.read_j, program_j=e.program_j,
                  read_command_bytes=g.page_bytes, hbm=DEFAULT_HBM,
                  hbm_traffic_bytes_per_s=th.hbm_traffic_bytes_per_s or 0.0,
                  thresholds={"rtt": th.rtt_c, "ltt": th.ltt_c, "stt": th.stt_c, "shutdown": th.shutdown_c},
                  sample_period_s=1.0 if horizon <= 3600 else 10.0)
    n_blocks = g.channels * g.dies_per_channel * g.planes_per_die * g.blocks_per_plane
    led = BlockLedger(ReliabilityParams.from_profile(r), channels=g.channels, dies_per_channel=g.dies_per_channel,
                      layers=layers, block_bytes=GROUP * g.pages_per_block * g.page_bytes,
                      pages_per_block=GROUP * g.pages_per_block, blocks_per_entry=GROUP)
    led.register(0, np.arange(n_blocks // GROUP))
    rom.reset()
    t0 = time.perf_counter()
    c0 = time.process_time()
    res = run_closed_loop(rom, make_policy(cfg), guard, sc, ledger=led,
                          refresh=RefreshScheduler(led, page_bytes=g.page_bytes),
                          hazard=HazardSweep.from_profile(r))
    res["wall_s"] = time.perf_counter() - t0
    res["_cpu_s"] = time.process_time() - c0
    res["scenario"] = scen
    res["ambient_c"] = ambient
    res["refresh_group_blocks"] = GROUP
    res["offered_bytes_per_s"] = bw
    res["ledger_layers"] = layers
    res["cpu_s"] = res.pop("_cpu_s")
    res["registered_bytes"] = n_blocks * g.pages_per_block * g.page_bytes
    res["pec_per_physical_block"] = res["reliability"]["pec_max"]
    return res


KEEP_TRANSITIONS = 200


def trim_transitions(res: dict) -> dict:
    """Keep the JSON small: an oscillating policy makes tens of thousands of transitions a day; the first and
    the last KEEP_TRANSITIONS are kept, the count is in ``transitions_total`` (the summary row has it too)."""
    tr = res["transitions"]
    res["transitions_total"] = len(tr)
    if len(tr) > 2 * KEEP_TRANSITIONS:
        res["transitions"] = tr[:KEEP_TRANSITIONS] + tr[-KEEP_TRANSITIONS:]
        res["transitions_trimmed"] = len(tr) - 2 * KEEP_TRANSITIONS
    return res


def summarize(res: dict) -> dict:
    sa = res["seconds_above"]
    return {"scenario": res["scenario"], "policy": res["policy"]["name"], "horizon_s": res["horizon_s"],
            "simulated_s": res["simulated_s"], "terminal_status": res["terminal_status"],
            "offered_GBps": res["offered_bytes_per_s"] / 1e9,
            "app_GBps_window_30_60": (res["application_bytes_per_s_window"] or 0) / 1e9,
            "app_GBps_mean": res["application_bytes_per_s_mean"] / 1e9,
            "refresh_GBps_mean": res["refresh_bytes"] / max(res["simulated_s"], 1e-9) / 1e9,
            "peak_hbf_c": res["peak_hbf_c"], "peak_gpu_c": res["peak_c"].get("gpu"),
            "s_above_ltt": sa["ltt"], "s_above_stt": sa["stt"], "s_above_shutdown": sa["shutdown"],
            "transitions": len(res["transitions"]),
            "residency_s": {k: v / 1e9 for k, v in res["residency_ns"].items()},
            "refresh_blocks": res["refresh"]["completed_refresh_blocks"] * GROUP,
            "pec_max": res["reliability"]["pec_max"],
            "damage_max": res["reliability"]["damage_max"],
            "hazard_p_fail_ea_0.5_1.1": [res["hazard_sweep"][0]["failure_probability"],
                                         res["hazard_sweep"][-1]["failure_probability"]],
            "s_outside_normal": sum(v for k, v in res["residency_ns"].items() if k != "Normal") / 1e9,
            "wall_s": res["wall_s"], "cpu_s": res["cpu_s"], "slow_ticks": res["slow_ticks"], "chunks": res["chunks"]}


def plot(results: list[dict], out_png: Path, title: str) -> bool:
    """One panel per scenario: the hottest HBF layer of each policy over the 600 s runs (1 s samples); False
    (nothing written) when there is no 600 s run."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = [r for r in results if r["horizon_s"] == 600]
    scens = list(dict.fromkeys(r["scenario"] for r in runs))
    if not scens:
        return False
    fig, axes = plt.subplots(1, len(scens), figsize=(6.5 * len(scens), 4.5), squeeze=False)
    for res in runs:
        ax = axes[0][scens.index(res["scenario"])]
        t = np.array([s["t_ns"] for s in res["samples"]]) / 1e9
        hb = np.array([s["hbf_max_c"] for s in res["samples"]])
        end = "" if res["terminal_status"] == "clean" else f", {res['terminal_status']} at {res['simulated_s']:.2f} s"
        ax.plot(t, hb, label=f"{res['policy']['name']}: {(res['application_bytes_per_s_mean'] or 0) / 1e9:.0f} GB/s{end}")
        ax.set_title(f"{title} {res['scenario']}: hottest HBF layer, 600 s")
    for ax in axes[0]:
        for k, v in (runs[0]["thresholds_c"] or {}).items():
            ax.axhline(v, ls=":", color="gray", lw=0.8)
            ax.text(0, v, f" {k}", fontsize=7, va="bottom", color="gray")
        ax.set_xlabel("simulated time (s)")
        ax.set_ylabel("°C")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--horizons", type=float, nargs="+", default=[600.0, 3600.0, 86400.0])
    ap.add_argument("--scenarios", nargs="+", default=["h200-700W", "w45-1400W", "w45-trace"])
    ap.add_argument("--policies", nargs="+", default=list(POLICIES))
    ap.add_argument("--profile", default="ocp-sg1", help="speed grade profile (ocp-sg1 | ocp-sg2 | ocp-sg3 | ...)")
    ap.add_argument("--out", default=None, help="default bench/results/thermal_policies.json.gz for ocp-sg1, "
                                                "bench/results/thermal_policies_<profile>.json.gz otherwise "
                                                "(a name ending in .gz is written gzip-compressed: the runs' "
                                                "samples make 8-16 MB of JSON per grade)")
    ap.add_argument("--resume", action="store_true", help="keep the runs already in --out, do the rest")
    args = ap.parse_args(argv)
    prof = load_profile(args.profile)
    if args.out is None:
        args.out = str(ROOT / "bench/results" / ("thermal_policies.json.gz" if args.profile == "ocp-sg1"
                                                 else f"thermal_policies_{args.profile}.json.gz"))
    rom, geom = load_rom_for(prof.thermal.geometry, ambient_c=prof.thermal.ambient_c)
    tmp = Path(tempfile.mkdtemp())
    trace_path = tmp / "trace-phases.csv"
    sha = make_trace(trace_path, max(args.horizons))
    results, rows = [], []
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if args.resume and out.exists():
        old = json.loads(gzip.decompress(out.read_bytes()) if out.suffix == ".gz" else out.read_text())
        if old.get("trace", {}).get("sha256") == sha and old.get("profile", {}).get("sha256") == prof.sha256:
            rows, results = old["summary"], old["runs"]
            done = {(r["scenario"], r["policy"], r["horizon_s"]) for r in rows}

    def write() -> None:
        doc = {"experiment": "thermal_policies", "card": "CPU (simulated time)",
               "date": time.strftime("%Y-%m-%d", time.gmtime()),
               "command": "python bench/thermal_policies.py " + " ".join(argv or sys.argv[1:]),
               "profile": {"name": prof.name, "sha256": prof.sha256},
               "geometry": {"name": geom.name, "sha256": geom.sha256}, "rom_states": rom.order,
               "trace": {"path": "generated by make_trace() (60 s 1400 W / 60 s 400 W, 1 s samples)", "sha256": sha},
               "complete": len(rows) == len(args.scenarios) * len(args.horizons) * len(args.policies),
               "summary": rows, "runs": results}
        if out.suffix == ".gz":
            atomic_write_bytes(out, gzip.compress(json.dumps(doc, default=float).encode(), mtime=0))
        else:
            atomic_write_json(out, doc, default=float)

    for horizon in sorted(args.horizons):
        for scen in args.scenarios:
            for pol in args.policies:
                if (scen, pol, horizon) in done:
                    continue
                res = run_one(prof, rom, scen, pol, horizon, (trace_path, sha))
                row = summarize(res)
                rows.append(row)
                print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()
                                  if k not in ("residency_s",)}), flush=True)
                trim_transitions(res)
                if horizon > 3600:
                    res["samples"] = res["samples"][::6]          # keep the JSON small: 60 s samples
                else:
                    res["samples"] = res["samples"][::5] if horizon > 600 else res["samples"]
                results.append(res)
                write()
    png = out.with_suffix(".png")
    print(f"wrote {out}" + (f" and {png}" if plot(results, png, prof.name) else " (no 600 s run: no plot)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
