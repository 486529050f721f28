#!/usr/bin/env python3
"""Two groups of one warp inside one helper at once, on a card (issue 13: the 48-layer sg2 Qwen3 stall of stop 45).

    python3 bench/warp_groups.py --out $OUT/wg.json            # GPU, ~1-4 min (three nvcc builds, short runs)

bench/src/warp_groups.cu makes the stall's situation on purpose: every warp splits into two groups that call one
helper at once; each group's leader runs a transaction alone, then the group takes the leader's value through
runtime_cuda/src/hbf_ptx.cuh's hb_from_leader and counts itself with __reduce_add_sync; every lane checks both
against its own mask. One build per variant (the first four build the helpers before wt/grp13: -DHBF_GROUP_SYNC=0):

    plain     -DHBF_LEADER_CHECKED=0 (the shuffle with the mask from the helper's VOTE: ptxas's uniform fast path;
              the default until stop 47)
    barrier   -DHBF_LEADER_BARRIER=1, unchecked (a warp barrier over the mask, in a function of its own, before it)
    checked   -DHBF_LEADER_CHECKED=1 (the mask OR-ed with %lanemask_eq: ptxas checks each lane's own mask; the
              default from stop 47 to wt/grp13)
    group     -DHBF_GROUP_CHECKED=1, leader unchecked (the same for every collective: the group's mask OR-ed with it at the entry)
    guard     -DHBF_GROUP_GUARD=1 alone (the guard over the unchecked collectives: it must fire -- `torn` -- wherever a
              value is wrong, `silent` stays 0)
    sync      -DHBF_GROUP_SYNC=1, the default since wt/grp13 (every collective checked per lane, and the guard)

and per build four runs: `groups` (the leader's transaction in a branch of its own: the helpers' shape),
`lockstep` (every lane of a group runs the spin on the leader's broadcast clock), `cost` (one group per warp, no spin:
cycles per call), `staggered` (as `groups`, the second group arriving 0-2.1 us later: stop 47's H100 reconverged the
two groups of `groups` at the helper's entry in every call, so they never ran it apart). A run that does not end within --timeout is a hang (its process exits). The JSON has every run's
line; what to read: `hang` / `bad_value` / `bad_count` / `bad_pre` per build and shape (bad_count: the group's
reduction counted lanes of another group; bad_pre: the shuffle or count after a per-lane loop, before the leader's),
`merged_calls` (calls whose VOTE saw other than the calling group; `split_calls` the part of them that saw a strict
subset of it), cycles per call; and (wt/grp13) `count_over` (a count above the group's size: a reduction over two
groups), `value_other` (the leader's lane, another call's value), `torn` (lanes whose group guard fired: in the helpers
the warp ends with WARP_GROUP) and `silent` (lanes with a wrong value or count and no guard fired: must be 0 in `sync`
and `guard`). The `lockstep` shape broadcasts the leader's spin since wt/grp13 (before, a group merged from both sides
left its shuffle loop after different numbers of turns per lane: undefined by the PTX ISA, and stop 47's lockstep
counts in every build came from that).
"""
from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hbfcommon.fsutil import atomic_write_json  # noqa: E402

log = logging.getLogger("warp_groups")

SRC = ROOT / "bench" / "src" / "warp_groups.cu"
VARIANTS = {"plain": ["-DHBF_GROUP_SYNC=0", "-DHBF_LEADER_CHECKED=0"],
            "barrier": ["-DHBF_GROUP_SYNC=0", "-DHBF_LEADER_BARRIER=1", "-DHBF_LEADER_CHECKED=0"],
            "checked": ["-DHBF_GROUP_SYNC=0", "-DHBF_LEADER_CHECKED=1"],
            "group": ["-DHBF_GROUP_SYNC=0", "-DHBF_GROUP_CHECKED=1", "-DHBF_LEADER_CHECKED=0"],
            "guard": ["-DHBF_GROUP_SYNC=0", "-DHBF_GROUP_GUARD=1"],
            "sync": ["-DHBF_GROUP_SYNC=1"]}
SHAPES = {"groups": 0, "lockstep": 1, "cost": 2, "staggered": 3}
# the reproducer's counts, summed per build and shape
COUNTS = ("bad_value", "bad_count", "bad_pre", "merged_calls", "split_calls", "count_over", "value_other", "torn",
          "silent")


