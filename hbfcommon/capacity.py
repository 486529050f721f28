"""Python mirror of runtime_cuda/include/hbf_capacity.h (capacity mode's page table and frame records), and
the one page checksum.

``tests/capacity/test_layout.py`` compiles an offsetof/sizeof probe of every field and constant of the header
and compares them with these numpy dtypes; change both together (and bump HBF_CAP_LAYOUT_VERSION).
The protocol (who writes which word, pins, ordering) is in the header and docs/design.md §3.6.
"""
from __future__ import annotations

import numpy as np

HBF_CAP_LAYOUT_VERSION = 1
HBF_CAP_PAGE_BYTES = 4096
HBF_CAP_NO_FRAME = 0xFFFFFFFF

HBF_FR_FREE = 0
HBF_FR_FILLING = 1
HBF_FR_VALID = 2
HBF_FR_DIRTY = 3
HBF_FR_EVICTING = 4
HBF_FR_N_STATES = 5
FRAME_STATE_NAMES = ("free", "filling", "valid", "dirty", "evicting")

HBF_REQ_CAP_MISS = 0x10000
HBF_REQ_CAP_HINT = 0x20000

# field order and types exactly as in the header (the layout test checks names, offsets and sizes)
PTE_DTYPE = np.dtype([("frame", "<u4"), ("generation", "<u4")])
FRAME_DTYPE = np.dtype([("logical_page", "<u8"), ("ready_ns", "<u8"), ("checksum", "<u8"),
                        ("state", "<u4"), ("generation", "<u4"), ("pins", "<u4"), ("dirty", "<u4"),
                        ("referenced", "<u4"), ("marker", "<u4"), ("range_id", "<u4"), ("prefetched", "<u4"),
                        ("reserved", "<u8")])
RANGE_DTYPE = np.dtype([("base", "<u8"), ("pages", "<u8"), ("page_table", "<u8"), ("frames", "<u8"),
                        ("frame_data", "<u8"), ("n_frames", "<u4"), ("range_id", "<u4"), ("perms", "<u4"),
                        ("reserved0", "<u4"), ("media_offset", "<u8")])
STRUCTS = {"hbf_cap_pte": PTE_DTYPE, "hbf_cap_frame": FRAME_DTYPE, "hbf_cap_range": RANGE_DTYPE}

WORDS_PER_PAGE = HBF_CAP_PAGE_BYTES // 8
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """splitmix64's finalizer on uint64 (wrapping), elementwise; in place on ``out`` when given (``out`` may be
    ``x``). One scratch array, no other temporaries."""
    if out is None:
        z = x.astype(np.uint64)                 # a copy
    elif out is x:
        z = x
    else:
        np.copyto(out, x)
        z = out
    t = np.empty_like(z)
    with np.errstate(over="ignore"):
        z += _GOLDEN
        np.right_shift(z, np.uint64(30), out=t)
        z ^= t
        z *= np.uint64(0xBF58476D1CE4E5B9)
        np.right_shift(z, np.uint64(27), out=t)
        z ^= t
        z *= np.uint64(0x94D049BB133111EB)
        np.right_shift(z, np.uint64(31), out=t)
        z ^= t
    return z


def page_checksums(pages: np.ndarray, data: np.ndarray) -> np.ndarray:
    """The checksum of each page: ``data`` is (n, 4096) uint8 holding logical pages ``pages``; word i of page p
    contributes splitmix64(word ^ ((p * 512 + i) * golden)) (mod 2^64). Position-dependent (a page's bytes in
    another page's place give another sum) and additive: a span's checksum is the wrapping sum of its
    pages' (:func:`span_checksum`), so spans can be summed in any chunks."""
    d = np.ascontiguousarray(data, np.uint8).reshape(len(pages), HBF_CAP_PAGE_BYTES).view("<u8")
    z = np.asarray(pages, np.uint64)[:, None] * np.uint64(WORDS_PER_PAGE) \
        + np.arange(WORDS_PER_PAGE, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        z *= _GOLDEN
        z ^= d
        return splitmix64(z, out=z).sum(axis=1, dtype=np.uint64)


def span_checksum(pages: np.ndarray, data: np.ndarray) -> int:
    """The checksum of a span of pages: the wrapping sum of :func:`page_checksums`."""
    return int(page_checksums(pages, data).sum(dtype=np.uint64))
