"""The Python mirror (hbfcommon/ctl.py) matches runtime_cuda/include/hbf_ctl.h field by field.

Compiles an offsetof/sizeof probe of every field of every struct (and every #define constant)
with the C compiler and compares it with the ctypes classes.
"""
from __future__ import annotations

import ctypes
import re
import sys
from pathlib import Path

import pytest

from hbfcommon import ctl

sys.path.insert(0, str(Path(__file__).resolve().parent))
import layout_probe as LP  # noqa: E402

HEADER = Path(__file__).resolve().parent.parent / "runtime_cuda" / "include" / "hbf_ctl.h"


def _c_structs() -> dict[str, list[str]]:
    return LP.c_structs(HEADER)


def _c_defines() -> list[str]:
    return LP.c_defines(HEADER, skip=("HBF_STATIC_ASSERT",))


def test_mirror_has_every_struct_and_field_in_order():
    cs = _c_structs()
    assert set(cs) == set(ctl.STRUCTS), "structs differ between hbf_ctl.h and hbfcommon/ctl.py"
    for name, fields in cs.items():
        assert fields == [f[0] for f in ctl.STRUCTS[name]._fields_], name


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    structs = {sname: [f[0] for f in cls._fields_] for sname, cls in ctl.STRUCTS.items()}
    return LP.compile_probe(tmp_path_factory.mktemp("probe"), HEADER.parent, ["hbf_ctl.h"], structs, _c_defines())


def test_sizes_and_offsets_match(probe):
    checked = 0
    for sname, cls in ctl.STRUCTS.items():
        assert probe[("size", sname)] == ctypes.sizeof(cls), sname
        for fname, *_ in cls._fields_:
            f = getattr(cls, fname)
            assert probe[("off", f"{sname}.{fname}")] == f.offset, f"{sname}.{fname} offset"
            assert probe[("fsize", f"{sname}.{fname}")] == f.size, f"{sname}.{fname} size"
            checked += 1
    assert checked > 100


def test_constants_match(probe):
    defs = {k[1]: v for k, v in probe.items() if k[0] == "def"}
    assert len(defs) >= 40
    for name, value in defs.items():
        assert hasattr(ctl, name), f"{name} missing from hbfcommon/ctl.py"
        assert getattr(ctl, name) == value, name


def test_sections_are_64_byte_aligned_and_header_consistent():
    for name, off in ctl.OFFSETS.items():
        assert off % 64 == 0, name
    assert ctl.hbf_header.media.offset % 64 == 0
    assert ctl.REQUEST_DTYPE.itemsize == 64 and ctl.COMPLETION_DTYPE.itemsize == 64


def _c_status_defines() -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in
            re.finditer(r"^#define (HBF_ST_\w+)\s+(\d+)u?\b", HEADER.read_text(), flags=re.M)}


def test_request_status_is_one_definition_both_ways():
    """RequestStatus (hbfcommon/status.py) is the definition: every member is HBF_ST_<NAME> in hbf_ctl.h
    and in hbfcommon.ctl with its value, and neither has a state RequestStatus lacks."""
    from hbfcommon.status import STATUS_NAMES, RequestStatus
    c = _c_status_defines()
    want = {s.c_name: s.value for s in RequestStatus}
    assert c == want, f"hbf_ctl.h HBF_ST_* differ from RequestStatus: {sorted(set(c.items()) ^ set(want.items()))}"
    py = {k: getattr(ctl, k) for k in dir(ctl) if k.startswith("HBF_ST_")}
    assert py == want
    assert len(RequestStatus) <= ctl.HBF_N_STATUS
    assert STATUS_NAMES == tuple(s.name for s in sorted(RequestStatus))


def test_the_runtime_status_names_are_request_status():
    """The workload runtime's names of device failure states (runtime_cuda.devstate) are RequestStatus's."""
    from hbfcommon.status import STATUS_NAMES
    devstate = pytest.importorskip("runtime_cuda.devstate")
    assert tuple(devstate.C_STATUS_NAMES) == STATUS_NAMES
