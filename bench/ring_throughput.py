"""Reference-path throughput of hbfd on the CPU, without a GPU.

Starts hbfd (fixed-latency engine, then the media engine on the nominal profile), attaches like a
workload (Attach RPC -> /proc/<hbfd>/fd/N) and runs bench/ring_driver/ring_driver.c, a native
stand-in for the GPU side compiled here with ``cc``: it reserves tickets, writes payloads,
store-releases the seq words, polls completions with load-acquire and marks them consumed, keeping
N requests outstanding. Reports sustained requests/s and the daemon's service_ns (host time from
first seeing a request to posting its completion) and the driver's round trip.

    .venv/bin/python bench/ring_throughput.py [--seconds 3] [--outstanding 256 4096] [--out bench/results]
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


def build_driver(tmp: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise SystemExit("no C compiler (cc) found")
    exe = tmp / "ring_driver"
    argv = [cc, "-O2", "-std=c11", "-D_GNU_SOURCE", f"-I{ROOT / 'runtime_cuda/include'}", "-o", str(exe),
            str(ROOT / "bench/ring_driver/ring_driver.c")]
    subprocess.run(argv, check=True)
    return exe


def start_hbfd(tmp: Path, engine: str, profile: str):
    sock, summ, log = tmp / f"hbfd-{engine}.sock", tmp / f"hbfd-{engine}-summary.json", tmp / f"hbfd-{engine}.log"
    env = dict(os.environ, PYTHONPATH=str(ROOT), HBFD_ENGINE=engine, HBFD_THERMAL="none", HBFD_REFRESH="none")
    proc = subprocess.Popen([sys.executable, "-m", "hbfd.cli", "--profile", str(ROOT / profile), "--socket", str(sock),
                             "--summary", str(summ)], cwd=tmp, env=env, stdout=open(log, "w"),
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while "hbfd ready" not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"hbfd did not start:\n{log.read_text()}")
        time.sleep(0.05)
    return proc, sock, summ, log


def run_one(exe: Path, tmp: Path, engine: str, profile: str, outstanding: list[int], seconds: float,
            nbytes: int, store_ppm: int) -> dict:
    from hbfcommon import ctl
    from hbfd.client import Client
    proc, sock, summ, log = start_hbfd(tmp, engine, profile)
    runs = []
    try:
        with Client(sock) as c:
            rep = c.call("Attach", workload_pid=os.getpid(), abi_version=ctl.HBF_CTL_ABI_VERSION)
            for i, n in enumerate(outstanding):
                load0 = os.getloadavg()
                out = subprocess.run([str(exe), rep.ctl_path, str(n), str(seconds), str(nbytes), str(store_ppm),
                                      str(1 << 34), str(1234 + i)], check=True, capture_output=True, text=True,
                                     timeout=seconds * 10 + 60)
                r = json.loads(out.stdout)
                r["loadavg_before"] = [round(x, 2) for x in load0]
                r["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
                runs.append(r)
                print(f"{engine:6s} N={n:5d}: {r['req_per_s'] / 1e3:8.1f} k req/s  service p50 "
                      f"{r['service_ns']['p50'] / 1e3:7.1f} us p99 {r['service_ns']['p99'] / 1e3:8.1f} us  "
                      f"round trip p50 {r['round_trip_ns']['p50'] / 1e3:8.1f} us  errors {r['errors']}", flush=True)
            c.call("Shutdown", reason="bench done")
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(30)
    summary = json.loads(summ.read_text()) if summ.exists() else {}
    return {"engine": engine, "engine_name": summary.get("engine"), "profile": profile, "runs": runs,
            "terminal_status": summary.get("terminal_status")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--outstanding", type=int, nargs="+", default=[64, 512, 4096])
    ap.add_argument("--bytes", type=int, default=128, help="bytes per request (128: one warp x 4 B)")
    ap.add_argument("--store-ppm", type=int, default=0, help="fraction of stores, ppm")
    ap.add_argument("--profile", default="profiles/nominal.json")
    ap.add_argument("--engines", nargs="+", default=["fixed", "auto"], help="fixed | auto (media)")
    ap.add_argument("--out", default=str(ROOT / "bench/results"))
    ap.add_argument("--tag", default="", help="label stored with the results (e.g. before/after)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hbf-ring-") as td:
        tmp = Path(td)
        exe = build_driver(tmp)
        res = [run_one(exe, tmp, e, a.profile, a.outstanding, a.seconds, a.bytes, a.store_ppm) for e in a.engines]
    doc = {"bench": "ring_throughput", "tag": a.tag, "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
           "args": vars(a), "results": res,
           "best_req_per_s": {r["engine_name"] or r["engine"]: max(x["req_per_s"] for x in r["runs"]) for r in res}}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "ring_throughput.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    hist = old.get("history", []) + ([{k: old[k] for k in ("tag", "date_utc", "best_req_per_s") if k in old}] if old else [])
    doc["history"] = hist[-10:]
    tmpf = path.with_suffix(".json.tmp")
    tmpf.write_text(json.dumps(doc, indent=1))
    os.replace(tmpf, path)
    print(json.dumps(doc["best_req_per_s"]))


if __name__ == "__main__":
    main()
