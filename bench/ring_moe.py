"""The reference ring driven the way workloads/qwen3moe's moe_gate_up_hbf drives it in its scalar-load build, on the
CPU (issue 13; the card's cp.async build holds fewer tickets: two per warp-instruction, resolved at once -- this is
the harder case for the ring).

Starts hbfd (``--engines``: fixed, and auto = the profile's media model), attaches like a workload and runs
bench/ring_driver/moe_driver.c (built here with ``cc``): CTAs of WARPS warps, each warp issuing PER tickets (one per
warp-instruction of a 4 KiB-strided weight tile), meeting its CTA at a barrier, then waiting for its tickets in order
and meeting again, ITERS x 2 tiles, CTAS_RESIDENT CTAs at once -- so the warps hold far more tickets unconsumed than
the ring has slots, across barriers, and every issue past the first 4,096 steals. The driver steps every warp as
fast as it can (hbfd sets the pace, as on the card). Exit 0 per run: ended; 3: no warp moved for --stall-s (a
deadlock, the ring's state printed); 4: --limit-s passed while warps still moved.

    .venv/bin/python bench/ring_moe.py --out bench/results/ring_moe.json            # the b1 and b8 shapes
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hbfcommon.fsutil import atomic_write_json  # noqa: E402
from hbfd.runner import start_daemon  # noqa: E402

# (name, CTAS, CTAS_RESIDENT, WARPS, PER, ITERS): moe_gate_up at batch 1 (8 experts x 24 programs, all resident) and
# at batch 8 (~52 experts x 24 programs, ~4 per SM of 132 resident); 4 warps, 32 loads per warp and tile, 16 k-steps
SHAPES = {"b1": (192, 192, 4, 32, 16), "b8": (1248, 528, 4, 32, 16)}


def build_driver(tmp: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise SystemExit("no C compiler (cc) found")
    exe = tmp / "moe_driver"
    subprocess.run([cc, "-O2", "-std=c11", "-D_GNU_SOURCE", f"-I{ROOT / 'runtime_cuda/include'}", "-o", str(exe),
                    str(ROOT / "bench/ring_driver/moe_driver.c")], check=True)
    return exe


def run_one(exe: Path, work: Path, engine: str, profile: str, shape: tuple, stall_s: float, limit_s: float,
            arrival: str) -> dict:
    from hbfcommon import ctl
    hb = start_daemon(profile, workdir=work, cwd=ROOT, name=f"hbfd-{engine}", timeout_s=120.0,
                      env={"HBFD_ENGINE": engine, "HBFD_THERMAL": "none", "HBFD_REFRESH": "none"})
    try:
        with hb.client() as c:
            rep = c.call("Attach", workload_pid=os.getpid(), abi_version=ctl.HBF_CTL_ABI_VERSION)
        env = {**os.environ, "HBF_RING_KEY": str(rep.ring_key), "ARRIVAL": arrival}
        argv = [str(exe), rep.ctl_path, *map(str, shape), str(stall_s), str(limit_s)]
        t0 = time.perf_counter()
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=limit_s + stall_s + 60)
        wall = time.perf_counter() - t0
    finally:
        hb.shutdown("ring_moe done")
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    final = next((x for x in reversed(lines) if "result" in x), {})
    stall = next((x["stall"] for x in lines if "stall" in x), None)
    summ = json.loads((work / f"hbfd-{engine}-summary.json").read_text())
    return {"engine": engine, "rc": p.returncode, "wall_s": round(wall, 3), **final, "stall": stall,
            "progress": [x for x in lines if "t_s" in x][-3:], "stderr": p.stderr[-500:],
            "hbfd": {"ring_service": summ.get("ring_service"), "foreign_requests": summ.get("foreign_requests"),
                     "rejected_requests": summ.get("rejected_requests"), "engine_error": summ.get("engine_error")}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--engines", nargs="*", default=["fixed", "auto"])
    ap.add_argument("--profile", default="nominal")
    ap.add_argument("--arrival", choices=("monotonic", "realtime"), default="realtime",
                    help="the arrival clock (realtime: ns since 1970, the range of the GPU's %%globaltimer)")
    ap.add_argument("--stall-s", type=float, default=20.0)
    ap.add_argument("--limit-s", type=float, default=120.0)
    ap.add_argument("--out", default=str(ROOT / "bench/results/ring_moe.json"))
    a = ap.parse_args(argv)
    if not (a.stall_s > 0 and a.limit_s > 0):
        ap.error("--stall-s and --limit-s must be > 0")
    res = {"bench": "ring_moe", "host": platform.node(), "cpus": os.cpu_count(), "profile": a.profile,
           "arrival": a.arrival, "shapes": {k: SHAPES[k] for k in a.shapes},
           "shape_fields": ["ctas", "ctas_resident", "warps", "per", "iters"], "runs": []}
    rc = 0
    with tempfile.TemporaryDirectory(prefix="ring_moe_") as td:
        exe = build_driver(Path(td))
        for shape in a.shapes:
            for eng in a.engines:
                r = run_one(exe, Path(td) / f"{shape}-{eng}", eng, a.profile, SHAPES[shape], a.stall_s, a.limit_s,
                            a.arrival)
                r["shape"] = shape
                res["runs"].append(r)
                rc = max(rc, r["rc"])
                print(json.dumps({k: r.get(k) for k in ("shape", "engine", "rc", "result", "elapsed_s", "requests",
                                                        "req_per_s", "steals", "overflow_takes", "not_ready")}),
                      flush=True)
                atomic_write_json(Path(a.out), res)
    return rc


if __name__ == "__main__":
    sys.exit(main())
