"""The page table and the frames, driven as the GPU would (hbfd/capacity/device.py): hits stay on the device,
misses reach the host service, pinned frames are never evicted, dirty frames are written back with their exact
bytes and out of place on the media."""
from __future__ import annotations

import numpy as np
import pytest

from hbfcommon import ctl
from hbfcommon.capacity import HBF_CAP_NO_FRAME, HBF_FR_EVICTING, HBF_FR_VALID
from hbfcommon.profile import load_profile
from hbfcommon.status import RequestStatus
from hbfd.capacity.backing import GeneratedStore, SparseFileStore, generated_pages
from hbfd.capacity.device import CapacityDevice
from hbfd.capacity.service import PENDING, READY, CapacityFailure, CapacityService
from hbfd.media import MediaGeometry

RW = ctl.HBF_PERM_READ | ctl.HBF_PERM_WRITE


def _svc(geom, tmp_path, frames=4, pages=64):
    svc = CapacityService(geom, frames)
    store = SparseFileStore(tmp_path / "back.bin", pages)
    svc.add_range(1, pages, 0, RW, store)
    return svc, store


def test_hit_stays_on_the_device_and_a_miss_publishes(geom, tmp_path):
    svc, _ = _svc(geom, tmp_path)
    dev = CapacityDevice(svc)
    a = dev.pin(1, 5, ctl.HBF_OP_LOAD, 1000)
    dev.unpin(a.frame)
    assert a.kind == "miss" and svc.n["misses"] == 1
    # the cold miss on an idle device waits exactly one page read (t_cmd + tR + 4 KiB over the channel)
    assert a.wait_ns == geom.single_read_ns(4096)
    pte = svc.pool.tables[1][5]
    fr = svc.pool.frames[a.frame]
    assert int(pte["frame"]) == a.frame and int(pte["generation"]) == int(fr["generation"])
    assert int(fr["state"]) == HBF_FR_VALID and int(fr["logical_page"]) == 5 and int(fr["pins"]) == 0
    b = dev.pin(1, 5, ctl.HBF_OP_LOAD, 1000 + a.wait_ns)
    dev.unpin(b.frame)
    assert (b.kind, b.frame, b.wait_ns) == ("hit", a.frame, 0)
    assert svc.n["misses"] == 1                        # the hit never reached the host
    assert dev.c.as_dict()["no_wait"] == 1 and dev.c.demand_waits == 1


def test_a_stale_pte_is_a_miss(geom, tmp_path):
    svc, _ = _svc(geom, tmp_path)
    dev = CapacityDevice(svc)
    f = dev.pin(1, 3, ctl.HBF_OP_LOAD, 0).frame
    dev.unpin(f)
    pte = svc.pool.tables[1][3].copy()
    ev = svc.pool.begin_eviction_of(f)                 # the host unmaps: generation + 1
    assert ev is not None and int(svc.pool.frames[f]["state"]) == HBF_FR_EVICTING
    svc.pool.tables[1][3] = pte                        # a device that read the pte before the unmap
    assert svc.pool.device_pin(1, 3) is None           # pins, sees EVICTING / the new generation: miss
    assert int(svc.pool.frames[f]["pins"]) == 0        # and unpinned itself
    svc.pool.cancel_eviction(ev)
    assert svc.pool.device_pin(1, 3) is not None


def test_pinned_frames_are_never_evicted(geom, tmp_path):
    svc, _ = _svc(geom, tmp_path, frames=4)
    dev = CapacityDevice(svc)
    held = [dev.pin(1, p, ctl.HBF_OP_LOAD, 0) for p in range(3)]          # three accesses in progress
    for t, p in enumerate(range(3, 40)):                                   # pressure through the one free frame
        a = dev.pin(1, p, ctl.HBF_OP_LOAD, 10_000 * (t + 1))
        dev.unpin(a.frame)
        for p0, h in zip(range(3), held):
            assert svc.pool.lookup(1, p0) == h.frame                       # still mapped, same frame
    assert svc.n["evictions"] == 36
    last = dev.pin(1, 39, ctl.HBF_OP_LOAD, 10**9)                          # all four frames pinned now
    assert svc.miss(1, 50, ctl.HBF_OP_LOAD, 10**9).status == PENDING       # no frame can be taken: ask again
    assert svc.failure is None
    for h in held + [last]:
        dev.unpin(h.frame)
    assert svc.miss(1, 50, ctl.HBF_OP_LOAD, 10**9 + 1).status == READY


