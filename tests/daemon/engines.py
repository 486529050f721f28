"""Engines for daemon lifecycle tests (loaded by hbfd through HBFD_ENGINE=engines:<factory>)."""
from __future__ import annotations

import os
import threading
import time

import numpy as np

from hbfd.contracts import COMPLETION_BATCH_DTYPE, FixedLatencyEngine


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


class _Deferring(FixedLatencyEngine):
    """Decides nothing at submit; completes everything on a collect after a quiet scan (no submit
    since the previous collect), as an engine that waits for later arrivals does."""
    name = "deferring-test"

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self._fresh = False

    def submit(self, batch):
        super().submit(batch)
        self._fresh = True

    def collect(self):
        if self._fresh:
            self._fresh = False
            return np.zeros(0, COMPLETION_BATCH_DTYPE)
        return super().collect()


def deferring(profile):
    return _Deferring.from_profile(profile)


class _LacksCollect:
    """Not a ServiceEngine (no collect), nor a ThermalService: hbfd refuses it at start, naming what is missing."""
    name = "lacking-test"

    def submit(self, batch): ...
    def advance(self, now_ns): ...
    def stats(self): return {}


def lacking_collect(profile):
    return _LacksCollect()
