"""The operator thermal override (hbfd/thermal/override.py) on a real hbfd: Report kind
thermal_override / hbfctl thermal-override forces the published (mode, q, admission) at the next control
tick; bad overrides are refused; Shutdown ends the run as thermal_shutdown; the summary names the
override. bench/runtime_thermal_q.py uses this path to drive q on the GPU."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from hbfcommon import ctl
from hbfcommon.errors import ErrorCode, HbfError
from hbfd.runner import DaemonProcess, start_daemon

ROOT = Path(__file__).resolve().parents[2]


def _start(tmp: Path, thermal: str) -> DaemonProcess:
    return start_daemon("nominal", workdir=tmp, pythonpath=[ROOT], timeout_s=60.0,
                        env={"HBFD_THERMAL": thermal, "HBFD_REFRESH": "none", "HBFD_THERMAL_TICK_NS": "2000000"})


def _wait_published(m, mode: int, q: int, adm: int, timeout: float = 5.0) -> None:
    th = m.ctl.thermal
    t = time.time()
    while time.time() - t < timeout:
        if (int(th.mode), int(th.q_ppm), int(th.admission_open)) == (mode, q, adm):
            return
        time.sleep(0.002)
    pytest.fail(f"not published: have {(int(th.mode), int(th.q_ppm), int(th.admission_open))}, want {(mode, q, adm)}")


def test_operator_override_drives_the_published_thermal_state(tmp_path):
    from hbfcommon.rpc import Client
    from hbfd.ctl_cli import main as hbfctl
    with _start(tmp_path, "hbfd.thermal.override:make_service") as d:
        sock = d.socket
        with Client(sock) as c:
            rep = c.call("Attach", workload_pid=os.getpid(), abi_version=ctl.HBF_CTL_ABI_VERSION)
            m = ctl.map_region(rep.ctl_path)
            try:
                _wait_published(m, ctl.HBF_TH_NORMAL, 1_000_000, 1)
                for ov, want in (({"mode": "Light", "q_ppm": 500_000}, (ctl.HBF_TH_LIGHT, 500_000, 1)),
                                 ({"mode": "Light", "q_ppm": 250_000}, (ctl.HBF_TH_LIGHT, 250_000, 1)),
                                 ({"mode": "Severe"}, (ctl.HBF_TH_SEVERE, 250_000, 0)),
                                 ({"clear": True}, (ctl.HBF_TH_NORMAL, 1_000_000, 1))):
                    c.call("Report", kind="thermal_override", json=json.dumps(ov))
                    _wait_published(m, *want)
                st = c.call("Status")
                assert st.thermal_mode == "Normal" and st.thermal_q_ppm == 1_000_000
                for bad in ({"mode": "Light"}, {"mode": "Light", "q_ppm": 0}, {"mode": "Normal", "q_ppm": 5},
                            {"mode": "Hot"}, {"mode": "Light", "q_ppm": 5, "extra": 1}, [1]):
                    with pytest.raises(HbfError) as ei:
                        c.call("Report", kind="thermal_override", json=json.dumps(bad))
                    assert ei.value.code == ErrorCode.INVALID_ARGUMENT, bad
                assert hbfctl(["thermal-override", "Light", "--q-ppm", "400000", "--socket", str(sock)]) == 0
                _wait_published(m, ctl.HBF_TH_LIGHT, 400_000, 1)
                assert hbfctl(["thermal-override", "Shutdown", "--socket", str(sock)]) == 0
                d.wait(30)
            finally:
                m.close()
        doc = d.read_summary()
        assert doc["terminal_status"] == "thermal_shutdown", doc["terminal_status"]
        th = doc["services"]["thermal"]
        assert th["service"] == "operator-override(none)" and th["mode"] == "Shutdown"
        hist = [h["override"] for h in th["operator_override"]["history"]]
        assert [h["mode"] if h else None for h in hist] == ["Light", "Light", "Severe", None, "Light", "Shutdown"]


def test_override_refused_without_the_override_service(tmp_path):
    from hbfcommon.rpc import Client
    with _start(tmp_path, "none") as d, Client(d.socket) as c:
        with pytest.raises(HbfError) as ei:
            c.call("Report", kind="thermal_override", json=json.dumps({"mode": "Light", "q_ppm": 500000}))
        assert ei.value.code == ErrorCode.INVALID_ARGUMENT and "override" in str(ei.value)
