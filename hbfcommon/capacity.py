"""Python mirror of runtime_cuda/include/hbf_capacity.h (capacity mode's page table and frame records), and
the one page checksum.

``tests/capacity/test_layout.py`` compiles an offsetof/sizeof probe of every field and constant of the header
and compares them with these numpy dtypes; change both together (and bump HBF_CAP_LAYOUT_VERSION).
The protocol (who writes which word, pins, ordering) is in the header and docs/design.md §3.6.
"""
from __future__ import annotations

import mmap
import os

import numpy as np

from hbfcommon.abi import Signature
from hbfcommon.errors import ControlRegionError

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

# the helper library's capacity entry points the capacity rewrite calls (hbf_capacity.h "capacity exports")
CAPACITY_HELPERS: dict[str, Signature] = {s.name: s for s in (
    Signature("__hb_cap_xlate", ((64, "x"),), ((64, "addr"), (32, "op"), (32, "site"))),
    Signature("__hb_cap_release", (), ((64, "addr"), (64, "x"))),
)}
CAP_TABLE_GLOBAL = "__hb_cap_table"        # .u64: device address of hbf_cap_range[HBF_MAX_RANGES] (0 = none)
CAP_COUNTERS_GLOBAL = "__hb_cap_counters"  # .u64[8]: the device side's capacity counters
CAP_COUNTER_NAMES = ("accesses", "no_wait", "demand_waits", "late_prefetch_waits", "failed", "misses_posted",
                     "hints_posted", "pending")

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
with np.errstate(over="ignore"):
    _PAGE_GOLDEN = np.uint64(WORDS_PER_PAGE) * _GOLDEN                       # page_checksums' per-page term
    _WORD_GOLDEN = np.arange(WORDS_PER_PAGE, dtype=np.uint64) * _GOLDEN      # and per-word term


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
    with np.errstate(over="ignore"):
        # (p * 512 + i) * golden = p * (512 * golden) + i * golden (mod 2^64): one pass over the words
        z = np.add((np.asarray(pages, np.uint64) * _PAGE_GOLDEN)[:, None], _WORD_GOLDEN[None, :])
        z ^= d
        return splitmix64(z, out=z).sum(axis=1, dtype=np.uint64)


def span_checksum(pages: np.ndarray, data: np.ndarray) -> int:
    """The checksum of a span of pages: the wrapping sum of :func:`page_checksums`."""
    return int(page_checksums(pages, data).sum(dtype=np.uint64))


# ---------------------------------------------------------------------------------------------------------------
# The capacity region: one shared mapping per served capacity range, created by hbfd (a sealed memfd, opened by the
# workload through /proc/<hbfd pid>/fd/<fd> like the control region) and holding the range's frame records, page
# table and frame bytes in the layout above. Both sides of the protocol (hbfd's service, the device or its CPU
# stand-in) work on the same words; the device reaches them through the mapping (docs/design.md §3.6).
#   [0, 4096)                       REGION_HEADER_DTYPE
#   [off_frames, +n_frames * 64)    hbf_cap_frame[n_frames]
#   [off_table, +pages * 8)         hbf_cap_pte[pages]   (page aligned)
#   [off_data, +n_frames * 4096)    the frames' bytes    (page aligned)
HBF_CAP_REGION_MAGIC = 0x3152_5041_4346_4248          # "HBFCAPR1" little-endian
REGION_HEADER_DTYPE = np.dtype([("magic", "<u8"), ("layout_version", "<u4"), ("range_id", "<u4"),
                                ("pages", "<u8"), ("n_frames", "<u4"), ("perms", "<u4"), ("media_offset", "<u8"),
                                ("off_frames", "<u8"), ("off_table", "<u8"), ("off_data", "<u8"),
                                ("total_bytes", "<u8")])


