"""The batched miss service (``CapacityService(batched=True)``, the default: a scan's misses served in arrays) gives
exactly what serving them one item at a time gives (``batched=False``, the reference): the same results, frames,
frame records, page tables, CLOCK hand, write-backs, stored bytes, checksums and modeled times, on random miss
streams with evictions, dirty pages, pins held across scans, duplicates, resident pages and prefetches."""
from __future__ import annotations

import numpy as np
import pytest

from hbfcommon import capacity as cap, ctl
from hbfcommon.capacity import page_checksums
from hbfd import accel
from hbfd.capacity.backing import GeneratedStore, SparseFileStore
from hbfd.capacity.device import CapacityDevice
from hbfd.capacity.frames import FramePool
from hbfd.capacity.prefetch import NextPages, NoPrefetch, Stride
from hbfd.capacity.service import CapacityService

RW = ctl.HBF_PERM_READ | ctl.HBF_PERM_WRITE
TIMES = ("service_ns", "wall_ns", "overhead_ns")      # host wall time: differs run to run by nature


def _rig(geom, tmp_path, tag, frames, policy, batched, max_prefetch=64):
    # the batched service fills on 3 threads in jobs of 3 pages (CHUNK): several jobs per scan, run at once
    svc = CapacityService(geom, frames, policy, batched=batched, max_prefetch=max_prefetch,
                          workers=3 if batched else 1)
    svc.CHUNK = 3
    # the batched service's page tables are dense views (as in hbfd's capacity region: the compiled prefetch
    # split reads them in place), the reference's are materialized in chunks
    tables = [None, None]
    if batched:
        tables = [np.zeros(n, cap.PTE_DTYPE) for n in (256, 512)]
        for t in tables:
            t["frame"] = cap.HBF_CAP_NO_FRAME
    svc.add_range(1, 256, 0, RW, SparseFileStore(tmp_path / f"{tag}.bin", 256), table=tables[0])
    svc.add_range(2, 512, 1 << 20, ctl.HBF_PERM_READ, GeneratedStore(5, 512), table=tables[1])
    return svc


def _same(a: CapacityService, b: CapacityService) -> None:
    fa, fb = a.pool.frames, b.pool.frames
    for k in fa.dtype.names:
        assert np.array_equal(fa[k], fb[k]), f"frame records differ in {k}"
    for rid in a.pool.tables:
        assert np.array_equal(a.pool.tables[rid].dense(), b.pool.tables[rid].dense()), f"page table {rid}"
    assert np.array_equal(a.pool.memory.data, b.pool.memory.data)
    assert a.pool.hand == b.pool.hand
    assert sorted(a.pool._free) == sorted(b.pool._free)
    na = {k: v for k, v in a.n.items() if k not in TIMES}
    nb = {k: v for k, v in b.n.items() if k not in TIMES}
    assert na == nb
    assert a.engine.ftl.host_programs == b.engine.ftl.host_programs
    assert a.failure == b.failure


