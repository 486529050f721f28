#!/usr/bin/env python3
"""Thermal experiment: ROM vs full-order model on held-out inputs (step, square wave, burst), with the
one-sample feedthrough alignment made explicit, and python-control's eigensys_realization on the
same Markov data. CPU, simulated time.

    .venv/bin/python bench/thermal_rom_validation.py [--seconds 60] [--out bench/results/thermal_rom_validation.json]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hbfcommon.fsutil import atomic_write_json  # noqa: E402

from hbfd.thermal.fom import build_model  # noqa: E402
from hbfd.thermal.geometry import load_geometry  # noqa: E402
from hbfd.thermal.rom import compare_with_python_control, fit_rom  # noqa: E402
from hbfd.thermal.validate import DEFAULT_GEOMETRY, format_table, validate  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--geometry", default=str(DEFAULT_GEOMETRY))
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--hankel-blocks", type=int, nargs="+", default=[100, 150])
    ap.add_argument("--out", default=str(ROOT / "bench/results/thermal_rom_validation.json"))
    args = ap.parse_args(argv)
    geom = load_geometry(args.geometry)
    model = build_model(geom)
    m_max = max(args.hankel_blocks)
    t0 = time.perf_counter()
    steps = model.stepper(0.01).unit_step_responses(2 * m_max + 2)
    t_steps = time.perf_counter() - t0
    fits = []
    for m in args.hankel_blocks:
        t0 = time.perf_counter()
        rom = fit_rom(model, hankel_blocks=m, steps=steps[:2 * m + 2])
        t_fit = time.perf_counter() - t0
        res = validate(model, rom, seconds=args.seconds)
        res["fit_seconds"] = t_fit
        res["python_control"] = compare_with_python_control(steps[:2 * m + 2], m=m, r=rom.order, dt_s=0.01)
        print(format_table(res), flush=True)
        fits.append(res)
    doc = {"experiment": "thermal_rom_validation", "card": "CPU (simulated time)",
           "date": time.strftime("%Y-%m-%d", time.gmtime()),
           "command": "python bench/thermal_rom_validation.py " + " ".join(argv or sys.argv[1:]),
           "geometry": {"name": geom.name, "sha256": geom.sha256}, "unit_step_seconds": t_steps, "fits": fits}
    out = atomic_write_json(args.out, doc, indent=1, default=float)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
