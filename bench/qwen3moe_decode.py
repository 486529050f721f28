#!/usr/bin/env python3
"""Qwen3-30B-A3B-shaped MoE decode with its weights in HBF, on the GPU (issue 20).

    PYTHONUNBUFFERED=1 python3 bench/qwen3moe_decode.py [--parts reference,goal,...] [--out bench/results]

Each part is one or more runs of the workload's own CLI (``python -m workloads.qwen3moe run ...``, one
process and one hbfd each, the exact command recorded), except ``reference``, which checks our Triton
decode against transformers' Qwen3-MoE with the same generated weights in this process. Parts:

* ``reference``  Qwen3-30B-A3B shape at 4 layers, batch 4: logits and greedy tokens vs transformers.
* ``goal``       48 layers, every expert weight in HBF (ocp-sg1), batch 1, 32 decode tokens after an
                 8-token prompt: wall time of the whole command, start-up included (goal < 600 s).
* ``batches``    48 layers, ocp-sg1, experts in HBF, batch 8, 16, 64 (2-token prompt, 4 tokens).
* ``profiles``   48 layers, batch 1, 8 tokens: ocp-sg2, ocp-sg3, and ocp-sg1 with tR 8 us.
* ``matrix``     48 layers, 4 tokens: ocp-sg2 and ocp-sg3 at batch 8 and 64; ocp-sg1 with tR 8 us at batch 8.
* ``placements`` 48 layers, batch 1, 4 tokens, ocp-sg1: all weights in HBF; all but attention.
* ``kvprefix``   48 layers, batch 16, ocp-sg1: an 8-token prompt whose first 6 positions the batch shares,
                 their K/V kept once and placed in HBF with the expert weights (placement kv-prefix).
* ``routes``     48 layers, batch 8 and 16, 4 tokens, ocp-sg1: a Zipf router (s = 2.30, calibrated by
                 ``python -m workloads.qwen3moe zipf`` to the paper's x2.487 at batch 8) in place of the
                 model's own near-uniform routing.

Writes <out>/qwen3moe_decode.json after every run (a timeout still leaves what finished).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
T0 = time.time()

QWEN = ["--model", "qwen3-30b-a3b"]
RUNS = {
    "goal": [("sg1-b1-32tok", QWEN + ["--batch", "1", "--tokens", "32", "--prompt", "8", "--profile", "ocp-sg1"])],
    "batches": [(f"sg1-b{b}", QWEN + ["--batch", str(b), "--tokens", "4", "--prompt", "2", "--profile", "ocp-sg1"])
                for b in (8, 16, 64)],
    "profiles": [("sg2-b1", QWEN + ["--batch", "1", "--tokens", "8", "--prompt", "2", "--profile", "ocp-sg2"]),
                 ("sg3-b1", QWEN + ["--batch", "1", "--tokens", "8", "--prompt", "2", "--profile", "ocp-sg3"]),
                 ("sg1-tR8us-b1", QWEN + ["--batch", "1", "--tokens", "8", "--prompt", "2", "--profile", "ocp-sg1",
                                          "--t-read-ns", "8000"])],
    "matrix": [(f"{g}-b{b}", QWEN + ["--batch", str(b), "--tokens", "4", "--prompt", "2", "--profile", f"ocp-{g}"])
               for g in ("sg2", "sg3") for b in (8, 64)]
              + [("sg1-tR8us-b8", QWEN + ["--batch", "8", "--tokens", "4", "--prompt", "2", "--profile", "ocp-sg1",
                                          "--t-read-ns", "8000"])],
    "kvprefix": [("sg1-kvprefix-b16", QWEN + ["--batch", "16", "--tokens", "4", "--prompt", "8", "--shared-prefix", "6",
                                              "--placement", "kv-prefix"])],
    "placements": [(f"sg1-{p}-b1", QWEN + ["--batch", "1", "--tokens", "4", "--prompt", "2", "--placement", p])
                   for p in ("all", "attention-hbm")],
    "routes": [("sg1-zipf-b8-b16", QWEN + ["--batch", "8", "--batch", "16", "--tokens", "4", "--prompt", "2",
                                           "--route", "zipf:2.30"])],
}


def log(msg: str) -> None:
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


def reference() -> dict:
    import torch

    from workloads.qwen3moe import config, model, reference as ref, weights
    cfg = config.QWEN3_30B_A3B.with_layers(4)
    w = weights.generate(cfg, seed=0)
    K = model.load_kernels("plain", Path(os.environ.get("TMPDIR", "/tmp")) / "qwen3moe-ref")
    out = {}
    for b in (1, 4):
        t = time.time()
        r = ref.compare(cfg, w, K, batch=b, prompt_len=6, new_tokens=8, seed=b)
        r["seconds"] = round(time.time() - t, 1)
        out[f"batch{b}"] = r
        log(f"reference batch {b}: rel max logit diff {r['rel_max_diff']:.4f}, agreement "
            f"{r['teacher_forced_token_agreement']:.3f} ({r['agreement_counting_bf16_ties']:.3f} counting ties)")
    del w
    torch.cuda.empty_cache()
    return out


def one_run(name: str, args: list[str], out: Path, runs: Path, cache: Path, timeout: float) -> dict:
    """One run of the workload's CLI, its output streamed into <run>/child.log as it goes (a run that does not end
    still leaves what it printed); past ``timeout`` the child gets SIGABRT first (-X faulthandler: every thread's
    Python stack lands in the log), then SIGKILL."""
    import signal
    rdir = runs / name
    rdir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-X", "faulthandler", "-m", "workloads.qwen3moe", "run", *args, "--out", str(rdir),
           "--cache", str(cache)]
    t = time.time()
    logf = rdir / "child.log"
    with open(logf, "wb") as fh:
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = "timeout"
            p.send_signal(signal.SIGABRT)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(p.pid, signal.SIGKILL)         # the child and what it started (its hbfd)
            except ProcessLookupError:
                pass
            p.wait()
    tail = logf.read_bytes()[-6000:].decode(errors="replace")
    wall = time.time() - t
    res = {"command": "python3 -m workloads.qwen3moe run " + " ".join(args) + f" --out {name} --cache CACHE",
           "rc": rc, "wall_s_including_startup": round(wall, 1)}
    for f in ("run.json", "run.partial.json"):
        if (rdir / f).exists():
            r = json.loads((rdir / f).read_text())
            res["partial"] = f != "run.json"
            res["run"] = {k: v for k, v in r.items() if k not in ("batches",)}
            res["batches"] = {b: {k: v for k, v in br.items() if k not in ("per_step", "native_per_step")}
                              for b, br in r.get("batches", {}).items()}
            res["per_step"] = {b: {"instrumented": br.get("per_step"), "native": br.get("native_per_step")}
                               for b, br in r.get("batches", {}).items()}
            break
    if rc != 0:
        res["output_tail"] = tail
    log(f"{name}: rc {rc}, {wall:.1f} s")
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="reference,goal")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--runs-dir", help="where each run's directory goes (default <out>/qwen3moe_runs)")
    ap.add_argument("--cache", default=str(Path(os.environ.get("TMPDIR", "/tmp")) / "qwen3moe-cache"),
                    help="Triton + hbfcc caches shared by the runs (a kernel compiles once)")
    ap.add_argument("--timeout", type=float, default=240.0, help="one run's limit (then SIGABRT: its stacks in child.log)")
    ap.add_argument("--budget-s", type=float, default=540.0,
                    help="skip runs that would start after this (keep it below the device call's own limit)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "qwen3moe_decode.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc.setdefault("runs", {})
    import torch
    doc["card"] = torch.cuda.get_device_name()
    doc["date"] = time.strftime("%Y-%m-%d")

    def save():
        path.write_text(json.dumps(doc, indent=1, default=str))
    for part in a.parts.split(","):
        if part == "reference":
            doc["reference"] = reference()
            save()
            continue
        for name, args in RUNS[part]:
            left = a.budget_s - (time.time() - T0)
            if left < 60:
                log(f"{name}: skipped ({left:.0f} s of the budget left)")
                doc["runs"].setdefault(name, {"skipped": "out of the call's time budget"})
                continue
            doc["runs"][name] = one_run(name, args, out, Path(a.runs_dir) if a.runs_dir else out / "qwen3moe_runs",
                                        Path(a.cache), min(a.timeout, left))
            save()
    save()
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
