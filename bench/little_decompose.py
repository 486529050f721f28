#!/usr/bin/env python3
"""Where a Little round's excess over its modeled latency goes, from recorded devpath_cost runs (issue 13 item 2; no
GPU). The Little part measures three latency-bound fp16 reductions at a fixed 20 us: e65536_b8192 (8 vector loads per
thread per round, 8 rounds per program), e8192_b8192 (8 loads, ONE round per program) and e8192_b512 (1 load, 16
rounds). With a round's excess over the latency modeled as a per-round cost plus a per-program (block-life) cost
spread over the program's rounds,

    excess(kernel) = per_round(loads) + per_block / rounds_per_program,

the two 8-load kernels give both terms (two equations), and e8192_b512 then gives the 1-load per-round cost. Assumes
the per-block cost is the same in both 8-load kernels (they differ in registers: 128 vs 234, 4 vs 2 blocks/SM).
Per file: the three round excesses, the fitted terms, measured/Little; then the medians over the files.

    python3 bench/little_decompose.py --out bench/results/little_decompose_cpu.json bench/results/stop5[35]_h100
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from hbfcommon.fsutil import atomic_write_json  # noqa: E402

log = logging.getLogger("little_decompose")
K8, K1, KB = "little_e65536_b8192", "little_e8192_b8192", "little_e8192_b512"


def decompose(parts: dict) -> dict | None:
    """The fit for one devpath_cost run's Little parts (None when one of the three is missing)."""
    m = {}
    for k in (K8, K1, KB):
        v = parts.get(k)
        if not isinstance(v, dict) or not isinstance(v.get("model"), dict):
            return None
        mo = v["model"]
        if mo.get("round_measured_ns") is None:
            return None
        m[k] = {"rounds": v["rounds_per_program"], "latency_ns": v["latency_ns"],
                "excess_ns": mo["round_measured_ns"] - v["latency_ns"],
                "measured_over_little": mo.get("measured_over_little"),
                "registers": (v.get("kernel_hbf") or {}).get("n_regs"), "blocks_per_sm": v.get("blocks_per_sm_hbf")}
    r8, r1 = m[K8]["rounds"], m[K1]["rounds"]
    if r8 == r1:
        return None
    per_block = (m[K1]["excess_ns"] - m[K8]["excess_ns"]) / (1 / r1 - 1 / r8)
    per_round8 = m[K8]["excess_ns"] - per_block / r8
    per_round1 = m[KB]["excess_ns"] - per_block / m[KB]["rounds"]
    return {"kernels": m, "per_block_ns": round(per_block), "per_round_8_loads_ns": round(per_round8),
            "per_round_1_load_ns": round(per_round1),
            # what the 5 % goal allows of e65536_b8192's round, and what it would take from each term alone
            "goal_excess_ns": round(0.05 * m[K8]["latency_ns"]),
            "to_cut_ns": round(m[K8]["excess_ns"] - 0.05 * m[K8]["latency_ns"])}


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="devpath_cost.json files or folders searched for *devpath_cost.json")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    files: list[Path] = []
    for p in map(Path, a.paths):
        if p.is_dir():
            files += sorted(p.rglob("*devpath_cost.json"))
        elif p.is_file():
            files.append(p)
        else:
            ap.error(f"{p}: no such file or folder")
    runs = {}
    for f in files:
        try:
            parts = json.loads(f.read_text()).get("parts") or {}
        except (OSError, ValueError) as e:
            log.warning("%s: unreadable (%s)", f, e)
            continue
        d = decompose(parts)
        if d is not None:
            runs[str(f.relative_to(ROOT) if f.is_relative_to(ROOT) else f)] = d
    if not runs:
        log.error("no run with the three Little kernels among %d files", len(files))
        return 1
    med = {k: statistics.median(r[k] for r in runs.values())
           for k in ("per_block_ns", "per_round_8_loads_ns", "per_round_1_load_ns")}
    spread = {k: [min(r[k] for r in runs.values()), max(r[k] for r in runs.values())] for k in med}
    res = {"what": __doc__.split("\n\n")[0], "model": "excess = per_round(loads) + per_block / rounds_per_program",
           "runs": runs, "median": med, "min_max": spread}
    atomic_write_json(Path(a.out), res, indent=1)
    log.info("%d runs: per block %.0f ns [%d, %d], per round 8 loads %.0f ns [%d, %d], 1 load %.0f ns [%d, %d]",
             len(runs), med["per_block_ns"], *spread["per_block_ns"], med["per_round_8_loads_ns"],
             *spread["per_round_8_loads_ns"], med["per_round_1_load_ns"], *spread["per_round_1_load_ns"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
