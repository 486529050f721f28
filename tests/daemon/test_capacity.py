"""One capacity: what ranges may claim (RangeTable), what the summary reports and what the media model
serves are the same number, the usable capacity after over-provisioning (Profile.capacity_bytes).

Before: the range table took the raw capacity (256 GiB for nominal) while the media model served
238 GiB, so a 250 GiB range registered and a read at +245 GiB returned IO_ERROR."""
from __future__ import annotations

import numpy as np
import pytest

from hbfcommon import ctl
from hbfcommon.errors import ErrorCode, HbfError
from hbfcommon.profile import PROFILE_DIR, load_profile
from hbfd import contracts, services
from hbfd.hostring import RingDriver
from hbfd.media import MediaGeometry
from hbfd.ranges import PAGE, RangeTable
from hbfd_harness import attach, start_hbfd

PROFILES = sorted(p.stem for p in PROFILE_DIR.glob("*.json") if p.name != "profile.schema.json")
BASE = 0x7F00_0000_0000
T, R = ctl.HBF_MODE_TIMING, ctl.HBF_PERM_READ


@pytest.mark.parametrize("name", PROFILES)
def test_one_capacity_definition(name):
    p = load_profile(name)
    g = MediaGeometry.from_profile(p)
    assert p.capacity_bytes == g.capacity_bytes == p.logical_pages * PAGE
    assert p.logical_pages == g.logical_pages
    assert p.geometry.raw_bytes == p.geometry.raw_pages * PAGE == g.blocks * g.pages_per_block * PAGE
    if p.media.over_provisioning > 0:
        assert p.capacity_bytes < p.geometry.raw_bytes
    s = p.summary_section()
    assert s["capacity_bytes"] == p.capacity_bytes and s["raw_bytes"] == p.geometry.raw_bytes


def _read(engine, media_address: int, nbytes: int) -> int:
    b = np.zeros(1, contracts.REQUEST_BATCH_DTYPE)
    b["arrival_ns"], b["media_address"], b["bytes"], b["op"] = 1000, media_address, nbytes, ctl.HBF_OP_LOAD
    engine.submit(b)
    engine.advance(1000)
    out = engine.collect()
    if not len(out):
        out = engine.collect()          # the quiet-scan collect decides what the engine deferred
    assert len(out) == 1
    return int(out["status"][0])


@pytest.mark.parametrize("name", PROFILES)
def test_a_range_up_to_the_capacity_is_served_to_its_last_byte(name):
    p = load_profile(name)
    cap = p.capacity_bytes
    t = RangeTable(p.capacity_bytes)
    r = t.register(BASE, cap, T, R)
    lo, hi = r.media_extent
    assert (lo, hi) == (0, cap)
    eng = services.build_engine(p, "auto")
    last = r.media_offset + (r.end - 1 - r.base)
    assert _read(eng, last, 1) == ctl.HBF_ST_READY                   # the last byte of the range
    assert _read(eng, last - 63, 64) == ctl.HBF_ST_READY
    assert _read(eng, cap, 1) == ctl.HBF_ST_IO_ERROR                  # the model's edge is the same edge
    with pytest.raises(HbfError) as ei:                               # the table is full to the byte
        t.register(BASE + cap + PAGE, 1, T, R)
    assert ei.value.code == ErrorCode.RANGE_TABLE_FULL
    with pytest.raises(HbfError) as ei:                               # one byte more never registers
        RangeTable(p.capacity_bytes).register(BASE, cap + 1, T, R)
    assert ei.value.code == ErrorCode.RANGE_TABLE_FULL
    assert ei.value.fields["capacity_bytes"] == cap


def test_the_daemon_serves_a_capacity_range_to_its_last_byte(tmp_path):
    """Through hbfd (media model on the ring): RegisterRange of the whole capacity, a read of its last
    byte is READY; one byte more is refused at registration."""
    p = load_profile("nominal")
    cap = p.capacity_bytes
    with start_hbfd(tmp_path, env={"HBFD_ENGINE": "auto"}) as h:
        att, m = attach(h)
        try:
            with h.client() as c:
                with pytest.raises(HbfError) as ei:
                    c.call("RegisterRange", range=c.pb.Range(base=BASE, length=cap + 1, mode=T, perms=R))
                assert ei.value.code == ErrorCode.RANGE_TABLE_FULL
                rep = c.call("RegisterRange", range=c.pb.Range(base=BASE, length=cap, mode=T, perms=R))
                r = rep.range
                assert r.length == cap and r.media_offset == 0
                assert c.call("Status").engine == "media"
            drv = RingDriver(m, att.ring_key)
            for off, nbytes in ((cap - 1, 1), (cap - 128, 128), (245 << 30, 64) if cap > (245 << 30) + 64
                                else (cap // 2, 64)):
                t = drv.issue(arrival_ns=10, address=BASE + off, media_address=r.media_offset + off,
                              nbytes=nbytes, op=ctl.HBF_OP_LOAD, range_id=r.range_id)
                assert drv.wait(t, timeout_s=10).status == ctl.HBF_ST_READY, (off, nbytes)
        finally:
            m.close()
        assert h.stop() == 0
    s = h.read_summary()
    assert s["profile"]["capacity_bytes"] == cap and s["profile"]["raw_bytes"] == p.geometry.raw_bytes
    assert s["counters"]["reference_requests_by_state"]["READY"] == 3
