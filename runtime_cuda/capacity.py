"""The runtime's side of capacity mode (docs/design.md §3.6, issue 16). NOT GPU-VERIFIED: the CUDA calls here
have never run; the descriptor and table building is tested on the CPU (tests/runtime/test_capacity_runtime.py).

A capacity range through the GPU runtime (:meth:`runtime_cuda.session.Session.register_capacity_range`):

1. its logical span is reserved (``cuMemAddressReserve``: virtual addresses, no physical memory), so nothing
   else can be allocated there and an access that was not translated faults instead of reading other data;
2. hbfd registers it with a :class:`hbfcommon.capacity.CapRegion` (frame records, page table, frame bytes) and
   serves its misses on the ring (hbfd/capacity/dispatch.py); the runtime maps the region and registers it with
   the device (``cuMemHostRegister``, DEVICEMAP), so the device reaches the page table and the frames through
   its device pointer: hits stay on the GPU (no host software round trip), but the bytes live in host memory
   and cross PCIe (frames in HBM would need the copies done by the CUDA context's owner: not built);
3. its ``hbf_cap_range`` descriptor (hbf_capacity.h) goes into the session's capacity table, a device array
   indexed like the device state's range table (``__hb_cap_table`` of every bound module points at it), which
   the capacity-rewritten accesses (hbfcc/passes/capacity.py) search;
4. at unregister / close: hbfd writes every dirty frame back (UnregisterRange), then the region is
   unregistered and unmapped and the span released.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np

from hbfcommon import ctl as C
from hbfcommon.capacity import HBF_CAP_PAGE_BYTES as PAGE, RANGE_DTYPE, CapRegion

TABLE_BYTES = RANGE_DTYPE.itemsize * C.HBF_MAX_RANGES


@dataclass
class CapacityRange:
    range_id: int
    base: int               # the logical span (reserved VA on the GPU)
    nbytes: int
    reserved: int           # bytes reserved (0: not reserved by the session, e.g. CPU-only sessions)
    region: CapRegion
    region_dev: int         # the region's device pointer (0 without CUDA)

    @property
    def region_addr(self) -> int:
        return ctypes.addressof(ctypes.c_char.from_buffer(self.region.buf))

    def descriptor(self) -> np.ndarray:
        """The range's hbf_cap_range (device pointers into the registered region)."""
        h, r = self.region.header, self.region
        d = np.zeros((), RANGE_DTYPE)
        d["base"] = self.base - self.base % PAGE
        d["pages"] = r.pages
        dev = self.region_dev
        if dev:
            d["page_table"] = dev + int(h["off_table"])
            d["frames"] = dev + int(h["off_frames"])
            d["frame_data"] = dev + int(h["off_data"])
        d["n_frames"], d["range_id"], d["perms"] = r.n_frames, r.range_id, r.perms
        d["media_offset"] = r.media_offset
        return d


def capacity_table(dev_ranges: Any, n_ranges: int, caps: dict[int, CapacityRange]) -> np.ndarray:
    """hbf_cap_range[HBF_MAX_RANGES]: entry i describes the device state's ranges[i] when that range is a
    capacity range this session serves; every other entry is zero (pages 0: an access there fails the run with
    UNSUPPORTED in __hb_cap_xlate, never touches the unbacked span)."""
    tab = np.zeros(C.HBF_MAX_RANGES, RANGE_DTYPE)
    for i in range(int(n_ranges)):
        r = dev_ranges[i]
        c = caps.get(int(r.range_id))
        if c is not None and int(r.mode) == C.HBF_MODE_CAPACITY:
            tab[i] = c.descriptor()
    return tab
