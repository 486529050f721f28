"""Compiled twins of the capacity service's per-page arithmetic: generated content and page checksums.

The definitions stay numpy: :func:`hbfd.capacity.backing.generated_pages` (word i of page p is
splitmix64(seed * 2^32 ^ (p * 512 + i))) and :func:`hbfcommon.capacity.page_checksums` (word i of page p
contributes splitmix64(word ^ ((p * 512 + i) * golden))). The twins below are the same formulas written as loops
over the words (hbfd/accel.py: compiled with numba, used only where :func:`hbfd.accel.enabled`), and one of them
fuses the two: a generated page's words and its checksum in one pass over the page (the numpy definition takes 9
array passes per 4 KiB for each). tests/capacity/test_kernels.py checks them bit for bit against the definitions.

The front ends (:func:`page_checksums`, :func:`generated_pages`, :func:`generated_with_checksums`,
:func:`generated_checksum_sum`) choose: the twin when accel is enabled (and the host is little endian: the twins
read a page's bytes as native uint64 words), else the numpy definition. Callers in hbfd/capacity/ use these,
never the twins directly.
"""
from __future__ import annotations

import sys

import numpy as np

from hbfcommon import capacity as cap
from hbfd import accel

PAGE = cap.HBF_CAP_PAGE_BYTES
WORDS = cap.WORDS_PER_PAGE

# splitmix64's constants, as uint64 (numba types a Python int literal as int64: mixing it with uint64 gives float64)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S9 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(9)
with np.errstate(over="ignore"):
    _PAGE_GOLDEN = np.uint64(WORDS) * _GOLDEN


@accel.jit
def _generate_checksum_loop(seed_hi, pages, out, sums, store, checksum):
    """Fused: for page j (``pages[j]``), word i = splitmix64(((p << 9) ^ seed_hi) | i) into ``out[j, i]`` (when
    ``store``), and (when ``checksum``) ``sums[j]`` = the wrapping sum over i of splitmix64(word ^ (p * 512 *
    golden + i * golden))."""
    for j in range(pages.shape[0]):
        p = pages[j]
        row = (p << _S9) ^ seed_hi
        base = p * _PAGE_GOLDEN
        s = np.uint64(0)
        for i in range(WORDS):
            ui = np.uint64(i)
            z = (row | ui) + _GOLDEN
            z = (z ^ (z >> _S30)) * _M1
            z = (z ^ (z >> _S27)) * _M2
            w = z ^ (z >> _S31)
            if store:
                out[j, i] = w
            if not checksum:
                continue
            z = (w ^ (base + ui * _GOLDEN)) + _GOLDEN
            z = (z ^ (z >> _S30)) * _M1
            z = (z ^ (z >> _S27)) * _M2
            s += z ^ (z >> _S31)
        sums[j] = s


@accel.jit
def _fill_generated_loop(seed_hi, pages, mem, frames, buf, sums, verify):
    """A fill job of generated pages, one page at a time through ``buf`` (512 words: stays in L1): page j's words
    and checksum (as :func:`_generate_checksum_loop`) into ``buf`` and ``sums[j]``, ``buf`` copied into row
    ``frames[j]`` of ``mem`` (FrameMemory.write_many's copy), and with ``verify`` that row read back and
    compared with ``buf`` (FrameMemory.differing). Returns the first j whose frame differs, -1 if none."""
    bad = -1
    row = buf.reshape(1, WORDS)
    for j in range(pages.shape[0]):
        _generate_checksum_loop(seed_hi, pages[j:j + 1], row, sums[j:j + 1], True, True)   # the one formula
        f = frames[j]
        for i in range(WORDS):
            mem[f, i] = buf[i]
        if verify and bad < 0:
            for i in range(WORDS):
                if mem[f, i] != buf[i]:
                    bad = j
                    break
    return bad


