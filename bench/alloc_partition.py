#!/usr/bin/env python3
"""Does cuMemGetAddressRange partition the address space? (the assumption of Session._hot_allocations, the launch gate's
per-range allocation cache; docs/design.md "The gate's host cost per launch").

The gate decides whether an int argument (a raw pointer) can reach a registered range by the allocation that holds it.
Instead of asking the driver per launch, the session asks once per range table for the allocations that hold each
range (walked from its base to its end) and then looks an int up among them. That gives the per-launch answer only if
every address lies in at most one extent the driver names, the same whichever address inside it is asked: the
extents partition the mapped addresses. True for cudaMalloc'd memory; this checks it where it is least obvious, torch's
caching allocator with ``expandable_segments`` (VMM: cuMemCreate/cuMemMap in granules, grown in place), and the
classic one, each in a child process, after a churn of allocations and frees of 1 KiB - 256 MiB.

Per mode: every tensor's first byte, last byte and 16 random interior bytes are asked; checked: (a) the extent holds
the address asked, (b) any two extents are equal or disjoint, (c) for 2,000 random (range, value) pairs -- a range being
part of a live tensor, a value any address asked -- the per-launch answer (the value's extent overlaps the range) equals
the cached one (the value lies in one of the extents the walk over the range named), and the walk never met an address
the driver could not name inside a live tensor.

    python3 bench/alloc_partition.py --out /tmp/ap.json
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("alloc_partition")


def child(seed: int) -> dict:
    import torch  # noqa: PLC0415
    from runtime_cuda import cudrv  # noqa: PLC0415
    from runtime_cuda.session import allocations_holding  # noqa: PLC0415
    torch.cuda.init()
    torch.empty(1, device="cuda")
    cudrv.init_context(0)
    rng = random.Random(seed)
    live = []
    for i in range(400):                     # churn: allocate, free some, grow
        nbytes = rng.choice((1 << 10, 1 << 14, 1 << 20, 3 << 20, 17 << 20, 64 << 20, 256 << 20))
        live.append(torch.empty(nbytes, dtype=torch.uint8, device="cuda"))
        if rng.random() < 0.35 and live:
            live.pop(rng.randrange(len(live)))
    torch.cuda.synchronize()
    spans = [(t.data_ptr(), t.numel()) for t in live]
    asked: dict[int, tuple[int, int] | None] = {}

    def ask(p: int):
        if p not in asked:
            asked[p] = cudrv.address_range(p)
        return asked[p]

    bad_hold, unnamed = [], 0
    for a, n in spans:
        for p in [a, a + n - 1] + [a + rng.randrange(n) for _ in range(16)]:
            e = ask(p)
            if e is None:
                unnamed += 1
            elif not (e[0] <= p < e[0] + e[1]):
                bad_hold.append([hex(p), hex(e[0]), e[1]])
    exts = sorted({e for e in asked.values() if e is not None})
    overlaps = [[hex(x[0]), x[1], hex(y[0]), y[1]] for x, y in zip(exts, exts[1:]) if y[0] < x[0] + x[1]]
    values = list(asked)
    mismatch, walks_unnamed = [], 0
    for _ in range(2000):
        a, n = rng.choice(spans)
        lo = a + rng.randrange(n)
        hi = min(a + n, lo + rng.choice((64, 4096, 1 << 20, 8 << 20)))
        hot = allocations_holding(ask, lo, hi)
        if hot is None:
            walks_unnamed += 1
            continue
        v = rng.choice(values)
        ev = ask(v)
        exact = ev is not None and ev[0] < hi and lo < ev[0] + ev[1]
        cached = any(h[0] <= v < h[0] + h[1] for h in hot)
        if exact != cached:
            mismatch.append([hex(lo), hex(hi), hex(v), exact, cached])
    return {"tensors": len(spans), "addresses_asked": len(asked), "extents": len(exts),
            "extent_sizes_mib": sorted({round(e[1] / 2**20, 3) for e in exts})[:40],
            "unnamed_inside_tensors": unnamed, "extent_not_holding_address": bad_hold[:10],
            "overlapping_extents": overlaps[:10], "n_overlapping": len(overlaps),
            "walks_unnamed": walks_unnamed, "decision_mismatches": mismatch[:10], "n_mismatches": len(mismatch),
            "ok": not bad_hold and not overlaps and not mismatch and unnamed == 0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="JSON output (never bench/results by default)")
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--child", default="")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if a.child:
        sys.stdout.write(json.dumps(child(int(a.child))) + "\n")
        return 0
    res = {"what": "cuMemGetAddressRange extents: a partition? (Session._hot_allocations' assumption)",
           "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "command": " ".join(sys.argv), "modes": {}}
    for mode, conf in (("classic", ""), ("expandable_segments", "expandable_segments:True")):
        for seed in [int(x) for x in a.seeds.split(",")]:
            env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf)
            env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
            p = subprocess.run([sys.executable, __file__, "--out", a.out, "--child", str(seed)], env=env,
                               capture_output=True, text=True, timeout=300)
            try:
                r = json.loads(p.stdout.strip().splitlines()[-1])
            except (IndexError, ValueError):
                r = {"ok": False, "error": (p.stderr or "")[-1500:]}
            res["modes"][f"{mode}/seed{seed}"] = r
            log.info("%s seed %d: ok %s  extents %s  overlapping %s  mismatches %s  unnamed %s  walks unnamed %s",
                     mode, seed, r.get("ok"), r.get("extents"), r.get("n_overlapping"), r.get("n_mismatches"),
                     r.get("unnamed_inside_tensors"), r.get("walks_unnamed"))
    res["all_ok"] = all(r.get("ok") for r in res["modes"].values())
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(a.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(res, indent=1))
    os.replace(tmp, a.out)
    log.info("all ok: %s", res["all_ok"])
    return 0 if res["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
