"""Registration honesty: until the device half is GPU-verified, a capacity range registered through the GPU
runtime is refused at registration unless HBF_CAPACITY_DEVICE=1 opts in (UNSUPPORTED, a message saying why),
never accepted and then refused at the first access; nothing reaches hbfd's range table. The host service still
serves hbfd's capacity ranges. (The opted-in path: tests/runtime/test_capacity_runtime.py.)"""
from __future__ import annotations

from pathlib import Path

import pytest

import runtime_cuda
from hbfcommon import ctl as C
from hbfcommon.errors import ErrorCode, HbfError
from hbfcommon.profile import load_profile
from hbfd.capacity.backing import GeneratedStore
from hbfd.capacity.device import CapacityDevice
from hbfd.capacity.service import CapacityService
from hbfd.media import MediaGeometry
from hbfd.ranges import RangeTable
from hbfd.runner import start_daemon

ROOT = Path(__file__).resolve().parents[2]
BASE = 0x7D0000000000


@pytest.fixture(scope="module")
def sess(tmp_path_factory):
    with start_daemon("nominal", workdir=tmp_path_factory.mktemp("hbfd"), env={"HBFD_THERMAL": "none"},
                      pythonpath=[ROOT], timeout_s=90.0) as d:
        s = runtime_cuda.attach(socket=str(d.socket), cuda=False)
        yield s
        s.close()


def test_runtime_refuses_a_capacity_range_at_registration(sess, monkeypatch):
    monkeypatch.delenv("HBF_CAPACITY_DEVICE", raising=False)
    for call in (lambda: sess.register_capacity_range(BASE, 1 << 30),
                 lambda: sess._register(BASE, 1 << 30, C.HBF_MODE_CAPACITY, C.HBF_PERM_READ, 4096, 0, "")):
        with pytest.raises(HbfError) as ei:
            call()
        assert ei.value.code == ErrorCode.UNSUPPORTED
        assert "device path" in str(ei.value) and "NOT GPU-verified" in str(ei.value)
    assert sess.ranges == [] and sess.state.n_ranges == 0
    rep = sess.client.call("ListRanges", sess.client.pb.ListRangesRequest())
    assert len(rep.ranges) == 0                          # nothing reached hbfd
    r = sess.register_timing_range(BASE, 4096, C.HBF_PERM_READ)   # timing ranges are unaffected
    sess.unregister(r.range_id)


def test_the_host_service_serves_an_hbfd_capacity_range():
    p = load_profile("nominal")
    t = RangeTable(p.capacity_bytes)
    t.register(BASE, 1 << 20, C.HBF_MODE_TIMING, C.HBF_PERM_READ)
    r = t.register(BASE + (1 << 30), 64 * 4096 + 100, C.HBF_MODE_CAPACITY, C.HBF_PERM_READ)
    svc = CapacityService(MediaGeometry.from_profile(p), 8)
    cr = svc.add_hbfd_range(r, GeneratedStore(5, 65))
    assert cr.pages == 65 and cr.media_offset == r.media_extent[0] and cr.media_offset % 4096 == 0
    out = CapacityDevice(svc).run(r.range_id, range(65), gap_ns=1000, checksum=True)
    assert out["checksum"] == GeneratedStore(5, 65).span_checksum(0, 65)
