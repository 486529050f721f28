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
    # checksums of arbitrary bytes (not generated): random pages, one bit flipped, one page in another's place
    data = rng.integers(0, 256, (64, 4096), dtype=np.uint8)
    p = rng.integers(0, 1 << 40, 64).astype(np.uint64)
    assert np.array_equal(kernels.page_checksums(p, data), page_checksums(p, data))
    data[3, 1001] ^= 0x10
    assert np.array_equal(kernels.page_checksums(p, data), page_checksums(p, data))
    assert kernels.span_checksum(p[::-1], data) == span_checksum(p[::-1], data)
    assert kernels.page_checksums(p[:0], data[:0]).shape == (0,)


def test_off_runs_the_definitions(monkeypatch):
    monkeypatch.setenv("HBFD_ACCEL", "off")
    assert not kernels.compiled()
    p = np.arange(5, 9, dtype=np.uint64)
    d, s = kernels.generated_with_checksums(3, p)
    assert np.array_equal(d, generated_pages(3, p)) and np.array_equal(s, page_checksums(p, d))
    with pytest.raises(ValueError):
        kernels.generated_with_checksums(3, p, np.zeros((3, 4096), np.uint8))


def _stream(width: int, policy, batched: bool = True) -> tuple:
    from hbfd.media import MediaGeometry
    geom = MediaGeometry(channels=2, dies_per_channel=1, planes_per_die=2, blocks_per_plane=64, pages_per_block=64,
                         channel_bytes_per_s=4_000_000_000, t_read_ns=4000, t_prog_ns=200_000, t_erase_ns=2_000_000)
    pages = 600
    store = GeneratedStore(seed=99, pages=pages)
    svc = CapacityService(geom, 64, policy, workers=2, batched=batched)
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
             kernels._rows_differ_loop)
    assert all(t.is_compiled() for t in twins)
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text
