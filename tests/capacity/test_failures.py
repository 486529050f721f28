"""Every failure ends the run with its terminal status, and nothing written is lost: a backing-store I/O error,
a failed copy, a checksum mismatch, an access the range does not permit."""
from __future__ import annotations

import numpy as np
import pytest

from hbfcommon import ctl
from hbfcommon.errors import ConfigError
from hbfcommon.status import RequestStatus
from hbfd.capacity.backing import BackingStoreError, GeneratedStore, SparseFileStore
from hbfd.capacity.device import CapacityDevice
from hbfd.capacity.frames import CopyFailed, FrameMemory
from hbfd.capacity.service import CapacityFailure, CapacityService

RW = ctl.HBF_PERM_READ | ctl.HBF_PERM_WRITE


class FailingFile(SparseFileStore):
    """A real sparse file whose I/O starts failing on command (the disk going away)."""

    fail_reads = False
    fail_writes = False

    def read_pages(self, first, n):
        if self.fail_reads:
            raise BackingStoreError(f"read of page {first} failed: Input/output error", errno=5)
        return super().read_pages(first, n)

    def write_page(self, page, data):
        if self.fail_writes:
            raise BackingStoreError(f"write of page {page} failed: No space left on device", errno=28)
        return super().write_page(page, data)

    def write_pages(self, first, data):                # the batched write-back's write (a run of pages)
        if self.fail_writes:
            raise BackingStoreError(f"write of pages from {first} failed: No space left on device", errno=28,
                                    written_pages=0)
        return super().write_pages(first, data)


class FlakyFrames(FrameMemory):
    """Frame memory whose copies fail or corrupt on command (a DMA engine error, a bad page of HBM)."""

    fail = False
    corrupt = False

    def write_many(self, frames, data):                # the copy primitive (one per batch)
        if self.fail:
            raise CopyFailed("cuMemcpyHtoD failed: CUDA_ERROR_ILLEGAL_ADDRESS")
        super().write_many(frames, data)
        if self.corrupt:
            self.data[frames[-1], 100] ^= 0x40


def _rig(geom, tmp_path, frames=2, pages=16, memory=None):
    store = FailingFile(tmp_path / "b.bin", pages)
    svc = CapacityService(geom, frames, frame_memory=memory or FrameMemory(frames))
    svc.add_range(1, pages, 0, RW, store)
    return svc, store, CapacityDevice(svc)


def test_read_error_is_terminal_for_every_later_request(geom, tmp_path):
    svc, store, dev = _rig(geom, tmp_path)
    dev.load(1, 0, 10)
    store.fail_reads = True
    with pytest.raises(CapacityFailure) as ei:
        dev.load(1, 1, 1000)
    assert ei.value.fields["status"] == "IO_ERROR" and "Input/output error" in str(ei.value)
    store.fail_reads = False                            # the disk came back: the run has still ended
    assert svc.miss(1, 2, ctl.HBF_OP_LOAD, 2000).status == RequestStatus.IO_ERROR
    with pytest.raises(CapacityFailure):
        svc.check()
    assert svc.report()["status"] == "IO_ERROR"
    assert int(svc.pool.frames["pins"].sum()) == 0


def test_a_failed_write_back_keeps_the_bytes_and_close_salvages_them(geom, tmp_path):
    svc, store, dev = _rig(geom, tmp_path, frames=2)
    a = np.full(4096, 0xAB, np.uint8)
    b = np.full(4096, 0xCD, np.uint8)
    dev.store(1, 0, 0, a, 10)
    dev.store(1, 1, 0, b, 20_000)
    store.fail_writes = True
    with pytest.raises(CapacityFailure) as ei:          # page 2 needs a frame: the dirty victim cannot be written
        dev.load(1, 2, 40_000)
    assert ei.value.fields["status"] == "IO_ERROR"
    assert svc.pool.lookup(1, 0) is not None and svc.pool.lookup(1, 1) is not None   # still mapped, still dirty
    assert len(svc.dirty_pages()) == 2
    rep = svc.close(salvage_path=tmp_path / "salvage.npz")
    assert rep["salvaged_pages"] == 2 and rep["status"] == "IO_ERROR"
    z = np.load(tmp_path / "salvage.npz")
    got = {int(p): d for p, d in zip(z["pages"], z["data"])}
    assert np.array_equal(got[0], a) and np.array_equal(got[1], b)


