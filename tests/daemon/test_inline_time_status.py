"""hbfctl status / hbfd's summary show the device's inline path time (helper ABI 8: the kernel counters' inline_ns
summed, published by the runtime into the control region's counters, a reserved word until then)."""
from __future__ import annotations

import ctypes

from hbfcommon import ctl
from hbfd.ctl_cli import format_status, inline_line


def test_the_word_is_a_former_reserved_one():
    c = ctl.hbf_counters
    assert c.device_inline_ns.offset == c.device_sync_seq.offset + 8
    assert ctypes.sizeof(c) % 64 == 0 and c.reserved.size == 6 * 8
    assert ctl.HBF_CTL_ABI_VERSION == 4                       # unchanged: 0 is what an older runtime writes


def test_the_status_line():
    assert inline_line({"device_inline_ns": 12_345}).endswith("12.35 us")
    assert "not measured" in inline_line({"device_inline_ns": 0})
    assert "not measured" in inline_line({})                  # a summary from an hbfd before the word


def test_status_prints_it_with_the_counters():
    import json
    ops = {op: {f: 0 for f in ("requests", "bytes", "modeled_ns", "wall_ns", "service_ns", "overhead_ns")}
           for op in ctl.OP_NAMES}
    counters = {"reference": ops, "device": ops, "reference_requests_by_state": {}, "device_requests_by_state": {},
                "device_inline_ns": 2_000_000, "device_sync_seq": 1}
    s = {"daemon_pid": 1, "profile_name": "p", "profile_path": "/p", "profile_sha256": "0" * 64, "engine": "e",
         "timing_source": "fixed", "counters_json": json.dumps(counters)}
    text = format_status(s)
    line = next(ln for ln in text.splitlines() if ln.startswith("device inline path time"))
    assert line.endswith("2.00 ms")
