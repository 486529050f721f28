"""hbfd with the thermal and reliability plug-ins: telemetry failure and thermal shutdown are distinct,
visible terminals (outstanding tickets answered before the failure word), range registrations reach
the reliability ledger, refresh drains on an idle device, application reads count per block."""
from __future__ import annotations
from hbfcommon.profile import PROFILE_DIR

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
    p = json.loads((PROFILE_DIR / "nominal.json").read_text())
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


def _run_into_a_terminal(tmp_path, prof: Path, n_tickets: int, status: int, reason: int) -> tuple[dict, dict, tuple]:
    """hbfd with the thermal model and a blocking engine, ``n_tickets`` requests in the ring: the run ends
    by itself (exit 1) with every ticket answered ``status`` before the failure word (status, reason)
    becomes visible, and admission closed. Returns (seen at the failure word, the summary, the thermal
    snapshot (mode, admission_open) after the end)."""
    h = start_hbfd(tmp_path, profile=str(prof), env={"HBFD_THERMAL": "auto", "HBFD_ENGINE": "engines:blocking"})
    try:
        att, m = attach(h)
        drv = RingDriver(m, att.ring_key)
        tickets = [drv.issue(arrival_ns=i, address=0, media_address=0, nbytes=4096, op=0) for i in range(n_tickets)]
        w, seen = _watch_failure(m, len(tickets))
        w.join(25)
        assert seen.get("failure"), "the failure word never appeared"
        assert (seen["seq"] == np.arange(1, n_tickets + 1)).all(), \
            "a ticket had no completion when the failure word appeared"
        assert (seen["status"] == status).all()
        assert seen["failure"] == ctl.failure_word(status, reason)
        assert seen["admission_closed"] == 1
        th = (int(m.ctl.thermal.mode), int(m.ctl.thermal.admission_open))
        assert h.proc.wait(15) == 1
        return seen, h.read_summary(), th
    finally:
        h.kill()


def test_stale_telemetry_is_a_distinct_visible_terminal(tmp_path):
    # a telemetry trace that stops after 2 s; readings older than 200 ms end the run
    rows = ["t_ns,gpu_power_w,gpu_temp_c"] + [f"{i * 10_000_000},300,50" for i in range(200)]
    trace = tmp_path / "short.csv"
    trace.write_text("\n".join(rows) + "\n")
    prof = _profile(tmp_path, "stale", thermal={
        "telemetry": "trace", "telemetry_trace": str(trace),
        "telemetry_trace_sha256": hashlib.sha256(trace.read_bytes()).hexdigest(), "telemetry_max_age_ms": 200})
    seen, s, _ = _run_into_a_terminal(tmp_path, prof, 20, ctl.HBF_ST_DAEMON_LOST, ctl.HBF_FAIL_REASON_TELEMETRY)
    assert s["terminal_status"] == "telemetry_failure"
    assert "stale" in s["shutdown_reason"] and "telemetry" in s["shutdown_reason"]
    assert s["services"]["thermal"]["terminal_status"] == "source_failed"
    assert s["failure_word"] == seen["failure"]


def test_thermal_shutdown_publishes_thermal_shutdown(tmp_path):
    # 700 W of constant GPU power heats the HBF stack past a 42 C shutdown threshold about 2 s after the
    # model's first tick (before readiness): late enough that the test has attached and queued its tickets
    # (at 37.8 C, 0.6 s, the run could end before a cold client had attached)
    prof = _profile(tmp_path, "hot", thermal={"rtt_c": 40.2, "ltt_c": 40.8, "stt_c": 41.4, "shutdown_c": 42.0,
                                              "hysteresis_k": 0.5, "telemetry_gpu_power_w": 700})
    _, s, th = _run_into_a_terminal(tmp_path, prof, 10, ctl.HBF_ST_THERMAL_SHUTDOWN, ctl.HBF_FAIL_REASON_THERMAL)
    assert th == (ctl.HBF_TH_SHUTDOWN, 0)
    assert s["terminal_status"] == "thermal_shutdown"
    t = s["services"]["thermal"]
    assert t["terminal_status"] == "thermal_shutdown" and t["mode"] == "Shutdown"
    assert t["transitions"][-1]["to"] == "Shutdown"


def _summary(h) -> dict:
    with h.client() as c:
        return json.loads(c.call("GetSummary").summary_json)


def _rng(pb, **kw):
    return pb.RegisterRangeRequest(range=pb.Range(**kw))


def test_range_registrations_reach_the_reliability_ledger(tmp_path):
    h = start_hbfd(tmp_path, env={"HBFD_REFRESH": "auto"})
    try:
        attach(h)
        led = lambda: _summary(h)["services"]["refresh"]  # noqa: E731
        assert led()["ledger"]["registered_blocks"] == 0, "nothing is valid before a range is registered"
        with h.client() as c:
            pb = c.pb
            # 256 MiB = 65536 pages = two groups of (16 ch x 8 dies x 256 pages): 2 x 128 blocks
            a = c.call("RegisterRange", _rng(pb, base=0x7000_0000_0000, length=256 << 20, mode=pb.TIMING, perms=3))
            r = led()
            assert r["ledger"]["registered_blocks"] == 256 and r["registered_ranges"] == [a.range.range_id]
            assert "registered ranges" in r["registered"]
            # a small range shares blocks with nothing new only if it lies in the same pages: here it
            # gets its own media pages, whose 4 pages sit in 4 distinct (channel, die) blocks
            b = c.call("RegisterRange", _rng(pb, base=0x1000_0000, length=4 * 4096, mode=pb.CAPACITY, perms=1))
            r = led()
            assert r["registered_ranges"] == sorted([a.range.range_id, b.range.range_id])
            assert 256 <= r["ledger"]["registered_blocks"] <= 260
            c.call("UnregisterRange", range_id=a.range.range_id)
            r = led()
            assert r["registered_ranges"] == [b.range.range_id]
            assert r["ledger"]["registered_blocks"] == 4
            c.call("UnregisterRange", range_id=b.range.range_id)
            assert led()["ledger"]["registered_blocks"] == 0
        assert h.stop() == 0
    finally:
        h.kill()