@pytest.mark.parametrize("policy,max_prefetch", [(NoPrefetch, 64), (lambda: NextPages(4), 64), (lambda: Stride(3), 64),
                                                 (lambda: NextPages(6), 4),    # events cut at max_prefetch
                                                 (lambda: NextPages(4), 4)])   # events that reach it, uncut
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_batched_equals_one_at_a_time(geom, tmp_path, policy, max_prefetch, seed):
    rng = np.random.default_rng(seed)
    frames = 48
    A = _rig(geom, tmp_path, "a", frames, policy(), True, max_prefetch)
    B = _rig(geom, tmp_path, "b", frames, policy(), False, max_prefetch)
    held: list[tuple[int, int]] = []               # (range, page) pinned across scans in both
    now = 0
    evictions = writebacks = 0
    for step in range(60):
        now += int(rng.integers(500, 20_000))
        # one ring scan: misses on both ranges (duplicates and resident pages among them), loads and stores
        k = int(rng.integers(1, 40))
        rid = rng.choice([1, 2], k) if step % 3 else np.full(k, 2)   # scans of one range: on_miss_many
        page = np.where(rid == 1, rng.integers(0, 256, k), rng.integers(0, 512, k))
        dup = rng.random(k) < 0.2                  # duplicates in the scan
        rid[dup], page[dup] = rid[0], page[0]
        op = np.where((rid == 1) & (rng.random(k) < 0.4), ctl.HBF_OP_STORE, ctl.HBF_OP_LOAD)
        arr = now + rng.integers(0, 3000, k)
        req = [(int(a), int(b), int(c), int(d)) for a, b, c, d in zip(rid, page, op, arr)]
        ra, rb = A.miss_many(req), B.miss_many(req)
        assert [(x.status, x.frame, x.modeled_ns, x.ready_ns) for x in ra] == \
            [(x.status, x.frame, x.modeled_ns, x.ready_ns) for x in rb]
        _same(A, B)
        # the device: stores into resident pages of range 1 (dirty frames), hits (CLOCK bits, markers: hints)
        st = rng.bit_generator.state
        for s in (A, B):
            rng.bit_generator.state = st
            dev = CapacityDevice(s)
            for _ in range(int(rng.integers(4, 24))):
                r, p = (1, int(rng.integers(0, 256))) if rng.random() < 0.7 else (2, int(rng.integers(0, 512)))
                got = s.pool.device_pin(r, p, store=(r == 1))
                if got is None:
                    continue
                f, _ready, took = got
                if r == 1:
                    s.pool.memory.data[f, int(rng.integers(0, 4096))] = int(rng.integers(0, 256))
                if took:
                    s.hint(r, p, now)
                dev.unpin(f)
        _same(A, B)
        # pins held across scans (never evicted), released later
        for s in (A, B):
            for r, p in held:
                s.pool.device_unpin(s.pool.lookup(r, p))
        held = []
        for r, p in {(int(a), int(b)) for a, b, c, d in req}:
            if A.pool.lookup(r, p) is not None and rng.random() < 0.3:
                held.append((r, p))
        for s in (A, B):
            for r, p in held:
                assert s.pool.device_pin(r, p) is not None
        _same(A, B)
        evictions, writebacks = A.n["evictions"], A.n["writebacks"]
    assert evictions > 100 and writebacks > 10        # the streams did evict, and dirty frames were written back
    for s in (A, B):
        for r, p in held:
            s.pool.device_unpin(s.pool.lookup(r, p))
    A.flush(), B.flush()
    _same(A, B)
    da = A.ranges[1].store.read_pages(0, 256)
    assert np.array_equal(da, B.ranges[1].store.read_pages(0, 256))
    assert int(page_checksums(np.arange(256, dtype=np.uint64), da).sum(dtype=np.uint64)) == \
        int(page_checksums(np.arange(256, dtype=np.uint64), B.ranges[1].store.read_pages(0, 256)).sum(dtype=np.uint64))


@pytest.mark.parametrize("accel_mode", ["off", pytest.param("on", marks=pytest.mark.skipif(
    accel._numba()[0] is None, reason="numba (the accel extra) is not installed"))])
