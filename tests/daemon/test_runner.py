"""hbfd.runner: the one start / readiness / stop harness (tests, benches, the demo)."""
from __future__ import annotations

import json

import pytest

from hbfcommon.errors import DaemonError
from hbfcommon.profile import PROFILE_DIR
from hbfd_harness import start_hbfd


def test_ready_means_this_daemon_answers_status_with_a_heartbeat(tmp_path):
    with start_hbfd(tmp_path) as d:
        st = d.ready_status
        assert st.daemon_pid == d.pid and st.heartbeat > 0 and st.engine == "fixed-latency"
        with d.client() as c:
            assert c.call("Status").heartbeat >= st.heartbeat
    assert d.returncode == 0                       # the ordered stop: SIGTERM, summary, exit 0
    s = d.read_summary()
    assert s["terminal_status"] == "clean" and s["shutdown_reason"] == "signal SIGTERM"
    assert not d.socket.exists()


def test_an_early_exit_is_an_error_with_the_log_tail(tmp_path):
    bad = tmp_path / "bad.json"
    doc = json.loads((PROFILE_DIR / "nominal.json").read_text())
    doc["time_scale"] = 10
    bad.write_text(json.dumps(doc))
    with pytest.raises(DaemonError) as ei:
        start_hbfd(tmp_path, profile=str(bad))
    msg = str(ei.value)
    assert "exited with 2 before it was ready" in msg and "time_scale" in msg and str(bad) in msg
    assert ei.value.fields["returncode"] == 2


def test_another_daemon_on_the_socket_is_not_taken_for_this_one(tmp_path):
    with start_hbfd(tmp_path) as first:
        with pytest.raises(DaemonError) as ei:    # its Status answers, but it is not the child we started
            start_hbfd(tmp_path, name="hbfd")
        assert "already serving" in str(ei.value)
        with first.client() as c:
            assert c.call("Status").daemon_pid == first.pid


def test_not_ready_by_the_deadline_stops_the_child(tmp_path):
    marker = tmp_path / "built"
    d = start_hbfd(tmp_path, env={"HBFD_ENGINE": "engines:slow", "HBFD_TEST_MARKER": str(marker)}, wait=False)
    try:
        with pytest.raises(DaemonError) as ei:
            d.wait_ready(0.1)                      # the engine takes 0.5 s to build
        assert "not ready after" in str(ei.value) and str(d.log) in str(ei.value)
        assert d.wait_ready(30).daemon_pid == d.pid
    finally:
        assert d.stop() == 0
    assert d.read_summary()["engine"] == "fixed-latency"


def test_shutdown_rpc_then_exit(tmp_path):
    d = start_hbfd(tmp_path)
    assert d.shutdown("runner test") == 0
    assert d.read_summary()["shutdown_reason"] == "runner test"
    with pytest.raises(DaemonError):               # no summary: a clear error, not a traceback
        type(d)(d.proc, socket=d.socket, summary=tmp_path / "none.json", log=d.log, env={}).read_summary()