def _disturb_profile(tmp_path):
    return _profile(tmp_path, "disturb", reliability={"read_disturb_limit": 50})


def test_ring_reads_count_per_block_and_disturb_triggers_refresh(tmp_path):
    """Loads through the ring count on the block of their media page; past the read-disturb limit
    the block is refreshed (fixed engine: the background drain), stores do not count."""
    h = start_hbfd(tmp_path, profile=str(_disturb_profile(tmp_path)), env={"HBFD_REFRESH": "auto"})
    try:
        att, m = attach(h)
        with h.client() as c:
            pb = c.pb
            a = c.call("RegisterRange", _rng(pb, base=0x7000_0000_0000, length=1 << 20, mode=pb.TIMING, perms=3))
        mo = a.range.media_offset
        drv = RingDriver(m, att.ring_key)
        # 30 loads + 40 stores on one page: below the limit (stores do not disturb)
        ts = [drv.issue(arrival_ns=i, address=0x7000_0000_0000, media_address=mo, nbytes=64,
                        op=ctl.HBF_OP_LOAD if i < 30 else ctl.HBF_OP_STORE) for i in range(70)]
        for t in ts:
            assert drv.wait(t).status == ctl.HBF_ST_READY
        time.sleep(0.1)
        r = _summary(h)["services"]["refresh"]
        assert r["ledger"]["read_disturb_max"] == 30 and r["completed_refresh_blocks"] == 0
        # 30 more loads, spread over 4 pages (= 4 blocks) but 27 on the first: 57 >= 50
        ts = [drv.issue(arrival_ns=100 + i, address=0x7000_0000_0000, media_address=mo + (0 if i < 27 else (i - 26) * 4096),
                        nbytes=64, op=ctl.HBF_OP_LOAD) for i in range(30)]
        for t in ts:
            assert drv.wait(t).status == ctl.HBF_ST_READY
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            r = _summary(h)["services"]["refresh"]
            if r["completed_refresh_blocks"]:
                break
            time.sleep(0.05)
        assert r["completed_refresh_blocks"] == 1, r
        assert r["ledger"]["pec_max"] == 1
        # the refreshed block cleared; the others read once. hbfd may serve the 30 loads over several ring scans, and
        # the refresh (decided when the first block reaches 50) can clear the block before its last loads are counted:
        # those count again on the fresh block, at most 57 - 50 = 7 (CI saw 5 once, 2026-12-06)
        assert 1 <= r["ledger"]["read_disturb_max"] <= 7
        assert r["ledger"]["unregistered_reads"] == 0
        assert m.ctl.refresh.debt_total_bytes > 0
        assert m.ctl.refresh.background_drained_bytes == r["debt_disposition"]["background_drained_bytes"] > 0
        assert h.stop() == 0
    finally:
        h.kill()


def test_refresh_drains_through_the_media_model_on_an_idle_device(tmp_path):
    """The media engine refreshes only when handed work; with no ring traffic after the block
    became eligible, the control tick hands it over and the debt drains (background_drained_bytes)."""
    h = start_hbfd(tmp_path, profile=str(_disturb_profile(tmp_path)),
                   env={"HBFD_REFRESH": "auto", "HBFD_ENGINE": "auto"})
    try:
        att, m = attach(h)
        with h.client() as c:
            pb = c.pb
            a = c.call("RegisterRange", _rng(pb, base=0x7000_0000_0000, length=1 << 20, mode=pb.TIMING, perms=3))
        drv = RingDriver(m, att.ring_key)
        # 49 loads (below the read-disturb limit of 50), then the 50th alone: the block becomes eligible
        # with a batch of one load, and the control tick plans the refresh only after it, so no ring
        # traffic can carry it (with 60 loads in a burst it sometimes went beside the last batches)
        for i in range(50):
            if i == 49:
                time.sleep(0.1)
            t = drv.issue(arrival_ns=1000 + 10 * i, address=0x7000_0000_0000, media_address=a.range.media_offset,
                          nbytes=64, op=ctl.HBF_OP_LOAD)
            assert drv.wait(t).status == ctl.HBF_ST_READY
        # from here the device is idle: no request reaches the ring
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            r = _summary(h)["services"]["refresh"]
            if r["completed_refresh_blocks"]:
                break
            time.sleep(0.05)
        assert r["refresh_path"].startswith("media model")
        assert r["completed_refresh_blocks"] == 1, r
        assert r["idle_media_refresh_bytes"] > 0 and r["media_refresh_pages"] > 0, json.dumps(r)
        assert r["debt_disposition"]["background_drained_bytes"] == r["idle_media_refresh_bytes"]
        time.sleep(0.05)
        assert m.ctl.refresh.background_drained_bytes == r["idle_media_refresh_bytes"]
        assert h.stop() == 0
    finally:
        h.kill()
