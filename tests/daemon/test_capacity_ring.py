"""Capacity requests through hbfd's ring (docs/design.md §3.6, "Miss path"): a real hbfd, capacity ranges
registered with a spec (frames, store, policy), the workload's side mapping each range's capacity region and
posting misses and hints on the ring exactly as a rewritten GPU access would (hbfd.capacity.device.RingHost
under the CPU stand-in CapacityDevice). Hits never reach hbfd; the bytes served are checked against the store."""
from __future__ import annotations

import numpy as np
import pytest

from hbfcommon import ctl
from hbfcommon.capacity import HBF_CAP_PAGE_BYTES as PAGE, HBF_REQ_CAP_HINT, HBF_REQ_CAP_MISS, map_cap_region
from hbfcommon.errors import HbfError
from hbfd.capacity.backing import GeneratedStore
from hbfd.capacity.device import CapacityDevice, RingHost
from hbfd.hostring import RingDriver
from hbfd_harness import attach, start_hbfd

CAP, R, RW = ctl.HBF_MODE_CAPACITY, ctl.HBF_PERM_READ, ctl.HBF_PERM_READ | ctl.HBF_PERM_WRITE
BASE = 0x7E00_0000_0000


def _register(c, base, pages, perms, **spec):
    rep = c.call("RegisterRange", range=c.pb.Range(base=base, length=pages * PAGE, mode=CAP, perms=perms),
                 capacity=c.pb.CapacitySpec(**spec))
    assert rep.capacity_path.startswith("/proc/")
    return rep.range, rep.capacity_path


@pytest.fixture
def hbfd(tmp_path):
    with start_hbfd(tmp_path) as h:
        att, m = attach(h)
        try:
            yield h, RingDriver(m, att.ring_key), tmp_path
        finally:
            m.close()
        h.stop()


def test_generated_range_streams_through_the_ring_with_the_stores_checksum(hbfd):
    """300 pages through 64 frames (evictions, the default prefetch), as one warp and as 32 lanes: every page's
    bytes equal the generated store's (checksum from the seed alone); hits stay in the process."""
    h, drv, _ = hbfd
    with h.client() as c:
        r, path = _register(c, BASE, 300, R, n_frames=64, store="generated", seed=7, policy="next:8")
    host = RingHost(drv, path, BASE)
    dev = CapacityDevice(host)
    ref = GeneratedStore(7, 300)
    out = dev.run(r.range_id, range(300), gap_ns=2000, checksum=True)
    assert out["checksum"] == ref.span_checksum(0, 300)
    assert out["demand_waits"] >= 1 and out["no_wait"] + out["late_prefetch_waits"] >= 200   # prefetch served most
    assert host.n["misses"] == out["demand_waits"] + out["retries"]                          # only misses went out
    assert host.n["hints"] >= 1                                                               # prefetched frames used
    wide = CapacityDevice(host).run_wide(r.range_id, np.arange(300)[::-1], width=32, gap_ns=1000, checksum=True)
    assert wide["checksum"] == ref.span_checksum(0, 300)
    with h.client() as c:
        c.call("UnregisterRange", range_id=r.range_id)
    h.stop()
    cap = h.read_summary()["capacity"]
    rep = [x for x in cap["ranges"] if x["range_id"] == r.range_id][0]
    assert rep["status"] == "READY" and rep["counters"]["evictions"] > 0
    assert rep["counters"]["prefetch_used"] == host.n["hints"]
    assert cap["dispatch"]["unknown_range"] == 0 and cap["dispatch"]["bad_page"] == 0


def test_read_write_range_keeps_every_byte_under_eviction(hbfd):
    """Stores into 200 pages through 40 frames: dirty frames are written back with their exact bytes; after
    UnregisterRange the sparse file holds exactly what was stored."""
    h, drv, tmp = hbfd
    f = tmp / "rw.bin"
    with h.client() as c:
        r, path = _register(c, BASE, 200, RW, n_frames=40, store="sparse", path=str(f), policy="none")
    dev = CapacityDevice(RingHost(drv, path, BASE))
    rng = np.random.default_rng(3)
    want = np.zeros((200, PAGE), np.uint8)
    now = 0
    for _ in range(600):
        p, off = int(rng.integers(200)), int(rng.integers(0, PAGE - 16)) // 8 * 8
        b = rng.integers(0, 256, 16, dtype=np.uint8)
        want[p, off:off + 16] = b
        now += 1000 + dev.store(r.range_id, p, off, b, now).wait_ns
    for p in range(0, 200, 7):                          # reads see the stores (through eviction and refill)
        data, a = dev.load(r.range_id, p, now)
        now += 1000 + a.wait_ns
        assert np.array_equal(data, want[p]), p
    with h.client() as c:
        c.call("UnregisterRange", range_id=r.range_id)      # every dirty frame written back first
    got = np.fromfile(f, np.uint8).reshape(200, PAGE)
    assert np.array_equal(got, want)


