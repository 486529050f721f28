"""glibc malloc settings for hbfd's process (``$HBFD_MALLOC_TUNE``, hbfd/knobs.py).

The media engine allocates numpy arrays of a few hundred KiB to tens of MiB per batch. With glibc's defaults
such blocks are mmapped and unmapped (the mmap threshold grows dynamically up to 32 MiB) and the heap top is
trimmed at 128 KiB, so every batch faults its arrays' pages in again: 7-9 k minor faults per 100 k stores,
~10 % of the write-heavy regimes and ~20 % of a large read burst (docs/RESULTS.md "Media engine round 7").
Keeping the freed memory (trim threshold 1 GiB, mmap threshold fixed at 256 MiB, no dynamic
adjustment) lets the next batch reuse pages that are already mapped. The cost: the process's resident size
stays at its peak heap (hbfd's working set), up to the trim threshold.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

# mallopt parameters (glibc malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
TRIM_THRESHOLD_BYTES = 1 << 30       # mallopt takes an int
MMAP_THRESHOLD_BYTES = 256 << 20     # blocks up to 256 MiB come from the heap and are reused

_applied: dict | None = None


def tune_malloc(enabled: bool = True) -> dict:
    """Apply the settings once per process (idempotent); returns what was done: ``{"applied": bool,
    "reason": str, ...}``. Not glibc (musl, macOS) or ``enabled`` False: nothing is changed."""
    global _applied
    if _applied is not None:
        return _applied
    if not enabled:
        _applied = {"applied": False, "reason": "HBFD_MALLOC_TUNE=0"}
        return _applied
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        version = libc.gnu_get_libc_version().decode()
    except (OSError, AttributeError):
        _applied = {"applied": False, "reason": "not glibc: malloc left as it is"}
        log.info("malloc tuning: %s", _applied["reason"])
        return _applied
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok_trim = mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
    ok_mmap = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
    _applied = {"applied": ok_trim and ok_mmap, "glibc": version, "trim_threshold": TRIM_THRESHOLD_BYTES,
                "mmap_threshold": MMAP_THRESHOLD_BYTES,
                "reason": "" if ok_trim and ok_mmap else f"mallopt refused (trim {ok_trim}, mmap {ok_mmap})"}
    if not _applied["applied"]:
        log.warning("malloc tuning: %s", _applied["reason"])
    return _applied
