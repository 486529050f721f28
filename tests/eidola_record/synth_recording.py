"""A small, independent Python model of n GPUs running the fused GEMV+AllReduce flag protocol with
known delays, producing an ``hbfsim.eidola.recording`` (each rank stamps with its own clock)."""
from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, field


@dataclass
class SynthConfig:
    n_gpus: int = 4
    blocks: int = 8
    runs: int = 3
    seed: int = 1
    clock_offsets_ns: tuple = (0, 3_000_000, -1_500_000, 777_777, 11, -99, 5_000, 42)
    dispatch_ns: int = 40            # block b starts b·dispatch after the kernel start
    compute_ns: tuple = (2_000, 4_000)   # remote-tile compute before the flag release
    local_ns: tuple = (500, 1_500)       # local-tile compute between release and wait
    reduce_ns: int = 800
    poll_ns: int = 150
    link_ns: dict = field(default_factory=dict)   # (src, dst) -> one-way flag latency
    default_link_ns: int = 900
    launch_gap_ns: int = 5_000
    rank_skew_ns: tuple = (0, 1_200, 2_500, 300, 0, 0, 0, 0)   # per-rank extra launch delay
    ping_samples: int = 32
    ping_d_ab: tuple = (300, 1500)
    ping_d_ba: tuple = (300, 350)
    timer_resolution_ns: int = 0
    slow_rank: int = -1              # this rank's compute/local/reduce segments take 1+slow_frac longer
    slow_frac: float = 0.0


def lat(cfg: SynthConfig, s: int, d: int) -> int:
    return cfg.link_ns.get((s, d), cfg.default_link_ns + 37 * s + 11 * d)


def make_recording(cfg: SynthConfig) -> tuple[dict, dict]:
    """(recording, truth). Truth holds the real-time (global) quantities for assertions."""
    rng = random.Random(cfg.seed)
    n, B = cfg.n_gpus, cfg.blocks
    off = cfg.clock_offsets_ns[:n]

    def clk(r: int, t: float) -> int:
        v = t + off[r]
        if cfg.timer_resolution_ns:
            return int(v // cfg.timer_resolution_ns) * cfg.timer_resolution_ns
        return int(round(v))

    samples = []
    t = 0.0
    for a in range(n):
        for b in range(n):
            if a >= b:
                continue
            for _ in range(cfg.ping_samples):
                d1, d2 = rng.uniform(*cfg.ping_d_ab), rng.uniform(*cfg.ping_d_ba)
                samples.append({"a": a, "b": b, "t1": clk(a, t), "t2": clk(b, t + d1),
                                "t3": clk(a, t + d1 + d2)})
                t += 3_000
    runs, truth_runs = [], []
    start = [t + 50_000 + cfg.rank_skew_ns[r] for r in range(n)]
    for k in range(cfg.runs):
        # Per-rank per-block segment durations (real time).
        f = [1.0 + (cfg.slow_frac if r == cfg.slow_rank else 0.0) for r in range(n)]
        C = [[round(rng.randint(*cfg.compute_ns) * f[r]) for _ in range(B)] for r in range(n)]
        L = [[round(rng.randint(*cfg.local_ns) * f[r]) for _ in range(B)] for r in range(n)]
        wg_start = [[start[r] + b * cfg.dispatch_ns for b in range(B)] for r in range(n)]
        rel = [[wg_start[r][b] + C[r][b] for b in range(B)] for r in range(n)]
        wstart = [[rel[r][b] + L[r][b] for b in range(B)] for r in range(n)]
        flags, truth_flags = [], []
        wend = [[wstart[r][b] for b in range(B)] for r in range(n)]
        for s in range(n):
            for d in range(n):
                if s == d:
                    continue
                for b in range(B):
                    arrive = rel[s][b] + lat(cfg, s, d)
                    if arrive <= wstart[d][b]:
                        polls, seen = 1, wstart[d][b]
                    else:
                        polls = 1 + math.ceil((arrive - wstart[d][b]) / cfg.poll_ns)
                        seen = wstart[d][b] + (polls - 1) * cfg.poll_ns
                    wend[d][b] = max(wend[d][b], seen)
                    seq = k * B + b + 1
                    flags.append({"src": s, "dst": d, "buffer": "flags", "wg": b, "seq": seq,
                                  "offset": 4 * (b * n + s), "size": 4, "value": seq,
                                  "release_ns": clk(s, rel[s][b]), "seen_ns": clk(d, seen),
                                  "polls": polls})
                    truth_flags.append({"src": s, "dst": d, "wg": b, "arrive": arrive, "seen": seen,
                                        "release": rel[s][b], "polls": polls})
        end = [[wend[r][b] + round(cfg.reduce_ns * f[r]) for b in range(B)] for r in range(n)]
        ranks = []
        out = hashlib.sha256(f"run{k}".encode()).hexdigest()
        for r in range(n):
            wgs = [{"wg": b, "start_ns": clk(r, wg_start[r][b]), "release_ns": clk(r, rel[r][b]),
                    "wait_start_ns": clk(r, wstart[r][b]), "wait_end_ns": clk(r, wend[r][b]),
                    "end_ns": clk(r, end[r][b])} for b in range(B)]
            polls = sum(f["polls"] for f in flags if f["dst"] == r)
            ranks.append({"rank": r, "kernel_start_ns": min(w["start_ns"] for w in wgs),
                          "kernel_end_ns": max(w["end_ns"] for w in wgs), "output_sha256": out,
                          "flag_reads": polls, "nonflag_reads": 1000 * B, "workgroups": wgs})
        data = [{"src": s, "dst": d, "buffer": "partials", "offset": 256 * (b * n + s), "size": 256,
                 "release_ns": clk(s, rel[s][b] - 100)}
                for s in range(n) for d in range(n) if s != d for b in range(B)]
        runs.append({"index": k, "ranks": ranks, "flags": flags, "data": data})
        truth_runs.append({"start": list(start), "end": [max(e) for e in end], "flags": truth_flags})
        start = [max(end[r]) + cfg.launch_gap_ns for r in range(n)]
    rec = {"format": "hbfsim.eidola.recording", "version": 1, "n_gpus": n,
           "workload": {"name": "synthetic", "blocks": B},
           "buffers": [{"name": "flags", "kind": "flag", "bytes": 4 * B * n},
                       {"name": "partials", "kind": "data", "bytes": 256 * B * n}],
           "timer_resolution_ns": cfg.timer_resolution_ns,
           "clock": {"method": "synthetic", "samples": samples}, "runs": runs}
    return rec, {"offsets": off, "runs": truth_runs}
