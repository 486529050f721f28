"""The batched write-back (CapacityService._write_back_many: a scan's dirty victims and the flush's dirty frames
written as runs of consecutive pages, one write and one read-back per run): the same stored bytes, frames,
counters and modeled times as one page at a time, with far fewer writes on a streaming read-modify-write; and a
run that fails part way ends the run with nothing lost (the pages not known written stay dirty in their frames,
salvaged at close)."""
from __future__ import annotations

import numpy as np
import pytest

from hbfcommon import ctl
from hbfd.capacity.backing import BackingStoreError, SparseFileStore, runs
from hbfd.capacity.device import CapacityDevice
from hbfd.capacity.frames import DIRTY, PAGE, VALID
from hbfd.capacity.service import CapacityFailure, CapacityService

RW = ctl.HBF_PERM_READ | ctl.HBF_PERM_WRITE


class CountingFile(SparseFileStore):
    """A real sparse file counting its writes; ``fail_at``: a write covering that page writes the pages before it
    and raises (a short write), ``corrupt_at``: that page, once written, reads back with one byte changed."""

    fail_at = -1
    corrupt_at = -1

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.writes = []

    def write_page(self, page, data):
        self.writes.append((page, 1))
        return super().write_page(page, data)

    def write_pages(self, first, data):
        n = len(data)
        self.writes.append((first, n))
        if first <= self.fail_at < first + n:
            k = self.fail_at - first
            if k:
                super().write_pages(first, data[:k])
            raise BackingStoreError(f"short write at page {self.fail_at}: No space left on device", errno=28,
                                    written_pages=k)
        return super().write_pages(first, data)

    def read_pages(self, first, n):
        out = super().read_pages(first, n)
        if first <= self.corrupt_at < first + n and any(q <= self.corrupt_at < q + k for q, k in self.writes):
            out[self.corrupt_at - first, 7] ^= 1            # once written, it reads back changed
        return out


