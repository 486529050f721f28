"""Backing stores: the sparse file (sparse, exact pages, clear errors) and the generated read-only store
(content a pure function of seed and page; a span checksum from the seed alone, chunk-invariant)."""
from __future__ import annotations

import numpy as np
import pytest

from hbfcommon.capacity import page_checksums, span_checksum
from hbfcommon.errors import ConfigError
from hbfd.capacity.backing import BackingStoreError, GeneratedStore, SparseFileStore, generated_pages


def test_sparse_file_is_sparse_and_exact(tmp_path):
    pages = 1 << 18                                     # 1 GiB logical
    s = SparseFileStore(tmp_path / "b.bin", pages)
    assert (tmp_path / "b.bin").stat().st_size == pages * 4096
    assert s.allocated_bytes() < 1 << 20                # nothing written: (almost) no disk
    assert not s.read_pages(12345, 2).any()             # never-written pages read as zeros
    data = np.arange(4096, dtype=np.uint32).astype(np.uint8)
    s.write_page(pages - 1, data)
    s.flush()
    assert np.array_equal(s.read_pages(pages - 1, 1)[0], data)
    with pytest.raises(BackingStoreError):
        s.read_pages(pages, 1)
    with pytest.raises(BackingStoreError):
        s.write_page(0, data[:100])
    s.close()
    s2 = SparseFileStore(tmp_path / "b.bin", pages, create=False)      # persisted
    assert np.array_equal(s2.read_pages(pages - 1, 1)[0], data)
    s2.close()


def test_sparse_file_open_failure_is_clear(tmp_path):
    with pytest.raises(BackingStoreError) as ei:
        SparseFileStore(tmp_path / "missing" / "b.bin", 4, create=False)
    assert "cannot open the backing file" in str(ei.value)
    with pytest.raises(ConfigError):
        SparseFileStore(tmp_path / "b.bin", 0)


def test_generated_store_is_a_pure_function_of_seed_and_page():
    g = GeneratedStore(seed=3, pages=1 << 40)           # 4 PiB: far more than any disk or GPU
    a = g.read_pages((1 << 40) - 4, 4)
    assert np.array_equal(a, g.read_pages((1 << 40) - 4, 4))
    assert np.array_equal(a[2], generated_pages(3, np.array([(1 << 40) - 2]))[0])
    assert not np.array_equal(a, GeneratedStore(seed=4, pages=1 << 40).read_pages((1 << 40) - 4, 4))
    assert not np.array_equal(a[0], a[1])
    with pytest.raises(BackingStoreError):
        g.write_page(0, a[0])                           # read-only


def test_span_checksum_is_independent_of_chunking_and_position_sensitive():
    g = GeneratedStore(seed=11, pages=10_000)
    pages = np.arange(100, 1100, dtype=np.uint64)
    direct = span_checksum(pages, g.read_pages(100, 1000))
    assert g.span_checksum(100, 1000) == direct
    assert g.span_checksum(100, 1000, chunk_pages=7) == direct
    assert g.span_checksum(100, 1000, chunk_pages=128, jobs=2) == direct
    assert g.span_checksum(100, 1000, chunk_pages=61, threads=3) == direct
    halves = (g.span_checksum(100, 500) + g.span_checksum(600, 500)) % (1 << 64)
    assert halves == direct
    d = g.read_pages(100, 2)
    swapped = d[::-1].copy()                             # the same bytes in each other's place
    assert span_checksum(pages[:2], swapped) != span_checksum(pages[:2], d)
    flip = d.copy()
    flip[1, 17] ^= 1
    assert page_checksums(pages[:2], flip)[1] != page_checksums(pages[:2], d)[1]
