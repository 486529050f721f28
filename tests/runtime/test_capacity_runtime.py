"""The runtime's side of capacity mode on a CPU-only session (runtime_cuda/capacity.py; the CUDA calls, the VA
reservation and the host registration of the region, are NOT GPU-verified and not run here):

* with HBF_CAPACITY_DEVICE=1 a capacity range is registered with hbfd (its spec: frames, store, policy), the
  capacity region mapped, the range in the device state's range table, and its hbf_cap_range descriptor at the
  same index of the capacity table;
* the launch gate refuses a kernel hbfcc's capacity pass did not rewrite whose arguments may reach the range,
  even with allow_unmodeled; a capacity-admitted kernel passes;
* the range's misses, posted on the ring against the region the session mapped, are served (bytes equal to the
  store's); unregister writes back and releases everything; close releases what is left.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import runtime_cuda
from hbfcommon import ctl as C
from hbfcommon.capacity import HBF_CAP_PAGE_BYTES as PAGE, capacity_admitted
from hbfcommon.errors import ErrorCode, HbfError
from hbfd.capacity.backing import GeneratedStore
from hbfd.capacity.device import CapacityDevice, RingHost
from hbfd.hostring import RingDriver
from hbfd.runner import start_daemon
from runtime_cuda import capacity as CAP
from runtime_cuda.session import KernelInfo, LaunchRefused

ROOT = Path(__file__).resolve().parents[2]
BASE = 0x7C00_0000_0000


@pytest.fixture
def sess(tmp_path, monkeypatch):
    monkeypatch.setenv("HBF_CAPACITY_DEVICE", "1")
    with start_daemon("nominal", workdir=tmp_path, env={"HBFD_THERMAL": "none", "HBFD_ENGINE": "fixed"},
                      pythonpath=[ROOT], timeout_s=90.0) as d:
        s = runtime_cuda.attach(socket=str(d.socket), cuda=False)
        try:
            yield s
        finally:
            s.close()


def test_a_capacity_range_through_the_runtime(sess, tmp_path):
    t = sess.register_timing_range(BASE - (1 << 30), 1 << 20, C.HBF_PERM_READ)
    cr = sess.register_capacity_range(BASE, 100 * PAGE, n_frames=32, store="generated", seed=9, policy="next:4")
    assert cr.region.pages == 100 and cr.region.n_frames == 32
    modes = {int(sess.state.ranges[i].range_id): int(sess.state.ranges[i].mode) for i in range(sess.state.n_ranges)}
    assert modes == {t.range_id: C.HBF_MODE_TIMING, cr.range_id: C.HBF_MODE_CAPACITY}
    tab = CAP.capacity_table(sess.state.ranges, sess.state.n_ranges, sess.capacity)
    i = next(i for i in range(sess.state.n_ranges) if sess.state.ranges[i].range_id == cr.range_id)
    assert tab[i]["pages"] == 100 and tab[i]["range_id"] == cr.range_id and tab[i]["base"] == BASE
    assert tab[i]["media_offset"] == cr.region.media_offset and tab[i]["n_frames"] == 32
    assert (tab["pages"] != 0).sum() == 1                                   # the timing range has no entry
    # the misses of the range, on the ring, against the region the session mapped
    drv = RingDriver(sess.ctl, sess.ring_key)
    host = RingHost(drv, cr.region, BASE)
    out = CapacityDevice(host).run(cr.range_id, range(100), gap_ns=1000, checksum=True)
    assert out["checksum"] == GeneratedStore(9, 100).span_checksum(0, 100)
    sess.unregister(cr.range_id)
    assert cr.range_id not in sess.capacity and all(r.range_id != cr.range_id for r in sess.ranges)
    rep = sess.client.call("ListRanges", sess.client.pb.ListRangesRequest())
    assert [r.range_id for r in rep.ranges] == [t.range_id]


def test_the_gate_refuses_kernels_not_rewritten_for_capacity(sess):
    cr = sess.register_capacity_range(BASE, 16 * PAGE, n_frames=32, store="generated", seed=1)
    sess.allow_unmodeled = True                          # not even allowed-unmodeled: nothing backs the span
    plain = KernelInfo("plain", 0, 0, True, [])
    for args in ([BASE + 64], None):                     # a pointer into it; unknown arguments
        with pytest.raises(LaunchRefused) as ei:
            sess.gate("plain", plain, args)
        assert "capacity" in str(ei.value)
    sess.gate("plain", plain, [0x1000])                  # arguments that cannot reach it: fine
    rewritten = KernelInfo("cap", 0, 0, True, [], capacity_admitted=True)
    sess.gate("cap", rewritten, [BASE + 64])
    assert sess.refused_launches[-1]["capacity"] is True


def test_artifact_capacity_admission():
    art = {"modules": [{"kernels": [{"name": "a", "capacity_admitted": True}, {"name": "b"}]},
                       {"kernels": [{"name": "a", "capacity_admitted": False}, {"name": "c", "capacity_admitted": True}]}]}
    assert capacity_admitted(art) == {"a": False, "b": False, "c": True}
    nvcc = {"kernels": [{"name": "c", "admitted": True}], "modules": art["modules"][1:]}   # hbfcc's nvcc document
    assert capacity_admitted(nvcc) == {"a": False, "c": True}


def test_registration_errors(sess, tmp_path):
    with pytest.raises(HbfError) as ei:
        sess.register_capacity_range(BASE, 16 * PAGE, n_frames=0, store="generated")
    assert sess.capacity == {} and sess.ranges == []
    with pytest.raises(HbfError):                        # a CPU-only session names its span
        sess.register_capacity_range(None, 16 * PAGE, n_frames=32, store="generated")
    cr = sess.register_capacity_range(BASE, 8 * PAGE, perms=C.HBF_PERM_READ | C.HBF_PERM_WRITE, n_frames=32,
                                      store="sparse", path=str(tmp_path / "s.bin"))
    assert cr.range_id in sess.capacity
    sess.close()                                         # releases it (hbfd writes back, unregisters)
    assert sess.capacity == {}


def test_unregister_deadline_grows_with_the_dirty_frames(sess, tmp_path, monkeypatch):
    """hbfd writes a capacity range's dirty frames back inside UnregisterRange: the call's deadline is the client's
    plus CAPACITY_FLUSH_S_PER_FRAME per dirty frame (an 8 GiB read-write range ran past the 10 s default on the
    H100, 2026-12-06); a timing range keeps the client's deadline."""
    from hbfcommon.capacity import HBF_FR_DIRTY, HBF_FR_VALID
    from runtime_cuda import session as S
    t = sess.register_timing_range(BASE - (1 << 30), 1 << 20, C.HBF_PERM_READ)
    cr = sess.register_capacity_range(BASE, 100 * PAGE, C.HBF_PERM_READ | C.HBF_PERM_WRITE, n_frames=32,
                                      store="sparse", path=str(tmp_path / "b.bin"))
    seen = []
    real = sess.client.call

    def call(method, request=None, *, timeout_s=None, **kw):
        seen.append((method, timeout_s))
        return real(method, request, timeout_s=timeout_s, **kw)
    monkeypatch.setattr(sess.client, "call", call)
    fr = cr.region.frames
    assert sess._capacity_unregister_deadline(cr) == sess.client.timeout_s     # nothing dirty
    fr["state"][:5], fr["dirty"][:5] = HBF_FR_VALID, 1      # five frames the device wrote (states as hbfd keeps them)
    fr["state"][5], fr["dirty"][5] = HBF_FR_DIRTY, 1
    fr["dirty"][6] = 1                                       # a FREE frame's stale bit is not a write-back
    want = sess.client.timeout_s + 6 * S.CAPACITY_FLUSH_S_PER_FRAME
    assert sess._capacity_unregister_deadline(cr) == pytest.approx(want)
    fr["state"][:7], fr["dirty"][:7] = 0, 0                  # leave hbfd nothing to write back that was never filled
    sess.unregister(t)
    sess.unregister(cr)
    assert seen == [("UnregisterRange", None), ("UnregisterRange", sess.client.timeout_s)]
