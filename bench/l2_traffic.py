#!/usr/bin/env python3
"""Expected HBF traffic under the L2 model on the CPU (issue 14 item 4; docs/design.md §3.12). NOT the ncu
validation (bench/l2_vs_ncu.py is, on the H200): this runs the CPU twin of the device L2 model
(hbfd/media/l2twin.py) on address streams generated from the kernels' tiling -- a tiled matmul with A
registered, a GEMV with the matrix registered, a row softmax (one and three passes over each row), a flash
attention forward with K and V registered -- and compares the bytes it charges to HBF with an analytic
DRAM-traffic estimate of the same tiling (compulsory misses, or the distinct tiles per wave of concurrent
programs where the tensor does not fit). Without the model every load is charged: the "off" column.

The stream: programs run in waves of ``--concurrent`` programs (the H200: 132 SMs x programs per SM); within a
wave the programs' loop iterations interleave (iteration k of every program, then k + 1), each program's loads
of one iteration in order, one access per tile row (a warp's coalesced row segment), 20 ns apart.

    python3 bench/l2_traffic.py [--out bench/results/l2_traffic_cpu.json] [--l2-kib 1024] [--quick]
"""
from __future__ import annotations

import argparse
import datetime as _dt
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hbfcommon.fsutil import atomic_write_json  # noqa: E402
from hbfd.media.l2twin import L2Twin  # noqa: E402

BASE = 1 << 30          # the registered tensor's (media) address
DT_NS = 20


def _waves(n_prog: int, conc: int):
    for w0 in range(0, n_prog, conc):
        yield list(range(w0, min(n_prog, w0 + conc)))


