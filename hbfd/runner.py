"""Run hbfd as a child process: the one start / wait-for-readiness / stop harness of the tests, the
benches and the demo.

    with start_daemon("nominal", workdir=tmp, env={"HBFD_THERMAL": "none"}) as d:
        runtime_cuda.attach(socket=str(d.socket))
        ...
    d.read_summary()

:func:`start_daemon` launches ``python -m hbfd.cli serve --profile P --socket S --summary J`` with stdout and
stderr in a log file and (by default) waits for readiness: :meth:`DaemonProcess.wait_ready` polls the
Status RPC until this child answers with a heartbeat (hbfd beats for the first time only when the models, the
thermal snapshot, the refresh debt, the ring service and gRPC are all up). An hbfd that exits first, or
is not ready by the deadline, is a :class:`DaemonError` carrying the exit code and the log's tail.

:meth:`DaemonProcess.stop` is the ordered shutdown: SIGTERM (hbfd closes admission, posts a terminal
completion to every outstanding ticket, sets the failure word, writes the summary, stops gRPC), wait,
SIGKILL only when it does not exit in time. :meth:`DaemonProcess.shutdown` does the same through the
Shutdown RPC.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any, Callable, Mapping, Sequence

from hbfcommon import abort
from hbfcommon.errors import DaemonError, HbfError

# the directory holding the hbfd package: the child imports the same hbfd as its parent
_PKG_ROOT = Path(__file__).resolve().parent.parent
POLL_S = 0.02                  # readiness poll interval (not a wait for readiness: the loop checks Status)
DEFAULT_READY_TIMEOUT_S = 120.0
LOG_TAIL_CHARS = 4000


class DaemonProcess:
    """A running (or finished) hbfd child: ``proc``, ``socket``, ``summary``, ``log``, ``env``."""

    def __init__(self, proc: subprocess.Popen, *, socket: Path, summary: Path, log: Path, env: Mapping[str, str],
                 logf: IO | None = None) -> None:
        self.proc = proc
        self.socket = socket
        self.summary = summary
        self.log = log
        self.env = dict(env)
        self.ready_status = None        # the Status reply that showed readiness (wait_ready)
        self._logf = logf
        # a process that ends itself (hbfcommon.abort: the stall watch's HBF_STALL_ABORT_S) stops this daemon first
        self._abort_hook = abort.register(f"stop hbfd (pid {proc.pid})", lambda reason: self.stop())

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError as e:
            return f"(no log at {self.log}: {e.strerror})"
        return text[-chars:] if text else "(the log is empty)"

    def client(self, timeout_s: float | None = None):
        """An RPC client of this hbfd (:class:`hbfcommon.rpc.Client`)."""
        from hbfcommon.rpc import Client
        return Client(self.socket, timeout_s=timeout_s)

    # ---- readiness ------------------------------------------------------------------------------
    def wait_ready(self, timeout_s: float = DEFAULT_READY_TIMEOUT_S, *,
                   on_wait: Callable[[float, str], None] | None = None, every_s: float = 10.0):
        """Return the first Status reply with a heartbeat (hbfd is ready). Raises :class:`DaemonError`
        (with the exit code and the log's tail) when hbfd exits first or is not ready within
        ``timeout_s``. ``on_wait(elapsed_s, last log line)`` is called every ``every_s`` while waiting
        (the demo shows progress while hbfd builds its models)."""
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        shown = 0
        while True:
            rc = self.proc.poll()
            if rc is not None:
                self._close_log()
                raise DaemonError(f"hbfd exited with {rc} before it was ready; log {self.log}:\n{self.log_tail()}",
                                  returncode=rc, log=str(self.log))
            now = time.monotonic()
            if now >= deadline:
                raise DaemonError(f"hbfd (pid {self.pid}) not ready after {timeout_s:.0f} s; log {self.log}:\n"
                                  f"{self.log_tail()}", timeout_s=timeout_s, log=str(self.log))
            if on_wait is not None and now - t0 >= every_s * (shown + 1):
                shown += 1
                lines = self.log_tail(1000).strip().splitlines()
                on_wait(now - t0, lines[-1] if lines else "")
            if self.socket.exists():
                try:
                    with self.client(timeout_s=max(0.05, min(2.0, deadline - now))) as c:
                        st = c.call("Status")
                    if st.heartbeat > 0 and st.daemon_pid == self.pid:   # ours, not another on the path
                        self.ready_status = st
                        return st
                except HbfError:        # gRPC not serving yet, or hbfd still starting: poll again
                    pass
            time.sleep(POLL_S)

    # ---- stopping -------------------------------------------------------------------------------
    def wait(self, timeout_s: float | None = None) -> int:
        rc = self.proc.wait(timeout_s)
        self._close_log()
        return rc

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 20.0) -> int:
        """The ordered shutdown: ``sig`` (SIGTERM or SIGINT run hbfd's shutdown sequence), wait up to
        ``timeout_s``, then SIGKILL. Returns the exit code (negative: killed by that signal)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close_log()
        return self.proc.returncode

    def shutdown(self, reason: str = "done", timeout_s: float = 40.0) -> int:
        """Shutdown RPC (hbfd writes its summary, then exits), wait; :meth:`stop` if that fails."""
        if self.proc.poll() is None:
            try:
                with self.client(timeout_s=timeout_s) as c:
                    c.call("Shutdown", reason=reason)
                self.proc.wait(timeout_s)
            except (HbfError, subprocess.TimeoutExpired):
                pass
        return self.stop()

    def kill(self) -> int:
        if self.proc.poll() is None:
            self.proc.kill()
        return self.wait()

    def read_summary(self) -> dict[str, Any]:
        """The summary hbfd wrote at exit (DaemonError when there is none)."""
        try:
            return json.loads(self.summary.read_text())
        except FileNotFoundError:
            raise DaemonError(f"hbfd wrote no summary at {self.summary}; log {self.log}:\n{self.log_tail()}",
                              summary=str(self.summary)) from None

    def _close_log(self) -> None:
        abort.unregister(self._abort_hook)          # the child is gone (or being waited for): nothing to stop
        self._abort_hook = None
        if self._logf is not None:
            self._logf.close()
            self._logf = None

    def __enter__(self) -> "DaemonProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"DaemonProcess(pid={self.pid}, socket={str(self.socket)!r}, returncode={self.proc.poll()})"


def _warm_rpc(sock: Path) -> None:
    """Let the one RPC client (hbfcommon.rpc) import grpc and the stubs now, before the child starts: a
    first use costs a few hundred ms, which would otherwise delay the first Status poll past a daemon
    that is already ready. The client is made for the socket path and closed at once (it connects lazily;
    with no socket there yet it refuses after its imports)."""
    from hbfcommon.rpc import Client
    try:
        Client(sock, timeout_s=1.0).close()
    except DaemonError:
        pass


def start_daemon(profile: str | os.PathLike = "nominal", *, workdir: str | os.PathLike,
                 name: str = "hbfd", socket: str | os.PathLike | None = None,
                 summary: str | os.PathLike | None = None, log: str | os.PathLike | None = None,
                 env: Mapping[str, str] | None = None, pythonpath: Sequence[str | os.PathLike] = (),
                 args: Sequence[str] = (), cwd: str | os.PathLike | None = None, wait: bool = True,
                 timeout_s: float = DEFAULT_READY_TIMEOUT_S,
                 on_wait: Callable[[float, str], None] | None = None) -> DaemonProcess:
    """Start hbfd with ``profile`` (a path or a bundled profile name). Its files default to
    ``workdir/<name>.sock``, ``<name>-summary.json`` and ``<name>.log``; ``env`` is laid over this
    process's environment; ``pythonpath`` entries (e.g. a directory of test plug-ins) come first on the
    child's PYTHONPATH, then the directory holding this hbfd. ``cwd`` defaults to ``workdir``. With
    ``wait`` (default) returns only once hbfd is ready (:meth:`DaemonProcess.wait_ready`); a failed start
    stops the child and raises :class:`DaemonError`."""
    wd = Path(workdir)
    wd.mkdir(parents=True, exist_ok=True)
    sock = Path(socket) if socket else wd / f"{name}.sock"
    summ = Path(summary) if summary else wd / f"{name}-summary.json"
    logp = Path(log) if log else wd / f"{name}.log"
    e = dict(os.environ)
    e.update(env or {})
    paths = [str(p) for p in pythonpath] + [str(_PKG_ROOT)] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else [])
    e["PYTHONPATH"] = os.pathsep.join(paths)
    if wait:
        _warm_rpc(sock)
    argv = [sys.executable, "-m", "hbfd.cli", "serve", "--profile", os.fspath(profile), "--socket", str(sock),
            "--summary", str(summ), *args]
    logf = open(logp, "w")
    try:
        proc = subprocess.Popen(argv, cwd=os.fspath(cwd) if cwd else str(wd), env=e, stdout=logf,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    except BaseException:
        logf.close()
        raise
    d = DaemonProcess(proc, socket=sock, summary=summ, log=logp, env=e, logf=logf)
    if wait:
        try:
            d.wait_ready(timeout_s, on_wait=on_wait)
        except BaseException:
            d.stop(timeout_s=5.0)
            raise
    return d