def build(work: Path, name: str, defines: list[str], arch: str) -> Path:
    exe = work / f"warp_groups_{name}"
    cmd = ["nvcc", "-std=c++17", "-O3", f"-arch={arch}", *defines, "-o", str(exe), str(SRC)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"nvcc failed for {name}: {r.stderr.strip()[-2000:]}")
    return exe


def run_one(exe: Path, shape: str, blocks: int, warps: int, iters: int, seed: int, timeout: float) -> dict:
    cmd = [str(exe), str(SHAPES[shape]), str(blocks), str(warps), str(iters), str(seed), str(timeout)]
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 60)
    except subprocess.TimeoutExpired:
        return {"status": "hang", "note": "the process did not exit", "seconds": time.monotonic() - t0}
    line = (r.stdout.strip().splitlines() or [""])[-1]
    try:
        res = json.loads(line)
    except json.JSONDecodeError:
        res = {"status": "error", "rc": r.returncode, "stdout": r.stdout[-500:], "stderr": r.stderr[-500:]}
    res["rc"] = r.returncode
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the JSON file to write")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="builds, comma-separated (%(default)s)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="runs per build, comma-separated (%(default)s)")
    ap.add_argument("--seeds", type=int, default=2, help="runs of `groups` and `lockstep` per build (%(default)s)")
    ap.add_argument("--blocks", type=int, default=528, help="CTAs (%(default)s: 4 per SM of an H100/H200)")
    ap.add_argument("--warps", type=int, default=8, help="warps per CTA (%(default)s)")
    ap.add_argument("--iters", type=int, default=20000, help="helper calls per warp (%(default)s)")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds before a run is a hang (%(default)s)")
    ap.add_argument("--arch", default="sm_90a")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    variants = [v for v in args.variants.split(",") if v]
    shapes = [s for s in args.shapes.split(",") if s]
    bad = [v for v in variants if v not in VARIANTS] + [s for s in shapes if s not in SHAPES]
    if bad or not variants or not shapes:
        ap.error(f"unknown or empty variant/shape: {bad or 'none given'} "
                 f"(variants {list(VARIANTS)}, shapes {list(SHAPES)})")
    if args.seeds < 1 or args.blocks < 1 or not 1 <= args.warps <= 32 or args.iters < 1 or args.timeout <= 0:
        ap.error("--seeds, --blocks, --iters and --timeout must be positive, --warps 1..32")
    if shutil.which("nvcc") is None:
        log.error("no nvcc on PATH")
        return 2
    out = Path(args.out)
    doc = {"what": "two groups of one warp in one helper: the helpers' group builds",
           "source": str(SRC.relative_to(ROOT)), "args": vars(args), "runs": []}
    with tempfile.TemporaryDirectory(prefix="warp_groups_") as td:
        exes = {}
        for v in variants:
            t0 = time.monotonic()
            exes[v] = build(Path(td), v, VARIANTS[v], args.arch)
            log.info("built %s (%.1f s)", v, time.monotonic() - t0)
        for v in variants:
            for shape in shapes:
                for seed in range(1 if shape == "cost" else args.seeds):
                    iters = args.iters * 2 if shape == "cost" else args.iters
                    res = run_one(exes[v], shape, args.blocks, args.warps, iters, 1000 + seed, args.timeout)
                    res.update(variant=v, shape=shape, seed=1000 + seed, iters=iters)
                    doc["runs"].append(res)
                    keys = ("status", "seconds", "bad_value", "bad_count", "bad_pre", "merged_calls", "torn", "silent",
                            "cycles_per_call")
                    log.info("%s %s seed %d: %s", v, shape, 1000 + seed, {k: res.get(k) for k in keys})
                    atomic_write_json(out, doc)          # partial results survive a timeout of the whole call
                    if "cudaMalloc failed" in str(res.get("stderr", "")):
                        log.error("no usable GPU here (the reproducer could not allocate device memory)")
                        return 2
    summary = {}
    for r in doc["runs"]:
        s = summary.setdefault(f"{r['variant']} {r['shape']}",
                               {"runs": 0, "hang": 0, "fault": 0, **{k: 0 for k in COUNTS}})
        s["runs"] += 1
        s["hang"] += r.get("status") == "hang"
        s["fault"] += r.get("status") not in ("ended", "hang")
        for k in COUNTS:
            s[k] += int(r.get(k) or 0)
        if r["shape"] == "cost" and r.get("status") == "ended":
            s["cycles_per_call"] = r.get("cycles_per_call")
    doc["summary"] = summary
    atomic_write_json(out, doc)
    for k, s in summary.items():
        log.info("%-18s %s", k, s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
