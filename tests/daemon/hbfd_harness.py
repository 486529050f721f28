"""Start hbfd in a temp dir and attach to it like a workload (shared by the daemon tests)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


@dataclass
class Hbfd:
    proc: subprocess.Popen
    socket: Path
    summary: Path
    log: Path
    env: dict = field(default_factory=dict)

    def client(self):
        from hbfcommon.rpc import Client
        return Client(self.socket)

    def stop(self, sig=signal.SIGTERM, timeout=15) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def read_summary(self) -> dict:
        return json.loads(self.summary.read_text())


def start_hbfd(tmp_path: Path, *, profile="nominal", env=None, wait=True, name="hbfd") -> Hbfd:
    sock, summ, log = tmp_path / f"{name}.sock", tmp_path / f"{name}-summary.json", tmp_path / f"{name}.log"
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT), e.get("PYTHONPATH", "")])
    # lifecycle tests pin the default services; the plug-ins (media, thermal) test themselves
    e.update({"HBFD_ENGINE": "fixed", "HBFD_THERMAL": "none", "HBFD_REFRESH": "none"})
    e.update(env or {})
    proc = subprocess.Popen([sys.executable, "-m", "hbfd.cli", "--profile", str(profile),
                             "--socket", str(sock), "--summary", str(summ)],
                            cwd=tmp_path, env=e, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    h = Hbfd(proc, sock, summ, log, e)
    if wait:
        wait_ready(h)
    return h


def wait_ready(h: Hbfd, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if h.proc.poll() is not None:
            raise AssertionError(f"hbfd exited {h.proc.returncode}:\n{h.log.read_text()}")
        if "hbfd ready" in h.log.read_text():
            return
        time.sleep(0.02)
    raise AssertionError(f"hbfd not ready:\n{h.log.read_text()}")



def attach(h: Hbfd):
    """Attach like a workload: gRPC Attach, then open + mmap the returned /proc path."""
    from hbfcommon import ctl
    with h.client() as c:
        rep = c.call("Attach", workload_pid=os.getpid(), abi_version=ctl.HBF_CTL_ABI_VERSION)
    return rep, ctl.map_region(rep.ctl_path)
