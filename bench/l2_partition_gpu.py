#!/usr/bin/env python3
"""The H200's L2 capacity for data read from every SM (docs/design.md §3.12: the profile's l2.partitions).

WRITTEN AND ARGUMENT-CHECKED, NOT YET RUN ON A GPU (2026-12-05: written on the CPU box). The L2 model's tag store
holds capacity / partitions (60 MiB / 2) on the evidence of bench/l2_partition.py (CPU); this measures it:

  warm   every one of ``--programs`` programs (one per SM) reads the whole W-byte buffer, each from its own starting
         offset (so every line is read from SMs of every partition, at times spread over the kernel);
  probe  the same programs read disjoint chunks of the buffer once (W bytes in all).
ncu profiles ``probe`` only, ``--cache-control none --replay-mode application`` (the L2 keeps what ``warm`` left;
one metric, one pass), and reports its ``dram__bytes_read.sum``: the bytes of the buffer NOT resident after
``warm``. The capacity the card has for a working set read from every SM is then W - dram (for W above it):
~60 MiB if the L2 held one copy per line, ~30 MiB if each partition holds its own (the profile's model). A
``private`` warm (each program reads only the chunk it probes later, so one SM reads each line) is the control:
with per-partition copies of far lines it keeps more (about capacity / 1.5) than the shared warm.

    python3 bench/l2_partition_gpu.py [--mib 16,24,28,32,36,40,48,56,64] [--out bench/results] [--ncu ncu]

Result: <out>/l2_partition_gpu.json (rows: W, warm, dram bytes of the probe, W - dram). The profile's
l2.partitions stays 2 if the shared rows give W - dram ~ 30 MiB for W >= 36 MiB; 1 if they give ~ 60 MiB.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import devpath_common as DC  # noqa: E402

RESULT = "@@RESULT"
MIB = 1 << 20
BLOCK = 2048                     # fp32 elements a program reads per step (8 KiB)

KERNELS = r'''

@triton.jit
def l2p_warm_shared(x, out, n, P, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    steps = n // BLOCK
    acc = tl.zeros((BLOCK,), tl.float32)
    for i in range(0, steps):
        s = (i + pid * (steps // P)) % steps            # every program reads all of x, from its own offset
        acc += tl.load(x + s * BLOCK + tl.arange(0, BLOCK))
    tl.store(out + pid, tl.sum(acc, axis=0))


@triton.jit
def l2p_warm_private(x, out, n, P, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.float32)
    for s in range(pid, n // BLOCK, P):                  # the chunks this program probes later: one reader a line
        acc += tl.load(x + s * BLOCK + tl.arange(0, BLOCK))
    tl.store(out + pid, tl.sum(acc, axis=0))


# the same loop as l2p_warm_private under its own name: ncu profiles only the probe (-k regex:^l2p_probe)
@triton.jit
def l2p_probe(x, out, n, P, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.float32)
    for s in range(pid, n // BLOCK, P):
        acc += tl.load(x + s * BLOCK + tl.arange(0, BLOCK))
    tl.store(out + pid, tl.sum(acc, axis=0))
'''


def child(mib: int, warm: str, programs: int) -> None:
    import torch
    work = Path(os.environ["TRITON_CACHE_DIR"]).parent
    K = DC.import_source(work / "tk_l2p.py", DC.KERNEL_HEADER + KERNELS, "tk_l2p")
    n = mib * MIB // 4
    x = torch.ones(n, device="cuda", dtype=torch.float32)
    out = torch.empty(programs, device="cuda", dtype=torch.float32)
    w = getattr(K, f"l2p_warm_{warm}")
    for _ in range(2):                                  # compile both, then the measured pair
        w[(programs,)](x, out, n, programs, BLOCK=BLOCK, num_warps=8)
        K.l2p_probe[(programs,)](x, out, n, programs, BLOCK=BLOCK, num_warps=8)
    torch.cuda.synchronize()
    p = torch.cuda.get_device_properties(0)
    print(RESULT, json.dumps({"mib": mib, "warm": warm, "l2_cache_bytes": int(p.L2_cache_size), "device": p.name,
                              "sms": p.multi_processor_count}), flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", default="16,24,28,32,36,40,48,56,64")
    ap.add_argument("--warm", default="shared,private")
    ap.add_argument("--programs", type=int, default=132, help="one per SM (the H200: 132)")
    ap.add_argument("--out", default=str(DC.ROOT / "bench" / "results"))
    ap.add_argument("--work", default="")
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        mib, warm = a.child.split(":")
        child(int(mib), warm, a.programs)
        return 0
    try:
        sizes = [int(m) for m in a.mib.split(",") if m]
    except ValueError:
        ap.error("--mib: a comma-separated list of whole MiB")
    warms = [w for w in a.warm.split(",") if w]
    if not sizes or any(m <= 0 for m in sizes) or not warms or set(warms) - {"shared", "private"}:
        ap.error("--mib needs positive sizes; --warm is shared and/or private")
    if a.programs <= 0:
        ap.error("--programs must be positive")
    ncu = shutil.which(a.ncu)
    if ncu is None:
        ap.error(f"ncu not found ({a.ncu}): Nsight Compute is needed")
    _, out_json, _, env = DC.prepare_run(a.out, "l2_partition_gpu", a.work)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from l2_vs_ncu import parse_ncu_csv  # noqa: PLC0415
    doc = {"what": "L2 capacity for data read from every SM: W - dram bytes of a probe after a warm (ncu, "
                   "--cache-control none)", "date": time.strftime("%Y-%m-%d"), "argv": sys.argv[1:],
           "gpu": DC.gpu_info(), "rows": [], "complete": False}
    me = [sys.executable, str(Path(__file__).resolve())]
    for warm in warms:
        for mib in sizes:
            argv_ = [ncu, "--cache-control", "none", "--replay-mode", "application", "--clock-control", "none",
                     "--metrics", "dram__bytes_read.sum", "--csv", "--page", "raw", "--print-units", "base",
                     "-k", "regex:^l2p_probe", "-c", "2", *me, "--programs", str(a.programs), "--child",
                     f"{mib}:{warm}"]
            p = subprocess.run(argv_, env=env, capture_output=True, text=True, timeout=a.timeout)
            row: dict = {"mib": mib, "warm": warm}
            try:
                dram = parse_ncu_csv(p.stdout, "l2p_probe")["dram__bytes_read.sum"]   # the last (measured) probe
                row.update(dram_bytes=dram, resident_bytes=mib * MIB - dram,
                           resident_mib=round((mib * MIB - dram) / MIB, 2))
                res = [json.loads(ln[len(RESULT):]) for ln in p.stdout.splitlines() if ln.startswith(RESULT)]
                if res:
                    row["native"] = res[-1]
            except (ValueError, KeyError) as e:
                row["error"] = f"rc {p.returncode}: {e}: {p.stderr[-1500:]}"
            doc["rows"].append(row)
            DC.write_json(out_json, doc)
            DC.log(f"{warm} {mib} MiB: {row.get('resident_mib', row.get('error'))}")
    doc["complete"] = True
    DC.write_json(out_json, doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
