"""The compiled twins of generated content and page checksums (hbfd/capacity/kernels.py) against their numpy
definitions, bit for bit: many seeds and pages (edges of the 32-bit seed and the 2^55 page range included), the
fused pass, the service's fills and a whole stream's checksum with HBFD_ACCEL off and on. Any divergence (a wrong
shift or constant, a seed not masked to 32 bits, a word order) fails here."""
from __future__ import annotations

import numpy as np
import pytest

from hbfcommon import ctl
from hbfcommon.capacity import page_checksums, span_checksum
from hbfd import accel
from hbfd.capacity import kernels
from hbfd.capacity.backing import GeneratedStore, generated_pages
from hbfd.capacity.device import CapacityDevice
from hbfd.capacity.prefetch import NextPages
from hbfd.capacity.service import CapacityService

needs_numba = pytest.mark.skipif(accel._numba()[0] is None, reason="numba (the accel extra) is not installed")

SEEDS = [0, 1, 7, 20261204, 0x7FFFFFFF, 0xFFFFFFFF, (1 << 32) + 5, -3]


def _pages(rng) -> np.ndarray:
    return np.concatenate([np.arange(0, 8), [(1 << 23) - 1, 1 << 23, (1 << 32) - 1, 1 << 32, (1 << 55) - 1],
                           rng.integers(0, 1 << 55, 40), rng.integers(0, 1 << 20, 20)]).astype(np.uint64)


@needs_numba
def test_twins_equal_the_numpy_definitions_bit_for_bit(monkeypatch):
    monkeypatch.setenv("HBFD_ACCEL", "on")
    assert kernels.compiled()
    rng = np.random.default_rng(16)
    for seed in SEEDS:
        p = _pages(rng)
        ref = generated_pages(seed, p)
        ref_sums = page_checksums(p, ref)
        d, s = kernels.generated_with_checksums(seed, p)
        assert np.array_equal(d, ref), seed
        assert np.array_equal(s, ref_sums), seed
        assert np.array_equal(kernels.generated_pages(seed, p), ref), seed
        assert kernels.generated_checksum_sum(seed, p) == int(ref_sums.sum(dtype=np.uint64))
        out = np.zeros_like(ref)
        d2, _ = kernels.generated_with_checksums(seed, p, out)
        assert d2 is out and np.array_equal(out, ref)
        # the fill job: the pages straight into frames (a permutation of a larger memory), checksums, read back
        mem = rng.integers(0, 256, (len(p) + 9, 4096), dtype=np.uint8)
        before = mem.copy()
        frames = rng.permutation(len(mem))[:len(p)]
        sums, bad = kernels.fill_generated(seed, p, mem, frames, np.empty(512, np.uint64), True)
        assert bad == -1 and np.array_equal(sums, ref_sums), seed
        assert np.array_equal(mem[frames], ref), seed
        untouched = np.setdiff1d(np.arange(len(mem)), frames)
        assert np.array_equal(mem[untouched], before[untouched]), seed
        assert GeneratedStore(seed, 1 << 56).fill_frames(p.astype(np.int64), mem, frames, np.empty(512, np.uint64),
                                                        False)[1] == -1
    # checksums of arbitrary bytes (not generated): random pages, one bit flipped, one page in another's place
    data = rng.integers(0, 256, (64, 4096), dtype=np.uint8)
    p = rng.integers(0, 1 << 40, 64).astype(np.uint64)
    assert np.array_equal(kernels.page_checksums(p, data), page_checksums(p, data))
    data[3, 1001] ^= 0x10
    assert np.array_equal(kernels.page_checksums(p, data), page_checksums(p, data))
    assert kernels.span_checksum(p[::-1], data) == span_checksum(p[::-1], data)
    assert kernels.page_checksums(p[:0], data[:0]).shape == (0,)


@needs_numba
def test_the_compiled_copy_equals_numpys(monkeypatch):
    """FrameMemory.write_many's compiled copy (kernels.copy_rows) writes exactly numpy's ``mem[frames] = data``,
    touches no other frame, and refuses a frame outside the memory (the loop checks no bounds itself)."""
    from hbfd.capacity.frames import FrameMemory
    monkeypatch.setenv("HBFD_ACCEL", "on")
    rng = np.random.default_rng(3)
    ref = rng.integers(0, 256, (40, 4096), dtype=np.uint8)
    got = ref.copy()
    frames = rng.permutation(40)[:17]
    data = rng.integers(0, 256, (17, 4096), dtype=np.uint8)
    kernels.copy_rows(got, frames, data)
    ref[frames] = data
    assert np.array_equal(got, ref)
    kernels.copy_rows(got, frames[::2], data[::2][:, :])       # a strided selection of rows
    assert np.array_equal(got, ref)
    m = FrameMemory(40, got)
    m.write_many(frames[:3], data[5:8])
    ref[frames[:3]] = data[5:8]
    assert np.array_equal(got, ref)
    for bad in ([40], [-1]):
        with pytest.raises(IndexError):
            kernels.copy_rows(got, np.array(bad), data[:1])
        with pytest.raises(IndexError):
            kernels.fill_generated(1, np.array([3]), got, np.array(bad), np.empty(512, np.uint64), True)
    assert np.array_equal(got, ref)


