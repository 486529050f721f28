"""hbfd publishes the thermal snapshot's validity horizon (HBFD_THERMAL_HORIZON=1) from a GPU clock echo it read,
in the GPU's clock; off (the default) it publishes none. The real daemon, attached like a workload; the "GPU" is
this test writing hbf_activity.clock_echo_ns as the device helpers do at every snapshot read."""
from __future__ import annotations

import time

import pytest

from hbfcommon import ctl
from hbfd_harness import attach, start_hbfd

NEVER = 1 << 36                 # hbf_thc.h HBF_THC_HORIZON_MAX_NS
G = 10**15                      # a GPU %globaltimer value


def _until(m) -> int:
    th = m.ctl.thermal
    return ctl.seqlock_read(th, lambda: int(th.valid_until_gpu_ns))


@pytest.mark.parametrize("on", [False, True])
def test_the_daemon_publishes_a_horizon_unless_turned_off(tmp_path, on):
    env = {} if on else {"HBFD_THERMAL_HORIZON": "0"}        # on by default
    with start_hbfd(tmp_path, env=env) as h:
        _, m = attach(h)
        try:
            assert _until(m) == 0                          # no clock reference yet: no horizon
            t_write = time.monotonic_ns()
            m.ctl.activity.clock_echo_ns = G              # the device read the snapshot at GPU time G
            # on: the next control ticks (10 ms) publish one; off: 0.5 s of ticks publish none
            deadline = time.monotonic() + (10.0 if on else 0.5)
            u = 0
            while time.monotonic() < deadline and u == 0:
                time.sleep(0.02)
                u = _until(m)
            elapsed = time.monotonic_ns() - t_write
        finally:
            m.close()
        assert h.shutdown() == 0
        s = h.read_summary()
    hz = s["services"]["thermal"]["horizon"]
    if not on:
        assert u == 0 and hz["enabled"] is False and hz["with_horizon"] == 0
        return
    # thermal none + refresh none: nothing can change, the longest horizon; in the GPU's clock from G: never
    # beyond what the GPU clock can have reached by the publication + the horizon
    assert G + NEVER - 10**9 < u <= G + elapsed + NEVER
    assert hz["enabled"] is True and hz["with_horizon"] >= 1 and hz["max_ahead_ns"] == NEVER
    assert hz["held_changes"] == 0