def test_close_without_a_salvage_path_refuses_to_drop_dirty_bytes(geom, tmp_path):
    svc, store, dev = _rig(geom, tmp_path)
    dev.store(1, 0, 0, b"xyz", 10)
    store.fail_writes = True
    with pytest.raises(CapacityFailure) as ei:
        svc.close()
    assert "could not be written back" in str(ei.value)


def test_copy_failure_is_copy_error(geom, tmp_path):
    mem = FlakyFrames(2)
    svc, _, dev = _rig(geom, tmp_path, memory=mem)
    mem.fail = True
    with pytest.raises(CapacityFailure) as ei:
        dev.load(1, 3, 10)
    assert ei.value.fields["status"] == "COPY_ERROR"
    assert svc.pool.lookup(1, 3) is None                # nothing published


def test_checksum_mismatch_is_checksum_error(geom, tmp_path):
    mem = FlakyFrames(2)
    svc, _, dev = _rig(geom, tmp_path, memory=mem)
    dev.load(1, 0, 10)
    mem.corrupt = True
    with pytest.raises(CapacityFailure) as ei:
        dev.load(1, 1, 100_000)
    assert ei.value.fields["status"] == "CHECKSUM_ERROR"
    assert svc.pool.lookup(1, 1) is None


def test_an_access_the_range_does_not_permit_ends_the_run(geom):
    svc = CapacityService(geom, 4)
    svc.add_range(2, 8, 0, ctl.HBF_PERM_READ, GeneratedStore(1, 8))
    dev = CapacityDevice(svc)
    with pytest.raises(CapacityFailure) as ei:
        dev.store(2, 0, 0, b"a", 10)
    assert ei.value.fields["status"] == "UNSUPPORTED"
    with pytest.raises(ConfigError):                    # a read-only store never backs a writable range
        svc.add_range(3, 8, 1 << 20, RW, GeneratedStore(1, 8))
    with pytest.raises(ConfigError):                    # a store smaller than its range
        svc.add_range(4, 8, 1 << 21, ctl.HBF_PERM_READ, GeneratedStore(1, 4))


def test_bad_options_are_clear_errors(geom):
    for kw in ({"n_frames": 0}, {"n_frames": 4, "max_prefetch": -1}, {"n_frames": 4, "verify": "yes"}):
        n = kw.pop("n_frames")
        with pytest.raises(ConfigError) as ei:
            CapacityService(geom, n, **kw)
        assert "capacity:" in str(ei.value)


@pytest.mark.parametrize("what", ["fail", "corrupt"])
def test_a_copy_failure_on_a_fill_thread_ends_the_run(geom, tmp_path, what):
    """A batch filled by several threads in jobs of 2 pages: a copy that fails (COPY_ERROR) or a frame that reads
    back other bytes (CHECKSUM_ERROR) in any job ends the run; nothing of the batch is published and its frames
    go back to the free list."""
    mem = FlakyFrames(16)
    store = GeneratedStore(3, 64)
    svc = CapacityService(geom, 16, frame_memory=mem, workers=3)
    svc.CHUNK = 2
    svc.add_range(1, 64, 0, ctl.HBF_PERM_READ, store)
    ok = svc.miss_many([(1, p, ctl.HBF_OP_LOAD, 10) for p in range(6)])      # 3 jobs, every one fine
    assert all(x.status == RequestStatus.READY for x in ok)
    setattr(mem, what, True)
    got = svc.miss_many([(1, p, ctl.HBF_OP_LOAD, 1000) for p in range(6, 13)])
    want = "COPY_ERROR" if what == "fail" else "CHECKSUM_ERROR"
    assert {RequestStatus(x.status).name for x in got} == {want}
    assert svc.report()["status"] == want
    assert all(svc.pool.lookup(1, p) is None for p in range(6, 13))
    assert all(svc.pool.lookup(1, p) is not None for p in range(6))
    assert len(svc.pool._free) == 10
