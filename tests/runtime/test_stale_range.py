"""A range whose device allocation was freed without unregistering it (runtime_cuda.session.stale_ranges): its
accesses would be charged to whatever memory is there now, silently (the TMA increment bench did it: a freed,
still registered source turned the next box's output stores into HBF stores). The session compares, at
synchronize and counters(), each range's allocation (cuMemGetAddressRange at registration) with the driver's
answer now: stale ranges are reported to hbfd once, logged, listed in counters(), and synchronize raises
RANGE_STALE once for each. The driver is stood in here (no GPU): only its address_range answer is used."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import runtime_cuda
from hbfcommon import ctl as C
from hbfcommon.errors import ErrorCode, RangeError
from hbfd.runner import start_daemon
from runtime_cuda import devstate as D
from runtime_cuda.session import stale_ranges

ROOT = Path(__file__).resolve().parents[2]
A, B = 0x7A00_0000_0000, 0x7B00_0000_0000


def _ranges():
    return [D.DevRange(A + 4096, 8192, 0, 1, 0, 7), D.DevRange(B, 4096, 8192, 2, 0, 7),
            D.DevRange(B + (1 << 20), 4096, 12288, 3, 0, 7)]


def test_stale_ranges_by_the_allocation_now():
    allocs = {1: (A, 1 << 20), 2: (B, 4096)}                    # range 3: no allocation known (not checked)
    live = {A + 4096: (A, 1 << 20), B: (B, 4096)}
    assert stale_ranges(_ranges(), allocs, live.get) == []
    gone = stale_ranges(_ranges(), allocs, {A + 4096: (A, 1 << 20)}.get)            # B freed
    assert [e["range_id"] for e in gone] == [2] and gone[0]["allocation_now"] is None
    moved = stale_ranges(_ranges(), allocs, {A + 4096: (A + 4096, 65536), B: (B, 4096)}.get)  # freed, reallocated
    assert [e["range_id"] for e in moved] == [1]
    assert moved[0]["allocation_at_registration"] == [hex(A), 1 << 20] and moved[0]["allocation_now"] == [hex(A + 4096), 65536]


class _Driver:
    """The one driver call the check makes, answered from a table the test edits."""

    def __init__(self):
        self.live: dict[int, tuple[int, int]] = {}

    def address_range(self, ptr):
        for base, size in self.live.values():
            if base <= ptr < base + size:
                return base, size
        return None


@pytest.fixture
def sess(tmp_path):
    with start_daemon("nominal", workdir=tmp_path, env={"HBFD_THERMAL": "none", "HBFD_ENGINE": "fixed"},
                      pythonpath=[ROOT], timeout_s=90.0) as d:
        s = runtime_cuda.attach(socket=str(d.socket), cuda=False)
        try:
            yield s, d
        finally:
            s.close()


def test_a_freed_range_is_reported_once_and_raised_once(sess, tmp_path):
    s, d = sess
    drv = _Driver()
    ra = s.register_timing_range(A, 1 << 20, C.HBF_PERM_READ)
    rb = s.register_timing_range(B, 4096, C.HBF_PERM_READ)
    # what _register records with CUDA (cuda=False here: no driver to ask at registration)
    drv.live = {1: (A, 1 << 20), 2: (B, 4096)}
    s._range_allocs = {int(ra.range_id): (A, 1 << 20), int(rb.range_id): (B, 4096)}
    s.use_cuda, s._cu = True, drv
    try:
        s._check_live_ranges(raise_new=True)                    # both live: nothing
        assert s.stale_ranges == []
        del drv.live[2]                                         # B freed without unregister
        s._check_live_ranges(raise_new=False)                   # counters(): reported, not raised
        assert [e["range_id"] for e in s.stale_ranges] == [int(rb.range_id)]
        with pytest.raises(RangeError) as ei:                   # synchronize(): raised once
            s._check_live_ranges(raise_new=True)
        assert ei.value.code == ErrorCode.RANGE_STALE and hex(B) in str(ei.value)
        s._check_live_ranges(raise_new=True)                    # not again
        assert len(s.stale_ranges) == 1
        s.unregister(rb)                                        # unregistering it ends the check for it
        assert int(rb.range_id) not in s._range_allocs
        del drv.live[1]                                         # A freed, its range still registered
        with pytest.raises(RangeError):
            s._check_live_ranges(raise_new=True)
        s.unregister(ra)
    finally:
        s.use_cuda = False
    summ = json.loads(s.client.call("GetSummary").summary_json)
    reports = [r for r in summ["reports"] if r["kind"] == "stale_range"]
    assert [r["data"]["range_id"] for r in reports] == [int(rb.range_id), int(ra.range_id)]
