#!/usr/bin/env python3
"""Where the issue path's time goes, step by step, on the GPU (issue 13, goal 2).

    python3 bench/issue_path_profile.py --out $OUT/ipp [--fixed-ns 0] [--modes fixed,fast-hit,fast-miss]

Builds bench/src/issue_path_profile.cu three times with nvcc (the helper library included as source):
``compact`` (the default helpers, HBF_ISSUE_PROFILE=1: %clock64 stamps at the checkpoints of the
compact issue path, runtime_cuda/src/hbf_helpers.cu HB_PROF), ``compact_noprof`` (the production
helpers: totals only, to see what the stamps cost) and ``general`` (HBF_FAST_ISSUE=0: every hit takes
hb_issue_slow; totals only). Each build runs one warp (idle) and 16 blocks
of 4 warps per SM (loaded); each warp does 32 dependent rounds of issue (32 lanes x 4 B, one page,
FIXED source) + load + wait + use. Reported per step: median / p10 / p90 cycles over warps x rounds
1..31, and the helper's own counters. Modes: ``fixed`` (the FIXED source), ``fast-hit`` / ``fast-miss``
(the fast model on an OCP-SG1-like geometry; 32 rounds on one page = MRU buffer hits after the first, or a
new page every round = a sense each; checkpoints inside the model: map, plane record load, plane
decision / CAS, channel reservation). One JSON document: <out>/issue_path_profile.json.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hbfcommon.fsutil import atomic_write_json  # noqa: E402

log = logging.getLogger("issue_path_profile")
SRC = ROOT / "bench" / "src" / "issue_path_profile.cu"
BUILDS = {"compact": ["-DHBF_ISSUE_PROFILE=1"], "compact_noprof": [], "general": ["-DHBF_FAST_ISSUE=0"]}
# builds without checkpoints (the production helpers, compact or general): only the kernel's own stamps
TOTAL_STEPS = ("issue_total", "load_wait_use")
MODES = {"fixed": ["fixed", "hit"], "fast-hit": ["fast", "hit"], "fast-miss": ["fast", "miss"]}


def build(work: Path, name: str, defines: list[str]) -> Path:
    exe = work / f"ipp_{name}"
    cmd = ["nvcc", "-arch=sm_90a", "-O3", *defines, f"-I{ROOT / 'runtime_cuda' / 'include'}",
           f"-I{ROOT / 'runtime_cuda' / 'src'}", str(SRC), "-o", str(exe)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"nvcc failed for the {name} build:\n{r.stderr[-4000:]}")
    return exe


def gpu_name() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"))
    ap.add_argument("--fixed-ns", type=int, default=0, help="FIXED read latency of the hand-built state")
    ap.add_argument("--modes", default="fixed", help="comma list of fixed, fast-hit, fast-miss")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"what": "issue path step costs (cycles, %clock64) on a hand-built device state",
           "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
           "command": "python3 bench/issue_path_profile.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "gpu": gpu_name(), "builds": {}}
    with tempfile.TemporaryDirectory(prefix="hbf-ipp.") as td:
        modes = [m for m in a.modes.split(",") if m]
        bad = [m for m in modes if m not in MODES]
        if bad:
            raise SystemExit(f"unknown mode {bad[0]!r} (known: {', '.join(MODES)})")
        for name, defs in BUILDS.items():
            exe = build(Path(td), name, defs)
            for mode in modes:
                key = name if mode == "fixed" else f"{name}:{mode}"
                r = subprocess.run([str(exe), str(a.fixed_ns), *MODES[mode]], capture_output=True, text=True,
                                   timeout=120)
                if r.returncode != 0:
                    doc["builds"][key] = {"error": r.stderr[-2000:], "rc": r.returncode}
                else:
                    res = json.loads(r.stdout)
                    if "-DHBF_ISSUE_PROFILE=1" not in defs:
                        for run in res["runs"]:
                            run["steps_cycles"] = {k: v for k, v in run["steps_cycles"].items() if k in TOTAL_STEPS}
                    doc["builds"][key] = res
                log.info("%s: %s", key, json.dumps(doc["builds"][key])[:1800])
                atomic_write_json(out / "issue_path_profile.json", doc)
    log.info("-> %s", out / "issue_path_profile.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
