"""hbfd with the thermal and reliability plug-ins: telemetry failure and thermal shutdown are distinct,
visible terminals (outstanding tickets answered before the failure word), range registrations reach
the reliability ledger, refresh drains on an idle device, application reads count per block."""
from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path

import numpy as np

from hbfcommon import ctl
from hbfd.hostring import RingDriver

from hbfd_harness import ROOT, attach, start_hbfd


def _num(v):
    return {"value": v, "provenance": "assumed", "source": "test scenario"}


def _profile(tmp_path: Path, name: str, thermal: dict | None = None, reliability: dict | None = None) -> Path:
    p = json.loads((ROOT / "profiles" / "nominal.json").read_text())
    for k, v in (thermal or {}).items():
        p["thermal"][k] = v if isinstance(v, str) else _num(v)
    for k, v in (reliability or {}).items():
        p["reliability"][k] = _num(v)
    out = tmp_path / f"{name}.json"
    out.write_text(json.dumps(p))
    return out


def _watch_failure(m, n_tickets: int) -> tuple[threading.Thread, dict]:
    """Snapshot the completions at the instant the failure word becomes visible."""
    seen: dict = {}

    def watch():
        hdr = m.ctl.header
        deadline = time.monotonic() + 20
        while hdr.failure == 0 and time.monotonic() < deadline:
            pass
        seen["seq"] = m.completions["seq"][:n_tickets].copy()
        seen["status"] = m.completions["status"][:n_tickets].copy()
        seen["failure"] = int(hdr.failure)
        seen["admission_closed"] = int(hdr.admission_closed)
    w = threading.Thread(target=watch)
    w.start()
    return w, seen


def test_stale_telemetry_is_a_distinct_visible_terminal(tmp_path):
    # a telemetry trace that stops after 2 s; readings older than 200 ms end the run
    rows = ["t_ns,gpu_power_w,gpu_temp_c"] + [f"{i * 10_000_000},300,50" for i in range(200)]
    trace = tmp_path / "short.csv"
    trace.write_text("\n".join(rows) + "\n")
    prof = _profile(tmp_path, "stale", thermal={
        "telemetry": "trace", "telemetry_trace": str(trace),
        "telemetry_trace_sha256": hashlib.sha256(trace.read_bytes()).hexdigest(), "telemetry_max_age_ms": 200})
    h = start_hbfd(tmp_path, profile=str(prof), env={"HBFD_THERMAL": "auto", "HBFD_ENGINE": "engines:blocking"})
    try:
        _, m = attach(h)
        drv = RingDriver(m)
        tickets = [drv.issue(arrival_ns=i, address=0, media_address=0, nbytes=4096, op=0) for i in range(20)]
        w, seen = _watch_failure(m, len(tickets))
        w.join(25)
        assert seen.get("failure"), "the failure word never appeared"
        assert (seen["seq"] == np.arange(1, 21)).all(), "a ticket had no completion when the failure word appeared"
        assert (seen["status"] == ctl.HBF_ST_DAEMON_LOST).all()
        assert seen["failure"] == ctl.failure_word(ctl.HBF_ST_DAEMON_LOST, ctl.HBF_FAIL_REASON_TELEMETRY)
        assert seen["admission_closed"] == 1
        assert h.proc.wait(15) == 1
        s = h.read_summary()
        assert s["terminal_status"] == "telemetry_failure"
        assert "stale" in s["shutdown_reason"] and "telemetry" in s["shutdown_reason"]
        assert s["services"]["thermal"]["terminal_status"] == "source_failed"
        assert s["failure_word"] == seen["failure"]
    finally:
        if h.proc.poll() is None:
            h.proc.kill()


def test_thermal_shutdown_publishes_thermal_shutdown(tmp_path):
    # 700 W of constant GPU power heats the HBF stack past a 37.8 C shutdown threshold in < 1 s
    prof = _profile(tmp_path, "hot", thermal={"rtt_c": 36.0, "ltt_c": 36.6, "stt_c": 37.2, "shutdown_c": 37.8,
                                              "hysteresis_k": 0.5, "telemetry_gpu_power_w": 700})
    h = start_hbfd(tmp_path, profile=str(prof), env={"HBFD_THERMAL": "auto", "HBFD_ENGINE": "engines:blocking"})
    try:
        _, m = attach(h)
        drv = RingDriver(m)
        tickets = [drv.issue(arrival_ns=i, address=0, media_address=0, nbytes=4096, op=0) for i in range(10)]
        w, seen = _watch_failure(m, len(tickets))
        w.join(25)
        assert seen.get("failure"), "the failure word never appeared"
        assert (seen["seq"] == np.arange(1, 11)).all()
        assert (seen["status"] == ctl.HBF_ST_THERMAL_SHUTDOWN).all()
        assert seen["failure"] == ctl.failure_word(ctl.HBF_ST_THERMAL_SHUTDOWN, ctl.HBF_FAIL_REASON_THERMAL)
        assert seen["admission_closed"] == 1
        th = m.ctl.thermal
        assert th.mode == ctl.HBF_TH_SHUTDOWN and th.admission_open == 0
        assert h.proc.wait(15) == 1
        s = h.read_summary()
        assert s["terminal_status"] == "thermal_shutdown"
        t = s["services"]["thermal"]
        assert t["terminal_status"] == "thermal_shutdown" and t["mode"] == "Shutdown"
        assert t["transitions"][-1]["to"] == "Shutdown"
    finally:
        if h.proc.poll() is None:
            h.proc.kill()