def matmul_stream(M, N, K, BM, BN, BK, group_m, conc, esz=2):
    """C = A @ B, A (M x K, row-major) registered; Triton's grouped program order (GROUP_SIZE_M). Yields
    (addr, nbytes) of A's tile rows; also returns the analytic estimate."""
    npm, npn = M // BM, N // BN
    progs = []
    for pid in range(npm * npn):                       # triton matmul tutorial's swizzle
        gid = pid // (group_m * npn)
        first = gid * group_m
        gsz = min(npm - first, group_m)
        progs.append((first + (pid % (group_m * npn)) % gsz, (pid % (group_m * npn)) // gsz))
    acc = []
    panels = 0
    for wave in _waves(len(progs), conc):
        panels += len({progs[p][0] for p in wave})
        for k in range(K // BK):
            for p in wave:
                pm = progs[p][0]
                for r in range(BM):
                    acc.append((BASE + ((pm * BM + r) * K + k * BK) * esz, BK * esz))
    a_bytes = M * K * esz
    return acc, {"compulsory": a_bytes, "per_wave_panels": panels * BM * K * esz}


def gemv_stream(N, K, BN, BK, conc, esz=2):
    """y = W x, W (N x K) registered: every element read once."""
    acc = []
    for wave in _waves(N // BN, conc):
        for k in range(K // BK):
            for p in wave:
                for r in range(BN):
                    acc.append((BASE + ((p * BN + r) * K + k * BK) * esz, BK * esz))
    return acc, {"compulsory": N * K * esz, "per_wave_panels": N * K * esz}


def softmax_stream(R, n, BLOCK, passes, conc, esz=4):
    """Row softmax over X (R x n, fp32) registered, one program per row, ``passes`` loops over the row in BLOCK
    chunks (1: the whole row in registers; 3: max, sum, normalize)."""
    acc = []
    for wave in _waves(R, conc):
        for ps in range(passes):
            for c in range(n // BLOCK):
                for p in wave:
                    acc.append((BASE + (p * n + c * BLOCK) * esz, BLOCK * esz))
    return acc, {"compulsory": R * n * esz, "per_wave_panels": R * n * esz}


def attention_stream(B_H, S, D, BMQ, BNK, conc, esz=2):
    """Flash attention forward, K and V (B*H x S x D) registered (one range each, adjacent): program (bh, qblock),
    q-blocks of a head adjacent in program order; each program streams all of its head's K and V blocks."""
    kv = B_H * S * D * esz
    acc = []
    progs = [(bh, qb) for bh in range(B_H) for qb in range(S // BMQ)]
    heads = 0
    for wave in _waves(len(progs), conc):
        heads += len({progs[p][0] for p in wave})
        for j in range(S // BNK):
            for p in wave:
                bh = progs[p][0]
                for base in (BASE, BASE + kv):           # K then V
                    for r in range(BNK):
                        acc.append((base + ((bh * S + j * BNK + r) * D) * esz, D * esz))
    return acc, {"compulsory": 2 * kv, "per_wave_panels": heads * 2 * S * D * esz}


def run_case(name, acc, est, l2_bytes, policy="lru"):
    tw = L2Twin(l2_bytes, 128, 16, policy)
    charged = tw.stream((a, n, i * DT_NS) for i, (a, n) in enumerate(acc))
    off = sum(n for _, n in acc)
    lo, hi = est["compulsory"], max(est["compulsory"], est["per_wave_panels"])
    return {"case": name, "policy": policy, "l2_bytes": l2_bytes, "program_bytes": off, "charged_off": off,
            "charged_on": charged, "compulsory": lo, "per_wave_panels": est["per_wave_panels"],
            "within_estimate": lo <= charged <= hi, "vs_compulsory": round(charged / lo, 4),
            "hits_bytes": tw.stats.hit_bytes, "requests": tw.stats.requests, "media_requests": tw.stats.media_requests}


def cases(quick: bool):
    c = 32 if quick else 132
    yield "matmul A fits (256x256x512, tiles 64x64x64)", matmul_stream(256, 256, 512, 64, 64, 64, 8, c)
    yield "matmul A larger than L2 (4096x1024x512, GROUP_M 8)", matmul_stream(4096, 1024, 512, 64, 64, 64, 8, c)
    yield ("matmul A larger than L2, pid_m fastest (4096x1024x512, GROUP_M 64)",
           matmul_stream(4096, 1024, 512, 64, 64, 64, 64, c))
    yield "gemv (1024x512)", gemv_stream(1024, 512, 16, 128, c)
    yield "softmax 1 pass (256x1024 fp32)", softmax_stream(256, 1024, 1024, 1, c)
    yield "softmax 3 passes (256x1024 fp32, 256-wide chunks)", softmax_stream(256, 1024, 256, 3, c)
    yield "attention (8 heads x 512 x 64)", attention_stream(8, 512, 64, 64, 64, c)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(REPO / "bench/results/l2_traffic_cpu.json"))
    ap.add_argument("--l2-kib", type=int, default=1024, help="the scaled-down L2 (KiB; 16 ways of 128 B lines)")
    ap.add_argument("--quick", action="store_true", help="32 concurrent programs instead of 132")
    a = ap.parse_args(argv)
    if a.l2_kib <= 0 or (a.l2_kib * 1024) % (16 * 128):
        ap.error("--l2-kib must be a positive multiple of 2 (16 ways x 128 B lines)")
    rows = []
    for name, (acc, est) in cases(a.quick):
        for pol in ("lru", "fifo"):
            rows.append(run_case(name, acc, est, a.l2_kib * 1024, pol))
            atomic_write_json(a.out, {"what": "L2 model twin vs analytic traffic (CPU)", "rows": rows,
                                      "date": _dt.date.today().isoformat(), "card": "CPU (this 2-core box)",
                                      "complete": False})
    atomic_write_json(a.out, {"what": "L2 model twin vs analytic traffic (CPU)", "rows": rows,
                              "date": _dt.date.today().isoformat(), "card": "CPU (this 2-core box)",
                              "complete": True, "argv": sys.argv[1:]})
    for r in rows:
        print(f"{r['case']:55s} {r['policy']:4s} off {r['charged_off']:>10d} on {r['charged_on']:>9d} "
              f"compulsory {r['compulsory']:>9d} per-wave {r['per_wave_panels']:>9d} x{r['vs_compulsory']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
