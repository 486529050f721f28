"""The summary is always written and the CLI says what really happened (issue 19)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hbfcommon import rpc
from hbfcommon.errors import ErrorCode, HbfError
from hbfcommon.fsutil import remove_stale_tmp
from hbfd import server

from hbfd_harness import start_hbfd


def _ctl(h, *args):
    return subprocess.run([sys.executable, "-m", "hbfd.ctl_cli", *args, "--socket", str(h.socket)],
                          capture_output=True, text=True, timeout=60, env=h.env)


@pytest.mark.parametrize("text", ['{"x": NaN}', '[Infinity]', '{"y": -Infinity}'])
def test_non_finite_report_is_refused_and_the_summary_still_written(hbfd, text):
    with hbfd.client() as c:
        with pytest.raises(HbfError) as ei:
            c.call("Report", kind="k", json=text)
        assert ei.value.code == ErrorCode.INVALID_ARGUMENT and "strict JSON" in str(ei.value)
        c.call("Report", kind="ok", json='{"v": 1.5}')
    r = _ctl(hbfd, "shutdown")
    assert r.returncode == 0, r.stderr
    s = hbfd.read_summary()
    assert [x["kind"] for x in s["reports"]] == ["ok"]


def test_non_finite_summary_values_are_encoded():
    enc, n = server._encode_non_finite({"a": [float("nan"), 1.0, {"b": float("inf")}], "c": -float("inf")})
    assert n == 3 and enc == {"a": ["NaN", 1.0, {"b": "Infinity"}], "c": "-Infinity"}


def test_retained_attaches_and_reports_are_bounded(hbfd):
    from hbfcommon import ctl
    extra = 7
    with hbfd.client() as c:
        for i in range(server.RETAINED_MAX + extra):
            c.call("Attach", workload_pid=i + 1, abi_version=ctl.HBF_CTL_ABI_VERSION)
            c.call("Report", kind="n", json=str(i))
        with pytest.raises(HbfError) as ei:
            c.call("Report", kind="big", json=" " * (rpc.REPORT_MAX_BYTES + 1))
        assert ei.value.code == ErrorCode.INVALID_ARGUMENT
    assert hbfd.shutdown() == 0
    s = hbfd.read_summary()
    assert len(s["attaches"]) == len(s["reports"]) == server.RETAINED_MAX
    assert s["attaches_dropped"] == s["reports_dropped"] == extra
    assert s["reports"][-1]["data"] == server.RETAINED_MAX + extra - 1      # the latest are kept


def test_shutdown_says_so_when_the_summary_was_not_written(tmp_path):
    from hbfd.runner import start_daemon
    from hbfd_harness import HERE, PINNED, ROOT
    h = start_daemon("nominal", workdir=tmp_path, summary=tmp_path / "missing-dir" / "s.json", env=PINNED,
                     pythonpath=[HERE, ROOT], timeout_s=30.0)
    with h:
        r = _ctl(h, "shutdown")
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert "could not write the summary" in r.stderr and "summary:" not in r.stdout
        assert h.wait(20) == 1


def test_a_reply_over_the_message_limit_is_reported_as_that(hbfd, monkeypatch):
    monkeypatch.setattr(rpc, "MAX_MESSAGE_BYTES", 512)     # this client only; the summary is larger
    with rpc.Client(hbfd.socket) as c:
        with pytest.raises(HbfError) as ei:
            c.call("GetSummary")
    assert "exceeds the gRPC limit" in str(ei.value) and ei.value.code != ErrorCode.DAEMON_UNAVAILABLE


def test_stale_summary_tmp_files_are_removed_only_when_ours_and_dead(tmp_path):
    target = tmp_path / "hbfd-summary.json"
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    dead, live = p.pid, os.getppid()
    stale = tmp_path / f".hbfd-summary.json.{dead}.0123abcd.tmp"
    keep = [tmp_path / f".hbfd-summary.json.{live}.0123abcd.tmp",          # a live writer's
            tmp_path / f".hbfd-summary.json.{dead}.0123abcd.tmp.bak",      # not our pattern
            tmp_path / f".other.json.{dead}.0123abcd.tmp",                  # another file's
            tmp_path / "hbfd-summary.json"]
    for f in [stale, *keep]:
        f.write_text("x")
    d = tmp_path / f".hbfd-summary.json.{dead}.89abcdef.tmp"
    d.mkdir()                                                              # a directory: never
    ln = tmp_path / f".hbfd-summary.json.{dead}.fedcba98.tmp"
    ln.symlink_to(keep[0])                                                 # a link: never
    assert remove_stale_tmp(target) == [stale]
    assert not stale.exists() and all(f.exists() for f in keep) and d.is_dir() and ln.is_symlink()


def test_hbfd_removes_its_stale_summary_tmp_at_start(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    stale = tmp_path / f".hbfd-summary.json.{p.pid}.0123abcd.tmp"
    stale.write_text("{")
    with start_hbfd(tmp_path) as h:
        assert not stale.exists()
        assert h.shutdown() == 0
    assert json.loads((tmp_path / "hbfd-summary.json").read_text())["terminal_status"] == "clean"
