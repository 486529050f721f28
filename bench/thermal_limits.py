#!/usr/bin/env python3
"""Thermal experiment: steady-state resistance / cross-talk matrix R_ij, the limit solve (which
component reaches its limit first, HBFSim paper §6.3 table), and the per-layer HBF temperature over
time and versus external heat load (paper Fig. 3). CPU, simulated time.

For each OCP speed grade (``--profiles``, default ocp-sg1 ocp-sg2 ocp-sg3) the HBF stack runs at the grade's
full read bandwidth (5 W idle + 8.4e-11 J/B: SG1 384 GB/s = 37.3 W, SG2 1,536 GB/s = 134.0 W, SG3 3,072 GB/s =
263.0 W) at every load; the external heat load W goes into the compute die and the HBM region in the H200
operating split (compute die = 700 W board − modeled HBM power; HBM = the profile's HBM power model). Each run
takes grades of one package geometry: SG1 is 8-high (hbf-package-8hi), SG2 and SG3 are 16-high (hbf-package-16hi,
since 2026-12-05; before, they ran on the 8-high package). Also per grade:
the HBF layer spread at the compute-die limit (the paper's 91.6 -> 47.2 C), the steady HBF temperature at the
H200-class point (700 W board) and the HBF bandwidth at which it reaches LTT / STT / shutdown there.

    .venv/bin/python bench/thermal_limits.py --profiles ocp-sg1 --out bench/results/thermal_limits.json
    .venv/bin/python bench/thermal_limits.py --profiles ocp-sg2 ocp-sg3 --out bench/results/thermal_limits_16hi.json
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hbfcommon.fsutil import atomic_write_json  # noqa: E402

from hbfcommon.profile import load_profile  # noqa: E402
from hbfd.thermal import load_rom_for  # noqa: E402
from hbfd.thermal.fom import build_model  # noqa: E402
from hbfd.thermal.limits import hbf_power_vector, limit_solve, sweep_load  # noqa: E402
from hbfd.thermal.power import DEFAULT_HBM  # noqa: E402


GRADES = ("ocp-sg1", "ocp-sg2", "ocp-sg3")
PAPER = {"gpu_limit_load_w": 86.6, "hbf_layer0_c": 91.6, "hbf_layer7_c": 47.2, "span_k": 44.4}


def grade(name: str, R_fom: np.ndarray, R_rom: np.ndarray, rom, geom, split: np.ndarray) -> dict:
    """Limit table, operating point, layer spread and the Fig. 3 data of one speed grade (its full bandwidth)."""
    prof = load_profile(name)
    th, e, g = prof.thermal, prof.energy, prof.geometry
    names, outs = list(rom.input_names), list(rom.output_names)
    bw = float(g.aggregate_bytes_per_s)
    p_hbf = hbf_power_vector(names, idle_w=e.idle_w, j_per_byte=e.j_per_byte, read_bytes_per_s=bw)
    limits = {"gpu": th.limit_gpu_c, "hbm": th.limit_hbm_c, "hbf": th.limit_hbf_c}
    rows = limit_solve(R_fom, geom, ambient_c=th.ambient_c, limits_c=limits, p_hbf_w=p_hbf, split=split)
    rows_rom = limit_solve(R_rom, geom, ambient_c=th.ambient_c, limits_c=limits, p_hbf_w=p_hbf, split=split)
    first = next(r for r in rows if r.first)
    gpu_row = next(r for r in rows if r.component == "gpu")
    layer_idx = [i for i, o in enumerate(outs) if o.startswith("hbf_l")]
    hbf_idx = [i for i, o in enumerate(outs) if o.startswith("hbf")]
    # the paper's layer spread is taken at the compute-die limit (whichever component binds first)
    at_gpu = R_fom @ (p_hbf + max(gpu_row.load_w, 0.0) * split) + th.ambient_c
    # the H200-class point of the policy runs: 700 W board power (compute die + HBM), the grade's bandwidth
    hbm_w = DEFAULT_HBM.power_w(th.hbm_traffic_bytes_per_s or 0.0)
    p_h200 = p_hbf.copy()
    p_h200[names.index("gpu")] += 700.0 - hbm_w
    p_h200[names.index("hbm")] += hbm_w
    at_h200 = R_fom @ p_h200 + th.ambient_c
    hbf_max_h200 = float(at_h200[hbf_idx].max())
    # the HBF read bandwidth at which the hottest HBF output reaches each threshold at the H200 point
    # (linear: T = T(0 B/s) + bw * dT/dbw)
    p0 = p_h200 - p_hbf + hbf_power_vector(names, idle_w=e.idle_w, j_per_byte=e.j_per_byte, read_bytes_per_s=0.0)
    dpdb = hbf_power_vector(names, idle_w=0.0, j_per_byte=e.j_per_byte, read_bytes_per_s=1.0)
    t0, slope = R_fom @ p0 + th.ambient_c, R_fom @ dpdb
    bw_at = {}
    for k, thr in (("ltt", th.ltt_c), ("stt", th.stt_c), ("shutdown", th.shutdown_c)):
        bw_at[k] = float(min((thr - t0[i]) / slope[i] for i in hbf_idx if slope[i] > 0))
    steady_q_ltt = min(1.0, bw_at["ltt"] / bw)
    return {
        "profile": {"name": prof.name, "sha256": prof.sha256}, "bandwidth_bytes_per_s": bw,
        "hbf_power_w": float(p_hbf.sum()), "ambient_c": th.ambient_c, "limits_c": limits,
        "thresholds_c": {"rtt": th.rtt_c, "ltt": th.ltt_c, "stt": th.stt_c, "shutdown": th.shutdown_c},
        "limit_table": [r.__dict__ for r in rows], "limit_table_from_rom": [r.__dict__ for r in rows_rom],
        "first": {"component": first.component, "load_w": first.load_w, "output": first.binding_output},
        "gpu_limit_load_w": gpu_row.load_w,
        # a negative limit load: the component is past its limit with no external load at all
        "hbf_alone_max_c": float((R_fom @ p_hbf + th.ambient_c)[hbf_idx].max()),
        "at_gpu_limit_c": dict(zip(outs, at_gpu.tolist())),
        "hbf_layer0_at_gpu_limit_c": float(at_gpu[layer_idx[0]]), "hbf_top_layer": outs[layer_idx[-1]],
        # the top layer (layer 7 of the 8-high package, layer 15 of the 16-high one; the key kept for old readers)
        "hbf_layer7_at_gpu_limit_c": float(at_gpu[layer_idx[-1]]),
        "hbf_top_layer_at_gpu_limit_c": float(at_gpu[layer_idx[-1]]),
        "hbf_layer_span_at_gpu_limit_k": float(at_gpu[layer_idx].max() - at_gpu[layer_idx].min()),
        "h200_700w_steady_c": dict(zip(outs, at_h200.tolist())), "h200_700w_hbf_max_c": hbf_max_h200,
        "h200_700w_steady_state_above": {k: bool(hbf_max_h200 >= v) for k, v in
                                         (("ltt", th.ltt_c), ("stt", th.stt_c), ("shutdown", th.shutdown_c))},
        "h200_700w_hbf_bandwidth_at_threshold_bytes_per_s": bw_at,
        "h200_700w_steady_q_to_stay_below_ltt": steady_q_ltt,
        "_p_hbf": p_hbf, "_p_first": p_hbf + max(gpu_row.load_w, 0.0) * split, "_first_load": max(gpu_row.load_w, 0.0),
        "_rows": rows,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench/results/thermal_limits.json"))
    ap.add_argument("--profiles", nargs="+", default=["ocp-sg1"],
                    help="speed grades of ONE package geometry, each at its full bandwidth (default ocp-sg1; "
                         f"the grades: {', '.join(GRADES)}; SG2/SG3 are 16-high)")
    args = ap.parse_args(argv)
    c0 = time.process_time()
    prof = load_profile(args.profiles[0])
    th = prof.thermal
    rom, geom = load_rom_for(th.geometry, ambient_c=th.ambient_c)
    model = build_model(geom)
    t0 = time.perf_counter()
    R_fom = model.resistance_matrix()
    t_r = time.perf_counter() - t0
    R_rom = rom.dc_gain()
    names = list(rom.input_names)
    outs = list(rom.output_names)
    hbm_w = DEFAULT_HBM.power_w(th.hbm_traffic_bytes_per_s or 0.0)
    gpu_frac = (700.0 - hbm_w) / 700.0
    split = np.zeros(len(names))
    split[names.index("gpu")] = gpu_frac
    split[names.index("hbm")] = 1 - gpu_frac
    layer_idx = [i for i, o in enumerate(outs) if o.startswith("hbf_l")]
    grades = {}
    for name in args.profiles:
        p = load_profile(name)
        if p.thermal.geometry != th.geometry or p.thermal.ambient_c != th.ambient_c:
            raise SystemExit(f"{name}: thermal geometry/ambient ({p.thermal.geometry}) differ from "
                             f"{args.profiles[0]}'s "
                             f"({th.geometry}); run the grades of each package geometry on their own (--profiles)")
        grades[name] = grade(name, R_fom, R_rom, rom, geom, split)
    loads = np.linspace(0.0, 1200.0, 121)
    fig_a, fig_b = {}, {}
    for name, gr in grades.items():
        rom.reset()
        n = int(round(120.0 / rom.dt_s))
        Y = rom.run(np.tile(gr["_p_first"], (n, 1)))
        rom.reset()
        t = (np.arange(n) + 1) * rom.dt_s
        T = sweep_load(R_fom, ambient_c=th.ambient_c, p_hbf_w=gr["_p_hbf"], split=split, loads_w=loads)
        fig_a[name] = (t, Y)
        fig_b[name] = T
        gr["fig3a_first_3s"] = {"t_s": t[:300].tolist(), "temps_c": {o: Y[:300, i].tolist() for i, o in enumerate(outs)}}
        gr["fig3a_120s_end_c"] = dict(zip(outs, Y[-1].tolist()))
        gr["fig3b_temps_c"] = {o: T[:, i].tolist() for i, o in enumerate(outs)}
    cpu_s = time.process_time() - c0
    doc = {
        "experiment": "thermal_limits", "card": "CPU (simulated time)", "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "command": "python bench/thermal_limits.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "geometry": {"name": geom.name, "sha256": geom.sha256},
        "fom_nodes": model.n_nodes, "rom_states": rom.order, "ambient_c": th.ambient_c,
        "inputs": names, "outputs": outs,
        "R_fom_k_per_w": R_fom.tolist(), "R_rom_minus_fom_max_k_per_w": float(np.abs(R_rom - R_fom).max()),
        "resistance_solve_s": t_r, "cpu_s": cpu_s,
        "external_split": {"gpu": gpu_frac, "hbm": 1 - gpu_frac},
        "paper": PAPER,
        "fig3b_load_w": loads.tolist(),
        "grades": {k: {kk: vv for kk, vv in v.items() if not kk.startswith("_")} for k, v in grades.items()},
    }
    out = atomic_write_json(args.out, doc, indent=1)
    for name, gr in grades.items():
        print(f"{name}: {gr['bandwidth_bytes_per_s'] / 1e9:,.0f} GB/s, HBF {gr['hbf_power_w']:.1f} W")
        for r in gr["_rows"]:
            print(f"  {r.component:>4}: limit {r.limit_c:.0f} C reached at external load {r.load_w:8.1f} W "
                  f"(output {r.binding_output}){'  <- first' if r.first else ''}")
        print(f"  HBF alone (no external load): {gr['hbf_alone_max_c']:.1f} C")
        print(f"  HBF layers at the compute-die limit: {gr['hbf_layer0_at_gpu_limit_c']:.1f} C (layer 0) .. "
              f"{gr['hbf_top_layer_at_gpu_limit_c']:.1f} C ({gr['hbf_top_layer']}, the top), "
              f"span {gr['hbf_layer_span_at_gpu_limit_k']:.2f} K "
              f"(paper: 91.6 .. 47.2 C, 44.4 K)")
        print(f"  H200 point (700 W): HBF max {gr['h200_700w_hbf_max_c']:.1f} C steady; LTT reached above "
              f"{gr['h200_700w_hbf_bandwidth_at_threshold_bytes_per_s']['ltt'] / 1e9:,.0f} GB/s")
    print(f"ROM DC gain vs FOM R: {doc['R_rom_minus_fom_max_k_per_w']:.2e} K/W; {cpu_s:.1f} CPU s")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"wrote {out} (matplotlib missing: no plot)")
        return 0
    fig, ax = plt.subplots(2, len(grades), figsize=(6.2 * len(grades), 9), squeeze=False)
    for j, (name, gr) in enumerate(grades.items()):
        t, Y = fig_a[name]
        T = fig_b[name]
        a, b = ax[0][j], ax[1][j]
        for i in layer_idx + [outs.index("hbf_base")]:
            a.plot(t[:300], Y[:300, i], label=outs[i])
            b.plot(loads, T[:, i], label=outs[i])
        for o, st in (("gpu", "k--"), ("hbm", "k:")):
            a.plot(t[:300], Y[:300, outs.index(o)], st, label=o)
            b.plot(loads, T[:, outs.index(o)], st, label=o)
        a.set_title(f"(a) {name}: first 3 s at the compute-die limit ({gr['_first_load']:.0f} W external, "
                    f"HBF {gr['hbf_power_w']:.0f} W)", fontsize=9)
        a.set_xlabel("time (s)")
        b.set_title(f"(b) {name}: steady state vs external load (HBF at {gr['bandwidth_bytes_per_s'] / 1e9:,.0f} GB/s)",
                    fontsize=9)
        b.set_xlabel("external heat load, compute die + HBM (W)")
        for r in gr["_rows"]:
            if 0 <= r.load_w <= loads[-1]:
                b.axvline(r.load_w, ls="-" if r.first else ":", color="gray")
                b.text(r.load_w, b.get_ylim()[0] + 2, f" {r.component} {r.limit_c:.0f}C", rotation=90, fontsize=8)
        for k, v in gr["thresholds_c"].items():
            b.axhline(v, ls="-.", color="r", lw=0.5)
        for x in (a, b):
            x.set_ylabel("°C")
            x.grid(alpha=0.3)
            x.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=100)
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
