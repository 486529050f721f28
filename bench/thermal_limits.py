#!/usr/bin/env python3
"""Thermal experiment: steady-state resistance / cross-talk matrix R_ij, the limit solve (which
component reaches its limit first, HBFSim paper §6.3 table), and the per-layer HBF temperature over
time and versus external heat load (paper Fig. 3). CPU, simulated time.

The HBF stack runs at the OCP SG1 read point (5 W idle + 8.4e-11 J/B × 384 GB/s = 37.256 W) at every
load; the external heat load W goes into the compute die and the HBM region in the H200 operating
split (compute die = 700 W board − modeled HBM power; HBM = the profile's HBM power model).

    .venv/bin/python bench/thermal_limits.py [--out bench/results/thermal_limits.json]
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench/results/thermal_limits.json"))
    args = ap.parse_args(argv)
    prof = load_profile("ocp-sg1")
    th, e = prof.thermal, prof.energy
    rom, geom = load_rom_for(th.geometry, ambient_c=th.ambient_c)
    model = build_model(geom)
    t0 = time.perf_counter()
    R_fom = model.resistance_matrix()
    t_r = time.perf_counter() - t0
    R_rom = rom.dc_gain()
    names = list(rom.input_names)
    outs = list(rom.output_names)
    p_hbf = hbf_power_vector(names, idle_w=e.idle_w, j_per_byte=e.j_per_byte, read_bytes_per_s=384e9)
    hbm_w = DEFAULT_HBM.power_w(th.hbm_traffic_bytes_per_s or 0.0)
    gpu_frac = (700.0 - hbm_w) / 700.0
    split = np.zeros(len(names))
    split[names.index("gpu")] = gpu_frac
    split[names.index("hbm")] = 1 - gpu_frac
    limits = {"gpu": th.limit_gpu_c, "hbm": th.limit_hbm_c, "hbf": th.limit_hbf_c}
    rows = limit_solve(R_fom, geom, ambient_c=th.ambient_c, limits_c=limits, p_hbf_w=p_hbf, split=split)
    rows_rom = limit_solve(R_rom, geom, ambient_c=th.ambient_c, limits_c=limits, p_hbf_w=p_hbf, split=split)
    w_first = min(r.load_w for r in rows)
    # Fig. 3a: first 3 s (and 120 s) from ambient at the whole-package operating point
    p_op = p_hbf + w_first * split
    rom.reset()
    n = int(round(120.0 / rom.dt_s))
    Y = rom.run(np.tile(p_op, (n, 1)))
    rom.reset()
    t = (np.arange(n) + 1) * rom.dt_s
    steady_op = R_fom @ p_op + th.ambient_c
    # Fig. 3b: steady per-layer vs external load 0..max
    loads = np.linspace(0.0, max(1.5 * max(r.load_w for r in rows), 200.0), 121)
    T = sweep_load(R_fom, ambient_c=th.ambient_c, p_hbf_w=p_hbf, split=split, loads_w=loads)
    layer_idx = [i for i, o in enumerate(outs) if o.startswith("hbf_l")]
    doc = {
        "experiment": "thermal_limits", "card": "CPU (simulated time)", "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "command": "python bench/thermal_limits.py",
        "profile": {"name": prof.name, "sha256": prof.sha256}, "geometry": {"name": geom.name, "sha256": geom.sha256},
        "fom_nodes": model.n_nodes, "rom_states": rom.order, "ambient_c": th.ambient_c,
        "inputs": names, "outputs": outs,
        "R_fom_k_per_w": R_fom.tolist(), "R_rom_minus_fom_max_k_per_w": float(np.abs(R_rom - R_fom).max()),
        "resistance_solve_s": t_r,
        "hbf_power_w": float(p_hbf.sum()), "external_split": {"gpu": gpu_frac, "hbm": 1 - gpu_frac},
        "limits_c": limits,
        "limit_table": [r.__dict__ for r in rows],
        "limit_table_from_rom": [r.__dict__ for r in rows_rom],
        "operating_point_load_w": w_first,
        "operating_point_steady_c": dict(zip(outs, steady_op.tolist())),
        "hbf_layer_span_at_operating_point_k": float(steady_op[layer_idx].max() - steady_op[layer_idx].min()),
        "fig3a_first_3s": {"t_s": t[:300].tolist(), "temps_c": {o: Y[:300, i].tolist() for i, o in enumerate(outs)}},
        "fig3a_120s_end_c": dict(zip(outs, Y[-1].tolist())),
        "fig3b": {"load_w": loads.tolist(), "temps_c": {o: T[:, i].tolist() for i, o in enumerate(outs)}},
    }
    out = atomic_write_json(args.out, doc, indent=1)
    for r in rows:
        print(f"{r.component:>4}: limit {r.limit_c:.0f} C reached at external load {r.load_w:8.1f} W "
              f"(output {r.binding_output}){'  <- first' if r.first else ''}")
    print(f"HBF layers at the operating point: {steady_op[layer_idx[0]]:.1f} C (layer 0) .. "
          f"{steady_op[layer_idx[-1]]:.1f} C (layer 7), span {doc['hbf_layer_span_at_operating_point_k']:.2f} K")
    print(f"ROM DC gain vs FOM R: {doc['R_rom_minus_fom_max_k_per_w']:.2e} K/W")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(1, 2, figsize=(13, 4.8))
        for i in layer_idx:
            ax[0].plot(t[:300], Y[:300, i], label=outs[i])
            ax[1].plot(loads, T[:, i], label=outs[i])
        ax[0].plot(t[:300], Y[:300, outs.index("gpu")], "k--", label="gpu")
        ax[1].plot(loads, T[:, outs.index("gpu")], "k--", label="gpu")
        ax[0].set_title(f"(a) first 3 s at the package operating point ({w_first:.0f} W external)")
        ax[0].set_xlabel("time (s)")
        ax[1].set_title("(b) steady state vs external heat load (HBF at 37.3 W)")
        ax[1].set_xlabel("external heat load, compute die + HBM (W)")
        for r in rows:
            ax[1].axvline(r.load_w, ls=":" if not r.first else "-", color="gray")
            ax[1].text(r.load_w, ax[1].get_ylim()[0] + 2, f" {r.component} {r.limit_c:.0f}C", rotation=90, fontsize=8)
        for a in ax:
            a.set_ylabel("°C")
            a.grid(alpha=0.3)
            a.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        fig.savefig(out.with_suffix(".png"), dpi=110)
        print(f"wrote {out} and {out.with_suffix('.png')}")
    except ImportError:
        print(f"wrote {out} (matplotlib missing: no plot)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