@needs_numba
@pytest.mark.parametrize("workers", [1, 3])
def test_fill_threads_serve_what_one_thread_serves(monkeypatch, workers):
    """The chunked fill on several threads (jobs of 5 pages) gives the same bytes, records, checksums and modeled
    time as one thread in one job, compiled and not."""
    out = {}
    for mode in ("off", "on"):
        monkeypatch.setenv("HBFD_ACCEL", mode)
        out[mode] = _stream(32, NextPages(4), True, workers=workers, chunk=5)
    monkeypatch.setenv("HBFD_ACCEL", "on")
    one = _stream(32, NextPages(4), True, workers=1, chunk=64)
    assert out["off"][0] == out["off"][1]
    assert out["on"] == out["off"] == one


@needs_numba
def test_the_compiled_prefetch_split_equals_the_lookup(monkeypatch):
    """FramePool.split_asked compiled (a dense table read in place) and in numpy (lookup_many): the same
    unmapped indices, and touching the frames it returns sets the same referenced bits."""
    from hbfcommon import capacity as cap
    from hbfd.capacity.frames import FramePool
    for trial in range(20):
        pools = {}
        for mode in ("off", "on"):
            monkeypatch.setenv("HBFD_ACCEL", mode)
            table = np.zeros(300, cap.PTE_DTYPE)
            table["frame"] = cap.HBF_CAP_NO_FRAME
            pool = FramePool(64)
            pool.add_range(1, 300, table)
            r = np.random.default_rng(trial)
            pages = r.permutation(300)[:64]
            table["frame"][pages] = np.arange(64)
            pool.frames["referenced"][:] = r.integers(0, 2, 64)
            asked = r.integers(-5, 310, 500).astype(np.int64)
            touch, nr = pool.split_asked(1, asked)
            pool.frames["referenced"][touch] = 1
            pools[mode] = (nr, pool.frames["referenced"].copy())
        assert np.array_equal(pools["on"][0], pools["off"][0])
        assert np.array_equal(pools["on"][1], pools["off"][1])
        assert len(pools["on"][0]) and (pools["off"][1] == 1).sum() > 32


def test_off_runs_the_definitions(monkeypatch):
    monkeypatch.setenv("HBFD_ACCEL", "off")
    assert not kernels.compiled()
    p = np.arange(5, 9, dtype=np.uint64)
    d, s = kernels.generated_with_checksums(3, p)
    assert np.array_equal(d, generated_pages(3, p)) and np.array_equal(s, page_checksums(p, d))
    with pytest.raises(ValueError):
        kernels.generated_with_checksums(3, p, np.zeros((3, 4096), np.uint8))


def _stream(width: int, policy, batched: bool = True, workers: int = 2, chunk: int | None = None) -> tuple:
    from hbfd.media import MediaGeometry
    geom = MediaGeometry(channels=2, dies_per_channel=1, planes_per_die=2, blocks_per_plane=64, pages_per_block=64,
                         channel_bytes_per_s=4_000_000_000, t_read_ns=4000, t_prog_ns=200_000, t_erase_ns=2_000_000)
    pages = 600
    store = GeneratedStore(seed=99, pages=pages)
    svc = CapacityService(geom, 64, policy, workers=workers, batched=batched)
    if chunk is not None:
        svc.CHUNK = chunk
    svc.add_range(1, pages, 0, ctl.HBF_PERM_READ, store)
    out = CapacityDevice(svc).run_wide(1, np.arange(pages), width=width, gap_ns=1000, checksum=True)
    c = svc.report()["counters"]
    return (out["checksum"], store.span_checksum(0, pages, chunk_pages=97), c["modeled_ns"], c["fills"],
            c["evictions"], svc.pool.frames.tobytes(), svc.pool.memory.data.tobytes())


@needs_numba
@pytest.mark.parametrize("width,batched", [(1, True), (32, True), (32, False)])
def test_a_stream_serves_the_same_bytes_checksums_and_modeled_time_off_and_on(monkeypatch, width, batched):
    monkeypatch.setenv("HBFD_ACCEL", "off")
    off = _stream(width, NextPages(4), batched)
    monkeypatch.setenv("HBFD_ACCEL", "on")
    on = _stream(width, NextPages(4), batched)
    assert off[0] == off[1]                            # served bytes = the CPU reference (from the seed)
    assert on == off                                   # checksums, modeled time, frame records and bytes


def test_warm_reaches_every_twin(monkeypatch, caplog):
    """The service warms its twins at start (kernels.warm -> hbfd.accel.warm): every twin compiled, no warning."""
    pytest.importorskip("numba")
    monkeypatch.setenv("HBFD_ACCEL", "on")
    caplog.set_level("DEBUG", logger="hbfd.accel")
    kernels.warm()
    twins = (kernels._generate_checksum_loop, kernels._checksum_loop, kernels._clock_select_loop,
             kernels._rows_differ_loop, kernels._copy_rows_loop, kernels._prefetch_split_loop,
             kernels._fill_generated_loop)
    assert all(t.is_compiled() for t in twins)
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text
