"""The daemon tests' defaults around the one runner (hbfd/runner.py), and attaching like a workload."""
from __future__ import annotations

import os
from pathlib import Path

from hbfd.runner import DaemonProcess, start_daemon

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
# lifecycle tests pin the default services; the plug-ins (media, thermal) test themselves
PINNED = {"HBFD_ENGINE": "fixed", "HBFD_THERMAL": "none", "HBFD_REFRESH": "none"}

Hbfd = DaemonProcess


def start_hbfd(tmp_path: Path, *, profile="nominal", env=None, wait=True, name="hbfd") -> DaemonProcess:
    """hbfd in ``tmp_path`` with the pinned default services (``env`` overrides them); the test engines
    of tests/daemon/engines.py load as ``HBFD_ENGINE=engines:<factory>``."""
    return start_daemon(profile, workdir=tmp_path, name=name, env={**PINNED, **(env or {})},
                        pythonpath=[HERE, ROOT], wait=wait, timeout_s=120.0)   # a cold numba compile: ~35 s


def wait_ready(h: DaemonProcess, timeout=120.0):
    return h.wait_ready(timeout)


def attach(h: DaemonProcess):
    """Attach like a workload: gRPC Attach, then open + mmap the returned /proc path."""
    from hbfcommon import ctl
    with h.client() as c:
        rep = c.call("Attach", workload_pid=os.getpid(), abi_version=ctl.HBF_CTL_ABI_VERSION)
    return rep, ctl.map_region(rep.ctl_path)