def test_take_frames_equals_one_frame_at_a_time(monkeypatch, accel_mode):
    """FramePool.take_frames(k) against k calls of take_free-else-begin_eviction, on random pools (resident,
    referenced, pinned, free and filling frames) and batch sizes, including more than can be taken; the numpy
    sweep (its window of the walk as small as 1 frame, and the whole walk) and its compiled twin (HBFD_ACCEL
    off / on)."""
    monkeypatch.setenv("HBFD_ACCEL", accel_mode)
    rng = np.random.default_rng(7)
    for trial in range(300):
        n = int(rng.integers(1, 40))
        pools = [FramePool(n), FramePool(n)]
        if trial % 2:                                  # the numpy sweep's first window smaller than the pool
            pools[0].SWEEP_WINDOW = int(rng.integers(1, 8))
        state = rng.choice([0, 1, 2, 4], n, p=[0.15, 0.05, 0.7, 0.1])
        ref = rng.integers(0, 2, n)
        pins = np.where(rng.random(n) < 0.2, rng.integers(1, 3, n), 0)
        hand = int(rng.integers(0, n))
        free = [int(f) for f in np.flatnonzero(state == 0)[::-1]]
        for p in pools:
            p.add_range(1, 4 * n)
            fr = p.frames
            fr["state"] = np.where(state == 4, 2, state)   # 4: stands for a valid frame made dirty
            fr["dirty"] = state == 4
            fr["referenced"], fr["pins"] = ref, pins
            fr["range_id"] = 1
            fr["logical_page"] = np.arange(n) * 3
            fr["generation"] = rng.integers(0, 5, n) if p is pools[0] else pools[0].frames["generation"]
            for f in np.flatnonzero((state == 2) | (state == 4)).tolist():
                p.tables[1][f * 3] = (f, int(fr["generation"][f]))
            p.hand = hand
            p._free = list(free)
        k = int(rng.integers(1, n + 5))
        frames, ev = pools[0].take_frames(k)
        one, evs = [], []
        for _ in range(k):
            f = pools[1].take_free()
            if f is None:
                e = pools[1].begin_eviction()
                if e is None:
                    continue
                evs.append(e)
                f = e.frame
            one.append(f)
            pools[1].frames["state"][f] = 1             # FILLING: taken for this batch
        for f in frames[:len(frames) - len(ev)].tolist():
            pools[0].frames["state"][f] = 1
        pools[0].frames["state"][ev.frame] = 1
        assert frames.tolist() == one
        assert [ev.one(j) for j in range(len(ev))] == evs
        for key in pools[0].frames.dtype.names:
            assert np.array_equal(pools[0].frames[key], pools[1].frames[key]), key
        assert pools[0].hand == pools[1].hand
        assert np.array_equal(pools[0].tables[1].dense(), pools[1].tables[1].dense())


def test_pinning_every_lane_at_once_equals_lane_by_lane(geom):
    """FramePool.device_pin_many(every_marker=True) (the ring stand-in: all lanes at once, the hints posted
    after) gives each lane what device_pin lane by lane gives: frame, ready_ns, whether it took the marker (the
    first lane of each marked frame), and the same pins, referenced bits and markers."""
    rng = np.random.default_rng(4)
    svcs = []
    req = [(2, int(p), ctl.HBF_OP_LOAD, 1000 + 10 * i) for i, p in enumerate(rng.integers(0, 200, 10))]
    for _ in range(2):
        s = CapacityService(geom, 64, NextPages(4))
        s.add_range(2, 512, 0, ctl.HBF_PERM_READ, GeneratedStore(5, 512))
        s.miss_many(req)
        svcs.append(s)
    a, b = svcs
    assert (a.pool.frames["marker"] != 0).sum() > 5
    for _ in range(5):
        lanes = rng.integers(0, 220, 48)
        f, ready, n, takers = a.pool.device_pin_many(2, lanes, every_marker=True)
        one = [b.pool.device_pin(2, int(p)) for p in lanes]
        assert n == len(lanes)
        assert f.tolist() == [-1 if x is None else x[0] for x in one]
        assert ready.tolist() == [0 if x is None else x[1] for x in one]
        assert takers.tolist() == [i for i, x in enumerate(one) if x is not None and x[2]]
        assert np.array_equal(a.pool.frames, b.pool.frames)
        a.pool.device_unpin_many(f[f >= 0])
        for x in one:
            if x is not None:
                b.pool.device_unpin(x[0])
        assert np.array_equal(a.pool.frames, b.pool.frames)
