"""Engines for daemon lifecycle tests (loaded by hbfd through HBFD_ENGINE=engines:<factory>)."""
from __future__ import annotations

import os
import threading
import time

from hbfd.services import FixedLatencyEngine


def slow(profile):
    """Takes 0.5 s to build; records (monotonic ns) when it finished in $HBFD_TEST_MARKER."""
    time.sleep(0.5)
    e = FixedLatencyEngine.from_profile(profile)
    with open(os.environ["HBFD_TEST_MARKER"], "w") as f:
        f.write(str(time.monotonic_ns()))
    return e


class _Blocking(FixedLatencyEngine):
    name = "blocking-test"

    def submit(self, batch):
        threading.Event().wait()     # never serves anything


def blocking(profile):
    return _Blocking.from_profile(profile)


class _Failing(FixedLatencyEngine):
    name = "failing-test"

    def submit(self, batch):
        raise RuntimeError("media model exploded")


def failing(profile):
    return _Failing.from_profile(profile)
