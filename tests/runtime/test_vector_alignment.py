"""Every 16-byte volatile access of the helpers (hb_st_vol_v2 / hb_ld_vol_v2: st/ld.volatile.global.v2.u64) lands
on a 16-byte aligned address. A v2 store to a field at offset 8 of the live-activity section faulted every
instrumented kernel with CUDA_ERROR_MISALIGNED_ADDRESS on the H200 (2026-12-05); this test names every call site's
field and checks its offset in the control region (hbfcommon.ctl mirrors hbf_ctl.h; tests/runtime/test_runtime_abi.py
checks the mirror against the header)."""
from __future__ import annotations

import ctypes
import re
from pathlib import Path

from hbfcommon import ctl as C
from runtime_cuda import devstate as D

SRC = Path(__file__).resolve().parents[2] / "runtime_cuda" / "src"
CALL = re.compile(r"hb_(?:st|ld)_vol_v2\(\s*&([^,]+?),")
# the pointer expression's struct (by the variable names the helpers use) and where its instances start
BASES = {
    r"r->(\w+)": ("hbf_request", "ring"),
    r"cp->(\w+)": ("hbf_completion", "completions"),
    r"c->ring\[slot\]\.(\w+)": ("hbf_request", "ring"),
    r"a->(\w+)": ("hbf_activity", "activity"),
    # the ring's overflow table: device memory of its own (cuMemAlloc: 256-byte aligned), hbf_device.h
    r"e->(\w+)": ("hbf_ref_ovf", None),
}


def _sites() -> list[tuple[str, str]]:
    out = []
    for f in sorted(SRC.glob("*.cu*")):
        for m in CALL.finditer(f.read_text()):
            out.append((f.name, m.group(1).strip()))
    return out


def test_every_v2_access_is_16_byte_aligned():
    sites = _sites()
    assert len(sites) >= 8, sites          # the ring payload (3 stores), 4 + 3 completion loads, 1 request load
    bad = []
    for fname, expr in sites:
        for pat, (struct, section) in BASES.items():
            m = re.fullmatch(pat, expr)
            if m:
                st = getattr(C, struct) if section is not None else getattr(D, struct)
                field = getattr(st, m.group(1))
                sec_off = getattr(C.hbf_ctl, section).offset if section is not None else 0
                elem = ctypes.sizeof(st)
                # every element of an array section starts 16-aligned iff the section does and the size is a multiple
                if (sec_off % 16) or (elem % 16) or (field.offset % 16):
                    bad.append((fname, expr, f"section +{sec_off}, element {elem} B, field +{field.offset}"))
                break
        else:
            bad.append((fname, expr, "unknown pointer expression: name its struct in BASES"))
    assert not bad, bad


def test_the_activity_section_has_no_v2_access():
    """The fix itself: the activity pairs (flushes/gpu_ns at +8, slot_visits/state_ptr at +24) are scalar stores."""
    assert not [s for s in _sites() if s[1].startswith("a->")]
    assert C.hbf_activity.flushes.offset % 16 == 8     # why they must stay scalar