def test_dirty_write_back_is_exact_and_out_of_place(geom, tmp_path):
    svc, store = _svc(geom, tmp_path, frames=2)
    dev = CapacityDevice(svc)
    rng = np.random.default_rng(1)
    payload = rng.integers(0, 256, 4096, dtype=np.uint8)
    dev.store(1, 7, 0, payload, 100)
    ftl = svc.engine.ftl
    t = 1000
    for p in (8, 9, 10):                                                   # evict page 7
        t += 100_000
        dev.load(1, p, t)
    assert svc.pool.lookup(1, 7) is None and svc.n["writebacks"] == 1
    assert np.array_equal(store.read_pages(7, 1)[0], payload)              # the exact bytes, in the store
    first = ftl.lookup(7)
    assert first is not None and ftl.host_programs >= 1                    # programmed on the media
    t += 10_000_000
    dev.store(1, 7, 100, b"\x01\x02\x03", t)                               # dirty it again, evict again
    for p in (8, 9, 10):
        t += 100_000
        dev.load(1, p, t)
    t += 10_000_000
    svc.flush()
    second = ftl.lookup(7)
    assert second is not None and second != first                          # out of place: a new physical page
    want = payload.copy()
    want[100:103] = (1, 2, 3)
    assert np.array_equal(store.read_pages(7, 1)[0], want)
    data, _ = dev.load(1, 7, t + 1)                                        # and read back through a frame
    assert np.array_equal(data, want)
    ftl.check()


def test_many_warps_read_write_under_eviction_pressure_equal_a_native_run(geom, tmp_path):
    """Several warps with interleaved pins on the same and neighbouring pages, stores and loads, 6 frames
    for 48 pages: the final bytes equal a plain array's (the native run) exactly."""
    pages = 48
    svc, store = _svc(geom, tmp_path, frames=6, pages=pages)
    dev = CapacityDevice(svc)
    native = np.zeros((pages, 4096), np.uint8)
    rng = np.random.default_rng(7)
    held: dict[int, tuple[int, int]] = {}          # warp -> (page, frame) pinned
    t = 0
    for step in range(1500):
        t += 2000
        w = int(rng.integers(0, 4))
        if w in held:                              # this warp's access completes: write, unpin
            page, frame = held.pop(w)
            assert svc.pool.lookup(1, page) == frame, "a pinned frame was remapped"
            off = int(rng.integers(0, 4096 - 8))
            val = rng.integers(0, 256, 8, dtype=np.uint8)
            m = svc.pool.memory
            cur = m.read(frame)
            cur[off:off + 8] = val
            m.write(frame, cur)
            native[page, off:off + 8] = val
            dev.unpin(frame)
            continue
        page = int(rng.integers(0, 4)) if step % 3 == 0 else int(rng.integers(0, pages))   # hot and spread
        if rng.random() < 0.5 and len(held) < 3:
            a = dev.pin(1, page, ctl.HBF_OP_STORE, t)
            held[w] = (page, a.frame)
        else:
            data, a = dev.load(1, page, t)
            assert np.array_equal(data, native[page])
        t += a.wait_ns
    for page, frame in held.values():
        dev.unpin(frame)
    assert svc.n["evictions"] > 100 and svc.n["writebacks"] > 50
    svc.close()
    back = SparseFileStore(tmp_path / "back.bin", pages, create=False)
    assert np.array_equal(back.read_pages(0, pages), native)
    back.close()


def test_frames_far_fewer_than_pages_serve_generated_data_with_the_cpu_checksum(geom):
    """A generated read-only range 64x the frame pool: the bytes served through the frames sum to the
    checksum computed from the seed alone."""
    pages = 1024
    store = GeneratedStore(seed=99, pages=pages)
    svc = CapacityService(geom, 16)
    svc.add_range(3, pages, 0, ctl.HBF_PERM_READ, store)
    dev = CapacityDevice(svc)
    out = dev.run(3, np.arange(pages), gap_ns=1000, checksum=True)
    assert out["checksum"] == store.span_checksum(0, pages)
    assert svc.n["evictions"] == pages - 16 and svc.n["writebacks"] == 0
    d, _ = dev.load(3, 5, out["end_ns"] + 1)
    assert np.array_equal(d, generated_pages(99, np.array([5]))[0])