def _stream(geom, tmp_path, tag, batched, pages=64, frames=16, width=8, passes=2, **store_kw):
    """``passes`` read-modify-write passes over every page (8 lanes a round, one per page): a page's word 0
    gets + (page + 1) * (pass + 1). Returns (service, store, the expected bytes, the failure if one)."""
    store = CountingFile(tmp_path / f"{tag}.bin", pages)
    for k, v in store_kw.items():
        setattr(store, k, v)
    svc = CapacityService(geom, frames, batched=batched)
    svc.add_range(1, pages, 0, RW, store)
    dev = CapacityDevice(svc)
    want = np.zeros((pages, PAGE // 8), np.uint64)
    stream = np.arange(pages)

    def touch(memory, fr, lanes):
        w = memory.data.view(np.uint64)
        p = stream[lanes]
        add = (p.astype(np.uint64) + np.uint64(1)) * np.uint64(touch.k + 1)
        w[fr, 0] += add
        want[p, 0] += add
    err = None
    now = 0
    try:
        for k in range(passes):
            touch.k = k
            now = dev.run_wide(1, stream, width=width, gap_ns=1000, t0_ns=now, op=ctl.HBF_OP_STORE,
                               touch=touch)["end_ns"]
    except CapacityFailure as e:
        err = e
    return svc, store, want, err


def test_runs_of_consecutive_pages():
    assert runs(np.array([], np.int64)).shape == (0, 2)
    assert runs(np.array([5, 6, 7, 9, 3, 4, 4])).tolist() == [[0, 3], [3, 4], [4, 6], [6, 7]]


def test_batched_write_back_equals_one_page_at_a_time_with_runs(geom, tmp_path):
    a, sa, wa, ea = _stream(geom, tmp_path, "a", True)
    b, sb, wb, eb = _stream(geom, tmp_path, "b", False)
    assert ea is None and eb is None
    fa, fb = a.pool.frames, b.pool.frames
    for k in fa.dtype.names:
        assert np.array_equal(fa[k], fb[k]), k
    assert np.array_equal(a.pool.memory.data, b.pool.memory.data)
    na = {k: v for k, v in a.n.items() if k not in ("service_ns", "wall_ns", "overhead_ns")}
    assert na == {k: v for k, v in b.n.items() if k not in ("service_ns", "wall_ns", "overhead_ns")}
    assert a.n["writebacks"] == 64 + 48 and a.n["modeled_ns"] == b.n["modeled_ns"] > 0
    # the scans' victims are runs of 8 consecutive pages: one write each (the reference: one per page)
    assert len(sa.writes) * 8 == a.n["writebacks"] and all(n == 8 for _p, n in sa.writes)
    assert len(sb.writes) == b.n["writebacks"]
    a.flush(), b.flush()
    assert a.n["writebacks"] == b.n["writebacks"] == 128
    got = sa.read_pages(0, 64)
    assert np.array_equal(got, sb.read_pages(0, 64))
    assert np.array_equal(got.view(np.uint64), wa) and np.array_equal(wa, wb)


@pytest.mark.parametrize("what", ["short write", "read back"])
def test_a_run_failing_part_way_loses_nothing(geom, tmp_path, what):
    """The second scan's victims are the run [8, 16) (the first's [0, 8) was written); its page 10 fails (a short
    write after pages 8 and 9, or page 10 reading back other bytes): the run ends with IO_ERROR /
    CHECKSUM_ERROR, pages 0-9 written back and evicted, page 10 and every later victim still mapped and dirty;
    close salvages them: file + salvage = every byte the lanes wrote."""
    kw = {"fail_at": 10} if what == "short write" else {"corrupt_at": 10}
    svc, store, want, err = _stream(geom, tmp_path, "c", True, **kw)
    assert err is not None
    assert svc.failure[0] == (ctl.HBF_ST_IO_ERROR if what == "short write" else ctl.HBF_ST_CHECKSUM_ERROR)
    assert svc.n["writebacks"] == 10
    assert all(svc.pool.lookup(1, p) is None for p in range(10))
    for p in range(10, 16):                                # not known written: mapped, dirty
        f = svc.pool.lookup(1, p)
        assert f is not None and svc.pool.frames["dirty"][f] == 1
    rep = svc.close(salvage_path=tmp_path / "salvage.npz")
    assert rep["salvaged_pages"] >= 6
    z = np.load(tmp_path / "salvage.npz")
    have = np.fromfile(tmp_path / "c.bin", np.uint64).reshape(64, PAGE // 8).copy()
    for p, d in zip(z["pages"].tolist(), z["data"]):
        have[p] = d.view(np.uint64)
    assert np.array_equal(have, want)                      # every byte the lanes wrote: in the file or salvaged
    with pytest.raises(CapacityFailure):
        svc.check()


def test_a_flush_failing_part_way_loses_nothing(geom, tmp_path):
    """The flush (unregister) writes the 16 dirty frames (pages 48-63 after one pass) as runs; page 52 fails
    (a short write after 48-51): IO_ERROR, pages 48-51 written and their frames free, 52-63 still mapped and
    dirty (cancelled, not half evicted), salvaged at close: file + salvage = every byte."""
    svc, store, want, err = _stream(geom, tmp_path, "f", True, passes=1)
    assert err is None
    store.fail_at = 52
    assert svc.flush() == 4
    assert svc.failure[0] == ctl.HBF_ST_IO_ERROR
    assert all(svc.pool.lookup(1, p) is None for p in range(52))
    for p in range(52, 64):
        f = svc.pool.lookup(1, p)
        assert f is not None and svc.pool.frames["dirty"][f] == 1 and svc.pool.frames["state"][f] in (VALID, DIRTY)
    assert len(svc.pool._free) == 4                     # the written frames, freed
    rep = svc.close(salvage_path=tmp_path / "salvage.npz")
    assert rep["salvaged_pages"] == 12
    z = np.load(tmp_path / "salvage.npz")
    have = np.fromfile(tmp_path / "f.bin", np.uint64).reshape(64, PAGE // 8).copy()
    for p, d in zip(z["pages"].tolist(), z["data"]):
        have[p] = d.view(np.uint64)
    assert np.array_equal(have, want)


def test_a_flush_passes_frames_in_use(geom, tmp_path):
    """A dirty frame the device holds pinned is not flushed: it stays mapped, dirty and as it was (state,
    generation); once unpinned the next flush writes it."""
    svc, store, want, err = _stream(geom, tmp_path, "g", True, passes=1)
    f = svc.pool.lookup(1, 60)
    before = svc.pool.frames[f].copy()
    assert svc.pool.device_pin(1, 60, store=True) is not None
    assert svc.flush() == 15
    assert svc.pool.lookup(1, 60) == f
    after = svc.pool.frames[f]
    for k in ("state", "generation", "dirty", "logical_page"):
        assert after[k] == before[k], k
    svc.pool.device_unpin(f)
    assert svc.flush() == 1 and svc.pool.lookup(1, 60) is None
    got = np.fromfile(tmp_path / "g.bin", np.uint64).reshape(64, PAGE // 8)
    assert np.array_equal(got, want)
