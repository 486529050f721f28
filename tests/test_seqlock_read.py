"""hbfcommon.ctl.seqlock_read: a host writer preempted inside its seqlock (odd) for longer than the reader's
spins is waited for (up to wait_s), a stuck one is an error naming what it tried, and wait_s=0 (the GPU-written
activity section's readers) never waits."""
from __future__ import annotations

import threading
import time

import pytest

from hbfcommon import ctl
from hbfcommon.errors import ControlRegionError


def test_a_writer_held_inside_the_seqlock_longer_than_the_spins_is_waited_for():
    th = ctl.hbf_thermal_snapshot()
    th.seq = 1                                        # a write in progress (odd)
    th.hbf_max_millic = -1

    def writer():
        time.sleep(0.05)                              # preempted ~50 ms between its odd and even store
        th.hbf_max_millic = 42_000
        th.seq = 2
    t = threading.Thread(target=writer)
    t.start()
    try:
        assert ctl.seqlock_read(th, lambda: th.hbf_max_millic, tries=100) == 42_000
    finally:
        t.join()


def test_a_stuck_writer_is_an_error_after_its_wait():
    th = ctl.hbf_thermal_snapshot()
    th.seq = 3
    t0 = time.monotonic()
    with pytest.raises(ControlRegionError) as e:
        ctl.seqlock_read(th, lambda: th.hbf_max_millic, tries=10, wait_s=0.05)
    assert time.monotonic() - t0 >= 0.05
    assert e.value.fields == {"tries": 10, "waited_s": 0.05}


def test_no_wait_gives_up_after_the_spins():
    th = ctl.hbf_thermal_snapshot()
    th.seq = 5
    t0 = time.monotonic()
    with pytest.raises(ControlRegionError):
        ctl.seqlock_read(th, lambda: th.hbf_max_millic, tries=10, wait_s=0.0)
    assert time.monotonic() - t0 < 0.05
