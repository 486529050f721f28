"""Backing stores of capacity ranges: where a page lives when no frame holds it.

A store serves whole 4 KiB pages by page index (0 .. ``pages`` - 1):

* ``read_pages(first, n) -> (n, 4096) uint8``, ``read_many(pages) -> (len, 4096) uint8`` (any pages, in the
  order given), ``write_page(page, data)``, ``flush()``, ``read_only``; optionally ``write_pages(first, data)``
  (consecutive pages in one write: the service's batched write-back uses it where present).
* Every I/O failure raises :class:`BackingStoreError` (an ``HbfError``, code ``INTERNAL`` with the OS error
  in its fields); the service turns it into the terminal status IO_ERROR and keeps the dirty bytes.

Two stores:

* :class:`SparseFileStore`: a file of ``pages * 4096`` bytes created sparse (``ftruncate``: pages never written
  read as zeros and take no disk), ``pread``/``pwrite`` of whole pages, ``fsync`` at ``flush``.
* :class:`GeneratedStore`: read-only data whose content is a pure function of (seed, page)
  (:func:`generated_pages`, vectorized numpy: the definition), so weights far larger than disk and GPU memory can
  be served and checked: :meth:`GeneratedStore.span_checksum` computes any span's checksum from the seed, never
  from what a frame held. With ``$HBFD_ACCEL`` (hbfd/accel.py) its pages and checksums come from the compiled
  twins of hbfd.capacity.kernels (bit-identical; a page and its checksum in one pass:
  :meth:`GeneratedStore.read_many_checksums`).

A store may offer ``read_many_checksums(pages, out=None) -> (data, checksums)`` (the pages and their
hbfcommon.capacity.page_checksums at once); the service uses it where present.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from hbfcommon.capacity import HBF_CAP_PAGE_BYTES as PAGE, WORDS_PER_PAGE, splitmix64
from hbfcommon.errors import ConfigError, ErrorCode, HbfError

from . import kernels


class BackingStoreError(HbfError):
    """A backing store's I/O failed (the service's terminal IO_ERROR)."""

    code = ErrorCode.INTERNAL


@runtime_checkable
class BackingStore(Protocol):
    pages: int
    read_only: bool
    name: str

    def read_pages(self, first: int, n: int) -> np.ndarray: ...
    def read_many(self, pages: np.ndarray) -> np.ndarray: ...
    def write_page(self, page: int, data: np.ndarray) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


def _check_span(store, first: int, n: int) -> None:
    if first < 0 or n < 1 or first + n > store.pages:
        raise BackingStoreError(f"{store.name}: pages [{first}, {first + n}) outside the store's {store.pages} pages",
                                first=first, n=n, pages=store.pages)


class SparseFileStore:
    """A sparse file of ``pages`` 4 KiB pages (created if missing, never truncated if larger)."""

    read_only = False

    def __init__(self, path: str | os.PathLike, pages: int, *, create: bool = True) -> None:
        if not isinstance(pages, int) or pages < 1:
            raise ConfigError("a sparse backing file needs pages >= 1", field="pages", value=pages)
        self.path = Path(path)
        self.pages = pages
        self.name = f"sparse-file:{self.path}"
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        try:
            self._fd = os.open(self.path, flags, 0o600)
            if os.fstat(self._fd).st_size < pages * PAGE:
                os.ftruncate(self._fd, pages * PAGE)
        except OSError as e:
            raise BackingStoreError(f"cannot open the backing file {self.path}: {e.strerror}", path=str(self.path),
                                    errno=e.errno) from e

    def read_pages(self, first: int, n: int) -> np.ndarray:
        _check_span(self, first, n)
        out = np.empty((n, PAGE), np.uint8)
        self._read_into(first, out)
        return out

    def _read_into(self, first: int, out: np.ndarray) -> None:
        """Pages [first, first + len(out)) straight into ``out`` (C-contiguous (n, 4096) uint8): one ``preadv``,
        no intermediate bytes."""
        n = len(out)
        try:
            got = os.preadv(self._fd, [out], first * PAGE)
        except OSError as e:
            raise BackingStoreError(f"read of pages [{first}, {first + n}) from {self.path} failed: {e.strerror}",
                                    path=str(self.path), errno=e.errno, first=first, n=n) from e
        if got != n * PAGE:
            raise BackingStoreError(f"short read from {self.path}: {got} of {n * PAGE} bytes", path=str(self.path),
                                    first=first, n=n)

    def read_many(self, pages: np.ndarray) -> np.ndarray:
        """Pages in the order given; runs of consecutive pages are one read (through :meth:`read_pages`, so a
        store that overrides it is read through its own)."""
        p = np.asarray(pages, np.int64)
        out = np.empty((len(p), PAGE), np.uint8)
        direct = type(self).read_pages is SparseFileStore.read_pages
        for i, j in runs(p).tolist():
            if direct:
                _check_span(self, int(p[i]), j - i)
                self._read_into(int(p[i]), out[i:j])
            else:
                out[i:j] = self.read_pages(int(p[i]), j - i)
        return out

    def write_page(self, page: int, data: np.ndarray) -> None:
        _check_span(self, page, 1)
        buf = np.ascontiguousarray(data, np.uint8).tobytes()
        if len(buf) != PAGE:
            raise BackingStoreError(f"a page write needs {PAGE} bytes, got {len(buf)}", page=page)
        try:
            w = os.pwrite(self._fd, buf, page * PAGE)
        except OSError as e:
            raise BackingStoreError(f"write of page {page} to {self.path} failed: {e.strerror}", path=str(self.path),
                                    errno=e.errno, page=page) from e
        if w != PAGE:
            raise BackingStoreError(f"short write to {self.path}: {w} of {PAGE} bytes", path=str(self.path), page=page)

    def write_pages(self, first: int, data: np.ndarray) -> None:
        """Pages [first, first + len(data)) in one ``pwrite``. A failure raises BackingStoreError with
        ``written_pages``: the pages known written in full before it (a short write's whole pages; 0 when the
        write raised: nothing after ``first`` is known written)."""
        buf = np.ascontiguousarray(data, np.uint8)
        n = buf.size // PAGE
        if buf.size != n * PAGE or n < 1:
            raise BackingStoreError(f"a write of pages needs a multiple of {PAGE} bytes, got {buf.size}", page=first,
                                    written_pages=0)
        _check_span(self, first, n)
        try:
            w = os.pwrite(self._fd, buf, first * PAGE)
        except OSError as e:
            raise BackingStoreError(f"write of pages [{first}, {first + n}) to {self.path} failed: {e.strerror}",
                                    path=str(self.path), errno=e.errno, page=first, n=n, written_pages=0) from e
        if w != n * PAGE:
            raise BackingStoreError(f"short write to {self.path}: {w} of {n * PAGE} bytes", path=str(self.path),
                                    page=first, n=n, written_pages=w // PAGE)

    def flush(self) -> None:
        try:
            os.fsync(self._fd)
        except OSError as e:
            raise BackingStoreError(f"fsync of {self.path} failed: {e.strerror}", path=str(self.path),
                                    errno=e.errno) from e

    def allocated_bytes(self) -> int:
        """Disk the file really takes (a sparse file: only the pages written)."""
        return os.fstat(self._fd).st_blocks * 512

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def runs(pages: np.ndarray) -> np.ndarray:
    """(start, end) index pairs, (k, 2) int64, of the maximal runs of consecutive pages (p, p + 1, ...) in
    ``pages``, in order."""
    p = np.asarray(pages, np.int64)
    if not len(p):
        return np.zeros((0, 2), np.int64)
    cut = np.flatnonzero(np.diff(p) != 1) + 1
    return np.stack([np.concatenate(([0], cut)), np.concatenate((cut, [len(p)]))], 1)


_WORDS = np.arange(WORDS_PER_PAGE, dtype=np.uint64)


def generated_pages(seed: int, pages: np.ndarray) -> np.ndarray:
    """The content of generated pages: word i of page p is splitmix64(seed * 2^32 ^ (p * 512 + i)) (little
    endian), as (n, 4096) uint8. Pure function of (seed, page)."""
    p = np.asarray(pages, np.uint64)
    with np.errstate(over="ignore"):
        # (p * 512 + i) ^ (seed << 32) = ((p << 9) ^ (seed << 32)) | i for i < 512: one pass over the words
        row = (p << np.uint64(9)) ^ (np.uint64(seed & 0xFFFFFFFF) << np.uint64(32))
        idx = np.bitwise_or(row[:, None], _WORDS[None, :])
        words = splitmix64(idx, out=idx)
    return words.astype("<u8", copy=False).view(np.uint8).reshape(len(p), PAGE)


class GeneratedStore:
    """Read-only pages generated from ``seed`` (no disk); ``pages`` may be far beyond disk or GPU memory."""

    read_only = True

    def __init__(self, seed: int, pages: int) -> None:
        if not isinstance(pages, int) or pages < 1:
            raise ConfigError("a generated store needs pages >= 1", field="pages", value=pages)
        self.seed, self.pages = int(seed), pages
        self.name = f"generated:seed={self.seed}"

    def read_pages(self, first: int, n: int) -> np.ndarray:
        _check_span(self, first, n)
        return kernels.generated_pages(self.seed, np.arange(first, first + n, dtype=np.uint64))

    def _pages(self, pages: np.ndarray) -> np.ndarray:
        p = np.asarray(pages, np.int64)
        if len(p) and (p.min() < 0 or p.max() >= self.pages):
            raise BackingStoreError(f"{self.name}: a page outside the store's {self.pages} pages", pages=self.pages)
        return p.astype(np.uint64)

    def read_many(self, pages: np.ndarray) -> np.ndarray:
        return kernels.generated_pages(self.seed, self._pages(pages))

    def read_many_checksums(self, pages: np.ndarray, out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The pages (into ``out`` when given: C-contiguous (len, 4096) uint8) and their checksums (uint64): one
        pass per page when compiled."""
        return kernels.generated_with_checksums(self.seed, self._pages(pages), out)

    def fill_frames(self, pages: np.ndarray, mem: np.ndarray, frames: np.ndarray, buf: np.ndarray,
                    verify: bool) -> tuple[np.ndarray, int]:
        """The pages generated straight into rows ``frames`` of the frame bytes ``mem`` with their checksums, each
        frame read back and compared (``verify``): kernels.fill_generated, one pass per page through ``buf``
        (compiled only: the capacity service uses it where kernels.compiled() and the frame memory's copy and
        compare are FrameMemory's own). Returns (checksums, first differing index or -1)."""
        return kernels.fill_generated(self.seed, self._pages(pages), mem, frames, buf, verify)

    def write_page(self, page: int, data: np.ndarray) -> None:
        raise BackingStoreError(f"{self.name} is read-only: page {page} cannot be written back", page=page)

    def flush(self) -> None:
        return None

    def span_checksum(self, first: int, n: int, *, chunk_pages: int = 4096, jobs: int = 1, threads: int = 1) -> int:
        """The checksum (hbfcommon.capacity.span_checksum) of pages [first, first + n), from the seed alone.
        ``jobs`` > 1: chunks summed in that many processes; ``threads`` > 1: in that many threads of this process
        (the compiled twin and numpy's array loops release the GIL). The sum is additive, so the result is the
        same either way."""
        _check_span(self, first, n)
        spans = [(lo, min(chunk_pages, first + n - lo)) for lo in range(first, first + n, chunk_pages)]
        if threads > 1 and len(spans) > 1:
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(min(threads, len(spans)), thread_name_prefix="hbf-cap-ref") as ex:
                parts = list(ex.map(_generated_checksum, [self.seed] * len(spans), *zip(*spans)))
        elif jobs > 1 and len(spans) > 1:
            from concurrent.futures import ProcessPoolExecutor
            with ProcessPoolExecutor(min(jobs, len(spans))) as ex:
                parts = list(ex.map(_generated_checksum, [self.seed] * len(spans), *zip(*spans)))
        else:
            parts = [_generated_checksum(self.seed, lo, k) for lo, k in spans]
        return sum(parts) % (1 << 64)

    def close(self) -> None:
        return None


def _generated_checksum(seed: int, first: int, n: int) -> int:
    return kernels.generated_checksum_sum(seed, np.arange(first, first + n, dtype=np.uint64))

