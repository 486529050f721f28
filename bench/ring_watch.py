"""A sidecar that samples a running hbfd's reference ring from host memory, and hbfd's own counters, every period
(issue 13: tell a hang from a slow run; docs/RESULTS.md "Issue 13: the reference source's Qwen3 hang (CPU)").

It waits for hbfd's socket (the workload starts hbfd), asks it once for the control region's path (the Status RPC),
maps the region (no Attach: it never becomes hbfd's client) and then, every period, writes one JSON line:

* ``ring``: hbfcommon.ctl.read_ring_state -- tickets published, completions hbfd posted, slots published and not
  answered, slots answered and not consumed, the header's failure words and heartbeat (host memory only);
* ``activity``: the GPU's live activity section read raw (its seq -- odd: a publication in flight, or a writer
  that never finished --, flushes, gpu_ns, requests, and clock_echo_ns, the GPU clock at its last thermal read);
* ``thermal``: the published snapshot (seq, mode, q_ppm, valid_until_gpu_ns: the validity horizon);
* ``hbfd``: from the GetSummary RPC (skipped when hbfd does not answer in time): ring_service (batches,
  requests taken, reuse holds), foreign_requests, rejected_requests, the engine's deferred pages, the
  heartbeat's longest gap, the horizon's statistics.

At the end (``--duration`` passed, hbfd gone, or SIGTERM/SIGINT) it prints one verdict line: ``moving`` (the ring
changed within the last ``--still-s`` seconds: a slow run), ``still`` (it did not: whose move it is, as the
session's stall watch says it: runtime_cuda.session.stall_verdict) or ``idle`` (nothing was ever published).

    python3 bench/ring_watch.py --socket /tmp/q/out/work/hbfd.sock --out /tmp/q/ring_watch.jsonl --duration 200
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hbfcommon import ctl  # noqa: E402
from hbfcommon.errors import HbfError  # noqa: E402


def _raw_activity(m: ctl.CtlMap) -> dict:
    a = m.ctl.activity
    return {"seq": int(a.seq), "flushes": int(a.flushes), "gpu_ns": int(a.gpu_ns),
            "requests": sum(int(o.requests) for o in a.ops), "bytes": sum(int(o.bytes) for o in a.ops),
            "clock_echo_ns": int(a.clock_echo_ns)}


def _thermal(m: ctl.CtlMap) -> dict:
    t = m.ctl.thermal
    return {"seq": int(t.seq), "mode": int(t.mode), "q_ppm": int(t.q_ppm), "admission_open": int(t.admission_open),
            "valid_until_gpu_ns": int(t.valid_until_gpu_ns)}


def _hbfd(client) -> dict | None:
    try:
        s = json.loads(client.call("GetSummary", timeout_s=2.0).summary_json)
    except HbfError as e:
        return {"error": str(e)[:200]}
    th = s.get("services", {}).get("thermal", {})
    es = s.get("engine_stats") or {}
    return {"ring_service": {k: v for k, v in (s.get("ring_service") or {}).items() if k != "batch_log2_hist"},
            "foreign_requests": s.get("foreign_requests"), "rejected_requests": s.get("rejected_requests"),
            "device_failure": s.get("device_failure"), "failure_word": s.get("failure_word"),
            "engine_error": s.get("engine_error"),
            "deferred_pages": es.get("deferred_pages") if isinstance(es, dict) else None,
            "heartbeat_max_gap_ns": (s.get("daemon") or {}).get("heartbeat_max_gap_ns"),
            "horizon": {k: v for k, v in (th.get("horizon") or {}).items() if k != "what"},
            "status_counts": (s.get("counters") or {}).get("status")}


def verdict(samples: list[dict], still_s: float) -> dict:
    """moving / still / idle from the samples (each with "t" and "ring"), as the stall watch judges a stall."""
    from runtime_cuda.session import stall_verdict  # noqa: PLC0415
    rs = [s for s in samples if "ring" in s]
    if not rs:
        return {"verdict": "no sample"}
    last = rs[-1]
    key = lambda s: (s["ring"]["published"], s["ring"]["answered"], s["ring"]["consumed_sum"])  # noqa: E731
    changed = [s["t"] for a, s in zip(rs, rs[1:]) if key(a) != key(s)]
    last_change = changed[-1] if changed else rs[0]["t"]
    out = {"samples": len(rs), "seconds": round(last["t"] - rs[0]["t"], 1), "ring": last["ring"],
           "ring_unchanged_s": round(last["t"] - last_change, 1),
           "rate_req_per_s": None}
    span = [s for s in rs if s["t"] >= last["t"] - 10.0]
    if len(span) > 1 and span[-1]["t"] > span[0]["t"]:
        out["rate_req_per_s"] = round((span[-1]["ring"]["answered"] - span[0]["ring"]["answered"]) /
                                      (span[-1]["t"] - span[0]["t"]))
    if last["ring"]["published"] == 0:
        out["verdict"] = "idle: nothing was ever published on the ring"
    elif last["t"] - last_change < still_s:
        out["verdict"] = "moving: the ring changed within the last %.0f s (slow, not stuck)" % still_s
    else:
        out["verdict"] = "still: " + stall_verdict(ctl.RingState(**last["ring"]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True, help="hbfd's socket (the workload's hbfd: <out>/work/hbfd.sock)")
    ap.add_argument("--out", required=True, help="JSON lines, one per sample")
    ap.add_argument("--period", type=float, default=1.0)
    ap.add_argument("--wait-s", type=float, default=300.0, help="how long to wait for hbfd to answer")
    ap.add_argument("--duration", type=float, default=600.0, help="stop after this many seconds of sampling")
    ap.add_argument("--still-s", type=float, default=10.0, help="a ring unchanged this long is 'still'")
    a = ap.parse_args(argv)
    if not (a.period > 0 and a.wait_s >= 0 and a.duration > 0 and a.still_s > 0):
        ap.error("--period, --duration and --still-s must be > 0, --wait-s >= 0")
    from hbfcommon.rpc import Client  # noqa: PLC0415
    stop = {"now": False}
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.__setitem__("now", True))
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    t_wait = time.monotonic()
    client = m = None
    while m is None and not stop["now"] and time.monotonic() - t_wait < a.wait_s:
        try:
            client = Client(a.socket, timeout_s=2.0)
            path = client.call("Status").ctl_path
            m = ctl.map_region(path)
        except (HbfError, OSError):
            time.sleep(0.5)
    if m is None:
        print(json.dumps({"verdict": f"no hbfd answered on {a.socket} within {a.wait_s:.0f} s"}), flush=True)
        return 2
    samples: list[dict] = []
    t0 = time.monotonic()
    with out.open("w") as f:
        while not stop["now"] and time.monotonic() - t0 < a.duration:
            s = {"t": round(time.monotonic() - t0, 3), "wall": round(time.time(), 3)}
            try:
                s["ring"] = ctl.read_ring_state(m).as_dict()
                s["activity"] = _raw_activity(m)
                s["thermal"] = _thermal(m)
                s["ring_head"] = int(m.ctl.header.ring_head)
            except Exception as e:  # noqa: BLE001 - the region went away: the run ended
                s["error"] = f"{type(e).__name__}: {e}"
            s["hbfd"] = _hbfd(client)
            f.write(json.dumps(s) + "\n")
            f.flush()
            samples.append(s)
            if "error" in s or (isinstance(s["hbfd"], dict) and "error" in s["hbfd"] and
                                not Path(a.socket).exists()):
                break
            time.sleep(max(0.0, a.period - (time.monotonic() - t0 - s["t"])))
    print(json.dumps(verdict(samples, a.still_s)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