def test_a_bad_request_ends_only_its_own_range(hbfd):
    """A miss for a page outside its range ends that range's service (UNSUPPORTED, and every later request of
    it); a request naming no served range is answered UNSUPPORTED; another range keeps being served."""
    h, drv, tmp = hbfd
    with h.client() as c:
        a, pa = _register(c, BASE, 64, R, n_frames=32, store="generated", seed=1, policy="none")
        b, pb_ = _register(c, BASE + (1 << 30), 64, RW, n_frames=32, store="sparse", path=str(tmp / "b.bin"),
                           policy="none")
    ha, hb = RingHost(drv, pa, BASE), RingHost(drv, pb_, BASE + (1 << 30))
    assert ha.miss(a.range_id, 3, ctl.HBF_OP_LOAD, 100).status == ctl.HBF_ST_READY
    # b: a media address past its extent (a bad page)
    t = drv.issue(arrival_ns=200, address=BASE + (1 << 30) + 64 * PAGE, media_address=hb.media_offset + 64 * PAGE,
                  nbytes=PAGE, op=ctl.HBF_OP_LOAD, range_id=b.range_id, flags=HBF_REQ_CAP_MISS)
    assert drv.wait(t).status == ctl.HBF_ST_UNSUPPORTED
    assert hb.miss(b.range_id, 0, ctl.HBF_OP_LOAD, 300).status == ctl.HBF_ST_UNSUPPORTED   # b's run has ended
    # a request for no served range: answered, nothing else changes
    t = drv.issue(arrival_ns=400, address=0x1000, media_address=0, nbytes=PAGE, op=ctl.HBF_OP_LOAD,
                  range_id=999, flags=HBF_REQ_CAP_MISS)
    assert drv.wait(t).status == ctl.HBF_ST_UNSUPPORTED
    # a is still served
    dev = CapacityDevice(ha)
    out = dev.run(a.range_id, range(64), gap_ns=100, checksum=True)
    assert out["checksum"] == GeneratedStore(1, 64).span_checksum(0, 64)
    h.stop()
    cap = h.read_summary()["capacity"]
    by = {x["range_id"]: x for x in cap["ranges"]}
    assert by[a.range_id]["status"] == "READY"
    assert by[b.range_id]["status"] == "UNSUPPORTED" and "not one page" in by[b.range_id]["failure"]
    assert cap["dispatch"]["unknown_range"] == 1 and cap["dispatch"]["bad_page"] == 1


def test_a_not_permitted_op_ends_the_range_and_hints_free_their_slots(hbfd):
    """More hints than ring slots go through without anyone waiting for them (hbfd consumes their completions);
    then a store miss on a read-only range ends that range's run with UNSUPPORTED."""
    h, drv, _ = hbfd
    with h.client() as c:
        r, path = _register(c, BASE, 16, R, n_frames=32, store="generated", seed=2, policy="none")
    host = RingHost(drv, path, BASE)
    assert host.miss(r.range_id, 0, ctl.HBF_OP_LOAD, 10).status == ctl.HBF_ST_READY
    for k in range(ctl.HBF_RING_SLOTS + 8):           # a slot reused before its hint was consumed would hang
        drv.issue(arrival_ns=20 + k, address=BASE, media_address=host.media_offset, nbytes=PAGE,
                  op=ctl.HBF_OP_LOAD, range_id=r.range_id, flags=HBF_REQ_CAP_HINT, timeout_s=10)
    assert host.miss(r.range_id, 1, ctl.HBF_OP_LOAD, 10_000).status == ctl.HBF_ST_READY
    assert host.miss(r.range_id, 2, ctl.HBF_OP_STORE, 20_000).status == ctl.HBF_ST_UNSUPPORTED
    assert host.miss(r.range_id, 3, ctl.HBF_OP_LOAD, 30_000).status == ctl.HBF_ST_UNSUPPORTED


def test_capacity_spec_and_region_are_checked(hbfd):
    h, _drv, _ = hbfd
    with h.client() as c:
        for spec, field in ((dict(n_frames=0, store="generated"), "n_frames"),
                            (dict(n_frames=32, store="tape"), "store"),
                            (dict(n_frames=32, store="sparse"), "path"),
                            (dict(n_frames=32, store="generated", policy="moe:8"), "policy")):
            with pytest.raises(HbfError) as ei:
                _register(c, BASE, 8, R, **spec)
            assert field in str(ei.value) or ei.value.fields.get("field") == field, ei.value
        with pytest.raises(HbfError):                  # a generated (read-only) store backs only a read range
            _register(c, BASE, 8, RW, n_frames=32, store="generated")
        assert len(c.call("ListRanges").ranges) == 0   # nothing half-registered
        r, path = _register(c, BASE, 8, R, n_frames=32, store="generated")
    reg = map_cap_region(path)
    assert (reg.range_id, reg.pages, reg.n_frames, reg.perms) == (r.range_id, 8, 32, R)
    assert (reg.table["frame"] == 0xFFFFFFFF).all()