def fill_generated(seed: int, pages: np.ndarray, mem: np.ndarray, frames: np.ndarray, buf: np.ndarray,
                   verify: bool) -> tuple[np.ndarray, int]:
    """The compiled fill job of generated pages (only where :func:`compiled`): pages (int64) generated, checksummed,
    copied into rows ``frames`` of ``mem`` ((n_frames, 4096) uint8, C-contiguous) one page at a time through
    ``buf`` (a C-contiguous uint64[512] of the calling thread), and read back (``verify``). The same bytes,
    checksums and compare as GeneratedStore.read_many_checksums + FrameMemory.write_many + FrameMemory.differing,
    in one pass with the GIL released. Returns (checksums, first differing index or -1)."""
    p = np.ascontiguousarray(pages, np.uint64).reshape(-1)
    f = np.ascontiguousarray(frames, np.int64).reshape(-1)
    if len(f) and (f.min() < 0 or f.max() >= len(mem)):       # the loop does not check its bounds
        raise IndexError(f"frame index out of range [0, {len(mem)})")
    sums = np.empty(len(p), np.uint64)
    bad = _fill_generated_loop(_seed_hi(seed), p, mem.view(np.uint64), f, buf, sums, bool(verify))
    return sums, int(bad)


@accel.jit
def _checksum_loop(pages, words, rows, sums):
    """``sums[j]`` = the wrapping sum over i of splitmix64(words[rows[j], i] ^ (p * 512 * golden + i * golden))
    (``rows``: which row of ``words`` holds page j: a batch's own rows, or frames of the frame memory)."""
    for j in range(pages.shape[0]):
        base = pages[j] * _PAGE_GOLDEN
        r = rows[j]
        s = np.uint64(0)
        for i in range(WORDS):
            z = (words[r, i] ^ (base + np.uint64(i) * _GOLDEN)) + _GOLDEN
            z = (z ^ (z >> _S30)) * _M1
            z = (z ^ (z >> _S27)) * _M2
            s += z ^ (z >> _S31)
        sums[j] = s


_VALID, _DIRTY, _EVICTING = cap.HBF_FR_VALID, cap.HBF_FR_DIRTY, cap.HBF_FR_EVICTING


@accel.jit
def _clock_select_loop(state, referenced, pins, hand, need, chosen, orig):
    """One CLOCK sweep (second chance) from ``hand``, as FramePool.take_frames' numpy selection: up to 2 n steps;
    a resident frame (VALID, DIRTY) that is referenced loses its bit and is passed, an unreferenced one with no
    pins is taken: marked EVICTING, written to ``chosen`` with its state before in ``orig``. Stops after the
    ``need``-th. Returns (frames taken, the step of the last one, -1 if none)."""
    n = state.shape[0]
    cnt = 0
    last = -1
    for step in range(2 * n):
        if cnt == need:
            break
        f = (hand + step) % n
        s = state[f]
        if s == _VALID or s == _DIRTY:
            if referenced[f] != 0:
                referenced[f] = 0
            elif pins[f] == 0:
                chosen[cnt] = f
                orig[cnt] = s
                state[f] = _EVICTING
                cnt += 1
                last = step
    return cnt, last


@accel.jit
def _rows_differ_loop(mem, frames, data, bad):
    """``bad[j]`` = whether frame ``frames[j]`` of ``mem`` (n_frames x 512 words) differs from ``data[j]``;
    returns how many do."""
    k = 0
    for j in range(frames.shape[0]):
        f = frames[j]
        d = False
        for i in range(mem.shape[1]):
            if mem[f, i] != data[j, i]:
                d = True
                break
        bad[j] = d
        if d:
            k += 1
    return k


@accel.jit
def _copy_rows_loop(mem, frames, data):
    """Row ``j`` of ``data`` (512 words) into row ``frames[j]`` of ``mem`` (FrameMemory.write_many's copy)."""
    for j in range(frames.shape[0]):
        f = frames[j]
        for i in range(mem.shape[1]):
            mem[f, i] = data[j, i]


def copy_rows(mem: np.ndarray, frames: np.ndarray, data: np.ndarray) -> None:
    """The compiled copy (only where :func:`compiled`): ``mem[frames[j]] = data[j]`` for every j (``mem``:
    (n_frames, 4096) uint8, C-contiguous), with the GIL released (the fill threads copy their chunks at once)."""
    f = np.ascontiguousarray(frames, np.int64).reshape(-1)
    if len(f) and (f.min() < 0 or f.max() >= len(mem)):       # the loop does not check its bounds: numpy would
        raise IndexError(f"frame index out of range [0, {len(mem)})")
    _copy_rows_loop(mem.view(np.uint64), f, _words(data, len(f)))