def _up(n: int) -> int:
    return -(-n // HBF_CAP_PAGE_BYTES) * HBF_CAP_PAGE_BYTES


def region_layout(pages: int, n_frames: int) -> dict[str, int]:
    """Byte offsets of a capacity region's sections and its total size."""
    off_frames = HBF_CAP_PAGE_BYTES
    off_table = off_frames + _up(n_frames * FRAME_DTYPE.itemsize)
    off_data = off_table + _up(pages * PTE_DTYPE.itemsize)
    return {"off_frames": off_frames, "off_table": off_table, "off_data": off_data,
            "total_bytes": off_data + n_frames * HBF_CAP_PAGE_BYTES}


class CapRegion:
    """Views of a mapped capacity region: ``header`` (one REGION_HEADER_DTYPE record), ``frames``
    (FRAME_DTYPE[n_frames]), ``table`` (PTE_DTYPE[pages]), ``data`` (uint8[n_frames, 4096]). ``buf`` is the
    mapping (an mmap); the views keep it alive."""

    def __init__(self, buf, *, check: bool = True) -> None:
        self.buf = buf
        if len(buf) < HBF_CAP_PAGE_BYTES:
            raise ControlRegionError("capacity region is smaller than its header", size=len(buf))
        self.header = np.frombuffer(buf, REGION_HEADER_DTYPE, 1, 0)[0]
        h = self.header
        if check:
            if int(h["magic"]) != HBF_CAP_REGION_MAGIC or int(h["layout_version"]) != HBF_CAP_LAYOUT_VERSION:
                raise ControlRegionError("not a capacity region of this layout version", magic=hex(int(h["magic"])),
                                         layout_version=int(h["layout_version"]))
            want = region_layout(int(h["pages"]), int(h["n_frames"]))
            got = {k: int(h[k]) for k in want}
            if got != want or len(buf) < want["total_bytes"]:
                raise ControlRegionError("capacity region header does not match its layout", header=got,
                                         expected=want, size=len(buf))
        self.range_id, self.pages, self.n_frames = int(h["range_id"]), int(h["pages"]), int(h["n_frames"])
        self.media_offset, self.perms = int(h["media_offset"]), int(h["perms"])
        self.frames = np.frombuffer(buf, FRAME_DTYPE, self.n_frames, int(h["off_frames"]))
        self.table = np.frombuffer(buf, PTE_DTYPE, self.pages, int(h["off_table"]))
        self.data = np.frombuffer(buf, np.uint8, self.n_frames * HBF_CAP_PAGE_BYTES,
                                  int(h["off_data"])).reshape(self.n_frames, HBF_CAP_PAGE_BYTES)

    @staticmethod
    def init(buf, *, range_id: int, pages: int, n_frames: int, perms: int, media_offset: int) -> "CapRegion":
        """Write the header of a fresh (zeroed) region in ``buf`` and mark every page unmapped."""
        lay = region_layout(pages, n_frames)
        h = np.frombuffer(buf, REGION_HEADER_DTYPE, 1, 0)
        h["magic"], h["layout_version"], h["range_id"] = HBF_CAP_REGION_MAGIC, HBF_CAP_LAYOUT_VERSION, range_id
        h["pages"], h["n_frames"], h["perms"], h["media_offset"] = pages, n_frames, perms, media_offset
        for k, v in lay.items():
            h[k] = v
        r = CapRegion(buf)
        r.table["frame"] = HBF_CAP_NO_FRAME
        r.frames["logical_page"] = np.uint64((1 << 64) - 1)
        return r


def map_cap_region(path: str, *, check: bool = True) -> CapRegion:
    """Map a capacity region (the path RegisterRange returned for a capacity range), shared, read-write."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        raise ControlRegionError(f"cannot open the capacity region: {e.strerror}", path=str(path)) from e
    try:
        size = os.fstat(fd).st_size
        if size < HBF_CAP_PAGE_BYTES:
            raise ControlRegionError("capacity region is smaller than its header", path=str(path), size=size)
        mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    return CapRegion(mm, check=check)


def capacity_admitted(art) -> dict[str, bool]:
    """kernel name -> whether hbfcc's capacity pass rewrote it completely (``capacity_admitted`` of its timing
    report, hbfcc/passes/capacity.py), from an admission artifact (a module document, or hbfcc's nvcc document
    {"kernels": [summary], "modules": [...]}: its module documents); a
    kernel named in several modules is capacity-admitted only when every one says so; one no document
    mentions, or a document without the capacity pass, is not."""
    out: dict[str, bool] = {}
    if not art:
        return out
    docs = art["modules"] if isinstance(art.get("modules"), list) else [art]   # nvcc document: its modules
    for m in docs:
        ks = m.get("kernels", []) if isinstance(m, dict) else []
        for k in (ks.values() if isinstance(ks, dict) else ks):
            if isinstance(k, dict) and "name" in k:
                ok = k.get("capacity_admitted") is True
                out[k["name"]] = out.get(k["name"], True) and ok
    return out
