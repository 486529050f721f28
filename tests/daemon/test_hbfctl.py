"""hbfctl against a live hbfd, and without one."""
from __future__ import annotations

import json
import subprocess
import sys

from hbfd_harness import attach, start_hbfd


def _ctl(h_env, sock, *args):
    return subprocess.run([sys.executable, "-m", "hbfd.ctl_cli", *args, "--socket", str(sock)],
                          capture_output=True, text=True, timeout=60, env=h_env)


def test_status_ranges_summary_shutdown(hbfd):
    _, m = attach(hbfd)
    with hbfd.client() as c:
        c.call("RegisterRange", c.pb.RegisterRangeRequest(range=c.pb.Range(
            base=0x10000, length=0x4000, mode=c.pb.TIMING, perms=3, label="weights")))
    r = _ctl(hbfd.env, hbfd.socket, "status")
    assert r.returncode == 0, r.stderr
    for want in ("heartbeat", "nominal", "fixed-latency", "Normal", "outstanding", "weights", "0x10000"):
        assert want in r.stdout, (want, r.stdout)
    j = json.loads(_ctl(hbfd.env, hbfd.socket, "status", "--json").stdout)
    assert j["profile_name"] == "nominal" and j["engine"] == "fixed-latency"
    assert j["daemon_pid"] == hbfd.proc.pid and j["heartbeat"] > 0 and j["heartbeat_age_ns"] < 1e9
    assert j["counters"]["reference"]["load"]["requests"] == 0 and j["ring_depth"] == 0
    assert j["ranges"][0]["base"] == 0x10000 and j["ranges"][0]["label"] == "weights"
    rj = json.loads(_ctl(hbfd.env, hbfd.socket, "ranges", "--json").stdout)
    assert [x["length"] for x in rj] == [0x4000]
    assert "weights" in _ctl(hbfd.env, hbfd.socket, "ranges").stdout
    sj = json.loads(_ctl(hbfd.env, hbfd.socket, "summary", "--json").stdout)
    assert sj["terminal_status"] == "running" and sj["engine"] == "fixed-latency"
    assert "running" in _ctl(hbfd.env, hbfd.socket, "summary").stdout
    r = _ctl(hbfd.env, hbfd.socket, "shutdown", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["summary_path"] == str(hbfd.summary.resolve())
    assert hbfd.proc.wait(15) == 0
    assert hbfd.read_summary()["shutdown_reason"] == "hbfctl shutdown"


def test_no_daemon_is_a_friendly_one_line_error(tmp_path):
    for cmd in ("status", "ranges", "summary", "shutdown"):
        r = _ctl(None, tmp_path / "absent.sock", cmd)
        assert r.returncode == 2
        assert r.stderr.count("\n") == 1 and "no hbfd is running" in r.stderr and "Traceback" not in r.stderr
        assert r.stdout == ""


def test_dead_socket_file_is_a_friendly_error(tmp_path):
    import socket as so
    s = so.socket(so.AF_UNIX)
    s.bind(str(tmp_path / "dead.sock"))
    s.close()
    r = _ctl(None, tmp_path / "dead.sock", "status")
    assert r.returncode == 2 and "no hbfd is running" in r.stderr and "Traceback" not in r.stderr
