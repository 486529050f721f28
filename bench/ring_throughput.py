"""Reference-path throughput of hbfd on the CPU, without a GPU.

Starts hbfd (fixed-latency engine, then the media engine on the nominal profile), attaches like a
workload (Attach RPC -> /proc/<hbfd>/fd/N) and runs bench/ring_driver/ring_driver.c, a native
stand-in for the GPU side compiled here with ``cc``: it reserves tickets, writes payloads,
store-releases the seq words, polls completions with load-acquire and marks them consumed, keeping
N requests outstanding (polled in any order, like independent warps, or oldest first). Reports sustained requests/s and the daemon's service_ns (host time from
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

from hbfcommon.fsutil import atomic_write_json  # noqa: E402
from hbfd.runner import start_daemon  # noqa: E402


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its threads (/proc/<pid>/stat)."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def build_driver(tmp: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise SystemExit("no C compiler (cc) found")
    exe = tmp / "ring_driver"
    argv = [cc, "-O2", "-std=c11", "-D_GNU_SOURCE", f"-I{ROOT / 'runtime_cuda/include'}", "-o", str(exe),
            str(ROOT / "bench/ring_driver/ring_driver.c")]
    subprocess.run(argv, check=True)
    return exe


def run_one(exe: Path, tmp: Path, engine: str, profile: str, outstanding: list[int], seconds: float,
            nbytes: int, store_ppm: int, poll: str = "any") -> dict:
    from hbfcommon import ctl
    hb = start_daemon(profile, workdir=tmp, cwd=ROOT, name=f"hbfd-{engine}", timeout_s=30.0,   # a name or a path
                      env={"HBFD_ENGINE": engine, "HBFD_THERMAL": "none", "HBFD_REFRESH": "none"})
    proc = hb.proc
    runs = []
    try:
        with hb.client() as c:
            rep = c.call("Attach", workload_pid=os.getpid(), abi_version=ctl.HBF_CTL_ABI_VERSION)
            for i, n in enumerate(outstanding):
                load0 = os.getloadavg()
                cpu0 = _cpu_s(proc.pid)
                out = subprocess.run([str(exe), rep.ctl_path, str(n), str(seconds), str(nbytes), str(store_ppm),
                                      str(1 << 34), str(1234 + i), poll], check=True, capture_output=True, text=True,
                                     timeout=seconds * 10 + 60, env={**os.environ, "HBF_RING_KEY": str(rep.ring_key)})
                r = json.loads(out.stdout)
                r["hbfd_cpu_s"] = round(_cpu_s(proc.pid) - cpu0, 4)
                r["req_per_hbfd_cpu_s"] = round(r["requests"] / r["hbfd_cpu_s"], 1) if r["hbfd_cpu_s"] else None
                r["loadavg_before"] = [round(x, 2) for x in load0]
                r["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
                runs.append(r)
                print(f"{engine:6s} N={n:5d}: {r['req_per_s'] / 1e3:8.1f} k req/s  service p50 "
                      f"{r['service_ns']['p50'] / 1e3:7.1f} us p99 {r['service_ns']['p99'] / 1e3:8.1f} us  "
                      f"round trip p50 {r['round_trip_ns']['p50'] / 1e3:8.1f} us  hbfd {r['req_per_hbfd_cpu_s'] / 1e3:7.1f} "
                      f"k req/cpu-s  errors {r['errors']}", flush=True)
            c.call("Shutdown", reason="bench done")
        hb.wait(30)
    finally:
        hb.stop()
    summary = json.loads(hb.summary.read_text()) if hb.summary.exists() else {}
    return {"engine": engine, "engine_name": summary.get("engine"), "profile": profile, "runs": runs,
            "terminal_status": summary.get("terminal_status")}


def engine_batch_stream(b: int, iters: int) -> list:
    """The per-batch cost stream: ``iters`` batches of ``b`` random 128 B reads (seeded by ``b``), arrivals
    10 ns apart within a batch and 2 us per request between batches (also bench/media_sweep.py's)."""
    import numpy as np

    from hbfd import contracts
    rng = np.random.default_rng(b)
    t, now, out = 0, 1_000_000, []
    for _ in range(iters):
        batch = np.zeros(b, contracts.REQUEST_BATCH_DTYPE)
        batch["id"] = np.arange(t, t + b)
        now += 2000 * b
        batch["arrival_ns"] = now + np.arange(b) * 10
        batch["media_address"] = rng.integers(0, 1 << 22, b) * 4096 + 64 * rng.integers(0, 32, b)
        batch["bytes"] = 128
        out.append(batch)
        t += b
    return out


def engine_batch_times(e, batches: list, clock) -> list[int]:
    """``clock()`` ns of one submit + advance + collect + quiet-scan collect per batch."""
    times = []
    for batch in batches:
        t0 = clock()
        e.submit(batch)
        e.advance(int(batch["arrival_ns"].max()))
        e.collect()
        e.collect()
        times.append(clock() - t0)
    return times


def engine_batch_cost(profile: str, sizes: list[int], iters: int) -> list[dict]:
    """In-process cost of one submit + advance + collect + quiet-scan collect of the media engine,
    per batch size (random 128 B reads, arrivals 2 us apart per request), microseconds."""
    import numpy as np

    from hbfd import services
    from hbfcommon.profile import load_profile
    p = load_profile(str(ROOT / profile))
    out = []
    for b in sizes:
        e = services.build_engine(p)
        times = engine_batch_times(e, engine_batch_stream(b, iters), time.perf_counter_ns)
        v = np.array(times[iters // 10:]) / 1e3
        out.append({"batch": b, "engine": e.name, "median_us": round(float(np.median(v)), 1),
                    "p90_us": round(float(np.percentile(v, 90)), 1), "iters": len(v)})
        print(f"engine {e.name} batch {b:5d}: median {out[-1]['median_us']:7.1f} us  p90 {out[-1]['p90_us']:7.1f} us",
              flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--outstanding", type=int, nargs="+", default=[64, 512, 4096])
    ap.add_argument("--bytes", type=int, default=128, help="bytes per request (128: one warp x 4 B)")
    ap.add_argument("--store-ppm", type=int, default=0, help="fraction of stores, ppm")
    ap.add_argument("--profile", default="nominal")
    ap.add_argument("--poll", choices=("any", "oldest"), default="any",
                    help="any: every outstanding ticket polled, like independent warps; oldest: FIFO consumer")
    ap.add_argument("--engines", nargs="*", default=["fixed", "auto"], help="fixed | auto (media)")
    ap.add_argument("--out", default=str(ROOT / "bench/results"))
    ap.add_argument("--tag", default="", help="label stored with the results (e.g. before/after)")
    ap.add_argument("--batch-sizes", type=int, nargs="*", default=[1, 16, 256, 4096],
                    help="in-process media engine cost per batch (empty: skip)")
    ap.add_argument("--batch-iters", type=int, default=2000)
    ap.add_argument("--before", help="an earlier result JSON (e.g. of the previous code) to embed as 'before'")
    a = ap.parse_args()
    eng_cost = engine_batch_cost(a.profile, a.batch_sizes, a.batch_iters) if a.batch_sizes else []
    with tempfile.TemporaryDirectory(prefix="hbf-ring-") as td:
        tmp = Path(td)
        exe = build_driver(tmp)
        res = [run_one(exe, tmp, e, a.profile, a.outstanding, a.seconds, a.bytes, a.store_ppm, a.poll)
               for e in a.engines]
    doc = {"bench": "ring_throughput", "tag": a.tag, "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
           "loadavg_end": [round(x, 2) for x in os.getloadavg()],
           "args": vars(a), "results": res, "engine_batch_cost": eng_cost,
           "best_req_per_s": {r["engine_name"] or r["engine"]: max(x["req_per_s"] for x in r["runs"]) for r in res}}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "ring_throughput.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    hist = old.get("history", []) + ([{k: old[k] for k in ("tag", "date_utc", "best_req_per_s") if k in old}] if old else [])
    doc["history"] = hist[-10:]
    if a.before:
        b = json.loads(Path(a.before).read_text())
        b.pop("history", None)
        doc["before"] = b
    atomic_write_json(path, doc, indent=1)
    print(json.dumps(doc["best_req_per_s"]))


if __name__ == "__main__":
    main()
