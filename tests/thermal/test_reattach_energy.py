"""A second attach to the same hbfd publishes its device counters from zero into the same control region (the
runtime's Session._publish writes its own totals at every sync). hbfd's media energy is a run quantity: it must
count both sessions' bytes and never go backwards (before the fix, the drop of the device totals at the second
session's first sync was booked as negative energy)."""
from __future__ import annotations

import json
import os
import time

import pytest

from hbfcommon import ctl
from hbfcommon.profile import PROFILE_DIR
from hbfd.runner import start_daemon

E_BYTE = 8.4e-11          # ocp-sg1's j_per_byte (the paper's E = 5 W t + 8.4e-11 J/B)
IDLE_W = 5.0


def _publish(m: ctl.CtlMap, nbytes: int) -> None:
    """What runtime_cuda.session.Session._publish writes at a sync: the session's totals per op."""
    cnt = m.ctl.counters
    o = cnt.device[ctl.HBF_OP_LOAD]
    o.requests, o.bytes = nbytes // 4096, nbytes
    cnt.device_sync_seq += 1


def _dynamic_j(cl) -> float:
    s = json.loads(cl.call("GetSummary").summary_json)
    return s["services"]["thermal"]["media_energy_j"] - IDLE_W * s["daemon"]["uptime_ns"] / 1e9


def test_second_session_counters_add_to_the_run_energy(tmp_path):
    h = start_daemon(PROFILE_DIR / "ocp-sg1.json", workdir=tmp_path,
                     env={"HBFD_ENGINE": "fixed", "HBFD_THERMAL": "auto", "HBFD_REFRESH": "none"}, timeout_s=60.0)
    try:
        with h.client() as cl:
            maps = []
            for _ in range(2):
                rep = cl.call("Attach", workload_pid=os.getpid(), abi_version=ctl.HBF_CTL_ABI_VERSION)
                maps.append(ctl.map_region(rep.ctl_path))
            first, second = 1 << 33, 1 << 31        # 0.72 J / 0.18 J; the second session's totals are below
            time.sleep(0.2)
            e0 = _dynamic_j(cl)                     # idle from uptime: off by the start-up before the first tick
            _publish(maps[0], first)
            time.sleep(0.3)
            e1 = _dynamic_j(cl) - e0
            assert e1 == pytest.approx(E_BYTE * first, abs=0.1)
            _publish(maps[1], 0)                    # the second session's first sync: its counters start at zero
            time.sleep(0.1)
            _publish(maps[1], second)
            time.sleep(0.3)
            e2 = _dynamic_j(cl) - e0
        for m in maps:
            m.close()
        assert h.stop() == 0
    finally:
        h.kill()
    assert e2 >= e1 - 1e-6                           # never backwards
    assert e2 == pytest.approx(E_BYTE * (first + second), abs=0.1)
