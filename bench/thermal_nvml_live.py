#!/usr/bin/env python3
"""hbfd with LIVE NVML telemetry on a real GPU: the thermal service reads GPU power/temperature
(and HBM temperature, NVML_FI_DEV_MEMORY_TEMP) while a bf16 GEMM loads the card, then hbfd shuts
down and the summary's thermal section is checked and saved.

    python3 bench/thermal_nvml_live.py [--seconds 6] [--out DIR]

Writes <out>/thermal_nvml_live.json. Fails (exit 1) if the summary does not name an nvml source,
has fewer samples than expected, or the readings do not move under load.
"""
from __future__ import annotations
from hbfcommon.profile import PROFILE_DIR

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hbfcommon.errors import DaemonError  # noqa: E402
from hbfcommon.fsutil import atomic_write_json  # noqa: E402
from hbfd.runner import start_daemon  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--profile", default=str(PROFILE_DIR / "ocp-sg1.json"))
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"))
    ns = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hbf-nvml."))
    prof = json.loads(Path(ns.profile).read_text())
    prof["thermal"]["telemetry"] = "nvml"
    ppath = work / "ocp-sg1-nvml.json"
    ppath.write_text(json.dumps(prof, indent=1))
    t0 = time.time()
    try:
        hb = start_daemon(ppath, workdir=work, summary=work / "summary.json", cwd=ROOT, env={"HBFD_ENGINE": "fixed"},
                          timeout_s=120.0)
    except DaemonError as e:
        print(f"hbfd did not become ready: {e}", file=sys.stderr)
        return 1
    ready_s = time.time() - t0
    import torch
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t1 = time.time()
    n = 0
    while time.time() - t1 < ns.seconds:
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
        n += 10
    load_s = time.time() - t1
    rc = hb.stop(timeout_s=60.0)
    summary = hb.read_summary()
    th = summary["services"]["thermal"]
    tel = th.get("telemetry", {})
    samples = th.get("samples", [])
    keys = sorted({k for s in samples for k in s})

    def col(k):
        return [s[k] for s in samples if isinstance(s.get(k), (int, float))]

    res = {"what": "hbfd thermal service with live NVML telemetry while a bf16 8192^3 GEMM loads the GPU",
           "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
           "command": "python3 bench/thermal_nvml_live.py", "hbfd_rc": rc, "hbfd_ready_s": round(ready_s, 2),
           "load_s": round(load_s, 2), "gemms": n, "telemetry": tel, "n_samples": len(samples), "sample_keys": keys,
           "terminal_status": summary.get("terminal_status"), "thermal_terminal_status": th.get("terminal_status"),
           "mode": th.get("mode")}
    for k in keys:
        v = col(k)
        if v:
            res[f"{k}_min"], res[f"{k}_max"] = min(v), max(v)
    res["samples_head"] = samples[:3]
    res["samples_tail"] = samples[-3:]
    out = Path(ns.out) / "thermal_nvml_live.json"
    atomic_write_json(out, res, indent=1)
    print(json.dumps({k: v for k, v in res.items() if not k.startswith("samples_")}, indent=1))
    ok = (rc == 0 and str(tel.get("identity", "")).startswith("nvml") and len(samples) >= 5)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
