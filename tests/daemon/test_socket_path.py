"""hbfd's socket path (issue 19): hbfd removes only a stale socket of its own; every other thing at
or around the path is refused with one line naming it, exit 2, no traceback, and is left as it was."""
from __future__ import annotations

import os
import socket as so
from pathlib import Path

import pytest

from hbfd.runner import start_daemon
from hbfd_harness import HERE, PINNED, ROOT, start_hbfd


def _refused(tmp_path: Path, sock: Path, *words: str) -> str:
    """Start hbfd on ``sock``; it must exit 2 with one ``hbfd: `` line naming the path."""
    d = start_daemon("nominal", workdir=tmp_path, name="probe", socket=sock, env=PINNED,
                     pythonpath=[HERE, ROOT], wait=False)
    assert d.wait(30) == 2, d.log_tail()
    log = d.log.read_text()
    assert "Traceback" not in log, log
    errs = [ln for ln in log.splitlines() if ln.startswith("hbfd: ")]
    assert len(errs) == 1 and str(sock) in errs[0], log
    for w in words:
        assert w in errs[0], errs[0]
    return errs[0]


def test_a_regular_file_at_the_socket_path_is_kept(tmp_path):
    p = tmp_path / "hbfd.sock"
    p.write_text("precious")                     # before issue 19 hbfd deleted this
    _refused(tmp_path, p, "regular file", "removes only a stale socket")
    assert p.read_text() == "precious"


def test_a_directory_at_the_socket_path_is_kept(tmp_path):
    p = tmp_path / "hbfd.sock"
    p.mkdir()
    (p / "inside").write_text("x")
    _refused(tmp_path, p, "directory")
    assert (p / "inside").read_text() == "x"


def test_a_symlink_at_the_socket_path_is_kept(tmp_path):
    target = tmp_path / "target"
    target.write_text("x")
    p = tmp_path / "hbfd.sock"
    p.symlink_to(target)
    _refused(tmp_path, p, "symlink")
    assert p.is_symlink() and target.read_text() == "x"


def test_a_parent_that_is_a_file(tmp_path):
    (tmp_path / "afile").write_text("x")
    _refused(tmp_path, tmp_path / "afile" / "hbfd.sock", "not a directory")
    assert (tmp_path / "afile").read_text() == "x"


def test_a_path_longer_than_sun_path(tmp_path):
    p = tmp_path / ("s" * 120 + ".sock")
    assert len(os.fsencode(str(p))) >= 108
    _refused(tmp_path, p, "sun_path", "bytes")


def test_a_parent_where_no_socket_can_be_made(tmp_path):
    # as root every directory is writable, so use a filesystem that refuses sockets outright;
    # as another user an unwritable directory shows the same refusal
    if os.geteuid() == 0:
        p = Path("/proc/hbfd-socket-test.sock")
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        p = ro / "hbfd.sock"
    _refused(tmp_path, p, "cannot create a socket in")


def test_a_stale_socket_of_ours_is_replaced(tmp_path):
    s = so.socket(so.AF_UNIX)
    s.bind(str(tmp_path / "hbfd.sock"))
    s.close()                                     # nobody listening: connect refused
    h = start_hbfd(tmp_path)
    try:
        with h.client() as c:
            assert c.call("Status").daemon_pid == h.proc.pid
    finally:
        h.stop()
    assert "removing the stale socket" in h.log.read_text()


def test_a_live_socket_is_another_hbfd(tmp_path):
    p = tmp_path / "hbfd.sock"
    listener = so.socket(so.AF_UNIX)
    listener.bind(str(p))
    listener.listen(4)                            # something alive answers connect
    try:
        _refused(tmp_path, p, "another hbfd is running on")
        assert p.exists()
    finally:
        listener.close()


def test_the_claim_itself_names_the_path_without_starting(tmp_path):
    """The check runs before any model is built: the Daemon refuses in _claim_socket."""
    from hbfcommon.errors import DaemonError
    from hbfd.server import Daemon
    p = tmp_path / "f"
    p.write_text("x")
    d = Daemon("nominal", socket_path=p)
    with pytest.raises(DaemonError) as ei:
        d._claim_socket()
    assert ei.value.fields["socket"] == str(p) and "\n" not in str(ei.value)
    assert p.read_text() == "x"