@accel.jit
def _prefetch_split_loop(flat, npages, table_frame, no_frame, referenced, touch, nr):
    """Of the asked pages ``flat`` inside [0, npages): the indices of those the table maps to no frame into
    ``nr``; those mapped: their frame, into ``touch`` when its ``referenced`` bit is clear. Returns (len(touch),
    len(nr)) used."""
    a = 0
    b = 0
    for i in range(flat.shape[0]):
        p = flat[i]
        if p < 0 or p >= npages:
            continue
        f = table_frame[p]
        if f == no_frame:
            nr[b] = i
            b += 1
        elif referenced[f] == 0:
            touch[a] = f
            a += 1
    return a, b


def prefetch_split(flat: np.ndarray, npages: int, table_frame: np.ndarray,
                   referenced: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The compiled residency split of a prefetch filter (only where :func:`compiled`): of the pages of ``flat``
    (int64) inside [0, npages), (frames of the mapped ones whose ``referenced`` bit is clear, int64; indices
    in ``flat`` of the unmapped ones, int64, ascending), reading the dense page table's ``frame`` field and
    the pool's ``referenced`` field in place. The numpy form is FramePool.lookup_many and a mask."""
    flat = np.ascontiguousarray(flat, np.int64)
    touch = np.empty(len(flat), np.int64)
    nr = np.empty(len(flat), np.int64)
    a, b = _prefetch_split_loop(flat, np.int64(npages), table_frame, table_frame.dtype.type(cap.HBF_CAP_NO_FRAME),
                                referenced, touch, nr)
    return touch[:a], nr[:b]


def clock_select(state: np.ndarray, referenced: np.ndarray, pins: np.ndarray, hand: int,
                 need: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The compiled CLOCK sweep (only where :func:`compiled`): (frames taken, their states before, step of the
    last one or -1). ``state`` and ``referenced`` are updated in place (FRAME_DTYPE fields of the pool)."""
    chosen = np.empty(need, np.int64)
    orig = np.empty(need, state.dtype)
    cnt, last = _clock_select_loop(state, referenced, pins, np.int64(hand), np.int64(need), chosen, orig)
    return chosen[:cnt], orig[:cnt], int(last)


def rows_differ(mem: np.ndarray, frames: np.ndarray, data: np.ndarray) -> np.ndarray:
    """The compiled compare (only where :func:`compiled`): indices j where frame ``frames[j]`` of ``mem``
    ((n_frames, 4096) uint8) holds other bytes than ``data[j]``, without copying the frames out."""
    f = np.ascontiguousarray(frames, np.int64)
    bad = np.empty(len(f), np.bool_)
    if _rows_differ_loop(mem.view(np.uint64), f, _words(data, len(f)), bad) == 0:
        return np.zeros(0, np.int64)
    return np.flatnonzero(bad)


def compiled() -> bool:
    """Whether the front ends below run the compiled twins (``$HBFD_ACCEL``, numba, a little-endian host)."""
    return sys.byteorder == "little" and accel.enabled()


def _seed_hi(seed: int) -> np.uint64:
    return np.uint64((int(seed) & 0xFFFFFFFF) << 32)


def _words(data: np.ndarray, n: int) -> np.ndarray:
    return np.ascontiguousarray(data, np.uint8).reshape(n, PAGE).view(np.uint64)


def page_checksums(pages: np.ndarray, data: np.ndarray) -> np.ndarray:
    """:func:`hbfcommon.capacity.page_checksums` (uint64 per page), compiled when enabled."""
    if not compiled():
        return cap.page_checksums(pages, data)
    p = np.ascontiguousarray(pages, np.uint64).reshape(-1)
    sums = np.empty(len(p), np.uint64)
    _checksum_loop(p, _words(data, len(p)), np.arange(len(p), dtype=np.int64), sums)
    return sums


def span_checksum(pages: np.ndarray, data: np.ndarray) -> int:
    """:func:`hbfcommon.capacity.span_checksum` (the wrapping sum of the pages' checksums), compiled when enabled."""
    return int(page_checksums(pages, data).sum(dtype=np.uint64))


def frames_span_checksum(memory, frames: np.ndarray, pages: np.ndarray) -> int:
    """The span checksum of logical ``pages`` as frames ``frames`` of ``memory`` (a FrameMemory) hold them: the
    frames read out (``memory.read_many``) and summed; compiled, reading the frames in place, when enabled and
    ``read_many`` is FrameMemory's own."""
    from .frames import FrameMemory
    p = np.ascontiguousarray(pages, np.uint64).reshape(-1)
    if not (compiled() and type(memory).read_many is FrameMemory.read_many and memory.data.flags.c_contiguous):
        return span_checksum(p, memory.read_many(frames))
    sums = np.empty(len(p), np.uint64)
    _checksum_loop(p, memory.data.view(np.uint64), np.ascontiguousarray(frames, np.int64), sums)
    return int(sums.sum(dtype=np.uint64))


def generated_with_checksums(seed: int, pages: np.ndarray, out: np.ndarray | None = None) -> tuple[np.ndarray,
                                                                                                     np.ndarray]:
    """Generated pages ((n, 4096) uint8; into ``out`` when given: a C-contiguous (n, 4096) uint8 array) and their
    checksums, in one pass per page when compiled; else the two numpy definitions."""
    p = np.ascontiguousarray(pages, np.uint64).reshape(-1)
    n = len(p)
    if out is not None and (out.shape != (n, PAGE) or out.dtype != np.uint8 or not out.flags.c_contiguous):
        raise ValueError("out must be a C-contiguous (n, 4096) uint8 array")
    if not compiled():
        from .backing import generated_pages
        d = generated_pages(seed, p)
        if out is not None:
            out[...] = d
            d = out
        return d, cap.page_checksums(p, d)
    d = out if out is not None else np.empty((n, PAGE), np.uint8)
    sums = np.empty(n, np.uint64)
    _generate_checksum_loop(_seed_hi(seed), p, d.view(np.uint64), sums, True, True)
    return d, sums


def generated_pages(seed: int, pages: np.ndarray) -> np.ndarray:
    """:func:`hbfd.capacity.backing.generated_pages`, compiled when enabled."""
    if not compiled():
        from .backing import generated_pages as definition
        return definition(seed, pages)
    p = np.ascontiguousarray(pages, np.uint64).reshape(-1)
    d = np.empty((len(p), PAGE), np.uint8)
    _generate_checksum_loop(_seed_hi(seed), p, d.view(np.uint64), np.empty(len(p), np.uint64), True, False)
    return d


def generated_checksum_sum(seed: int, pages: np.ndarray) -> int:
    """The span checksum of generated pages from the seed alone (no page kept: the CPU reference)."""
    p = np.ascontiguousarray(pages, np.uint64).reshape(-1)
    if not compiled():
        from .backing import generated_pages
        return int(cap.page_checksums(p, generated_pages(seed, p)).sum(dtype=np.uint64))
    sums = np.empty(len(p), np.uint64)
    _generate_checksum_loop(_seed_hi(seed), p, np.empty((1, 1), np.uint64), sums, False, True)
    return int(sums.sum(dtype=np.uint64))


def warm() -> float:
    """Compile (or load from numba's cache) every twin now (:func:`hbfd.accel.warm`), so the first miss does not
    pay it; returns the seconds it took (0.0 when the twins are off). The capacity service calls it when it
    starts."""
    if not compiled():
        return 0.0

    def run() -> None:
        p = np.arange(2, dtype=np.uint64)
        generated_with_checksums(0, p)
        generated_checksum_sum(0, p)
        page_checksums(p, np.zeros((2, PAGE), np.uint8))
        rows_differ(np.zeros((2, PAGE), np.uint8), np.arange(2), np.zeros((2, PAGE), np.uint8))
        fr = np.zeros(2, cap.FRAME_DTYPE)                   # the pool's field views (strided), as take_frames passes
        clock_select(fr["state"], fr["referenced"], fr["pins"], 0, 1)
        copy_rows(np.zeros((2, PAGE), np.uint8), np.arange(2), np.zeros((2, PAGE), np.uint8))
        fill_generated(0, np.arange(2), np.zeros((2, PAGE), np.uint8), np.arange(2), np.empty(WORDS, np.uint64), True)
        pte = np.zeros(2, cap.PTE_DTYPE)                    # the region's page table and the pool's fields
        pte["frame"] = [cap.HBF_CAP_NO_FRAME, 1]
        prefetch_split(np.arange(3, dtype=np.int64), 2, pte["frame"], fr["referenced"])
    return accel.warm("capacity service", run,
                      (_generate_checksum_loop, _checksum_loop, _clock_select_loop, _rows_differ_loop,
                       _copy_rows_loop, _prefetch_split_loop, _fill_generated_loop))