def test_pte_of_an_unmapped_page_is_no_frame(geom, tmp_path):
    svc, _ = _svc(geom, tmp_path)
    assert (svc.pool.tables[1]["frame"] == HBF_CAP_NO_FRAME).all()
    assert RequestStatus(svc.miss(1, 0, ctl.HBF_OP_LOAD, 0).status) is RequestStatus.READY


def test_many_warps_faulting_the_same_and_neighbouring_pages(geom):
    """One ring scan with 64 misses on 8 pages (8 warps each): 8 fills, one media batch, every warp answered
    with its page's frame; then a wide stream with checksums equal to the CPU's."""
    store = GeneratedStore(seed=5, pages=4096)
    svc = CapacityService(geom, 64)
    svc.add_range(1, 4096, 0, ctl.HBF_PERM_READ, store)
    reqs = [(1, 100 + (w % 8), ctl.HBF_OP_LOAD, 1000 + w) for w in range(64)]
    res = svc.miss_many(reqs)
    assert all(r.status == READY for r in res)
    assert svc.n["fills"] == 8 and svc.n["coalesced_misses"] == 56 and svc.n["media_batches"] == 1
    for (rid, page, _op, arr), r in zip(reqs, res):
        assert r.frame == svc.pool.lookup(1, page) and r.ready_ns >= arr and r.modeled_ns == r.ready_ns - arr
    dev = CapacityDevice(svc)
    out = dev.run_wide(1, np.arange(2048), width=32, gap_ns=5000, checksum=True)
    assert out["checksum"] == store.span_checksum(0, 2048)
    assert out["accesses"] == 2048 and int(svc.pool.frames["pins"].sum()) == 0


def test_lanes_release_their_pins_before_waiting(geom):
    """As many lanes in lockstep as frames: every lane is served (a lane that hit releases its pin while the
    misses wait, so the misses can take frames); nothing stays pinned; the bytes are the store's. More lanes
    than frames can never all be resident at once: a clear failure, not a hang."""
    store = GeneratedStore(seed=8, pages=512)
    pages = np.arange(480) % 300
    svc = CapacityService(geom, 16)
    svc.add_range(1, 512, 0, ctl.HBF_PERM_READ, store)
    out = CapacityDevice(svc).run_wide(1, pages, width=16, gap_ns=1000, checksum=True)
    assert out["checksum"] == sum(store.span_checksum(int(p), 1) for p in pages) % (1 << 64)
    assert out["accesses"] == 480 and int(svc.pool.frames["pins"].sum()) == 0
    svc = CapacityService(geom, 16)
    svc.add_range(1, 512, 0, ctl.HBF_PERM_READ, store)
    with pytest.raises(CapacityFailure) as ei:
        CapacityDevice(svc).run_wide(1, pages, width=48, gap_ns=1000)
    assert "more lanes than frames" in str(ei.value)
    assert int(svc.pool.frames["pins"].sum()) == 0


def test_a_110_gib_range_through_2_mib_of_frames(geom, tmp_path):
    """The paper's address-space scale (110 GiB logical, sparse): pages written at both ends through 64 frames,
    evicted, read back exactly; the file takes disk only for the pages written."""
    pages = (110 << 30) // 4096
    store = SparseFileStore(tmp_path / "cap110.bin", pages)
    g = MediaGeometry.from_profile(load_profile("ocp-sg1"))
    svc = CapacityService(g, 64)
    svc.add_range(1, pages, 0, RW, store)
    dev = CapacityDevice(svc)
    ends = [0, 1, pages - 2, pages - 1]
    for i, p in enumerate(ends):
        dev.store(1, p, 8 * i, bytes([i + 1] * 8), 1000 * (i + 1))
    dev.run(1, np.arange(pages // 2, pages // 2 + 256), gap_ns=1000, t0_ns=10_000)
    assert all(svc.pool.lookup(1, p) is None for p in ends) and svc.n["writebacks"] == 4
    for i, p in enumerate(ends):
        data, a = dev.load(1, p, 10**9 + i)
        assert a.kind == "miss" and data[8 * i:8 * i + 8].tolist() == [i + 1] * 8 and data.sum() == 8 * (i + 1)
    assert (tmp_path / "cap110.bin").stat().st_blocks * 512 < 1 << 20
