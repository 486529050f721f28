"""The numpy mirror (hbfcommon/capacity.py) matches runtime_cuda/include/hbf_capacity.h field by field: a
compiled offsetof/sizeof probe of every struct field and #define constant."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hbfcommon import capacity as cap

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import layout_probe as LP  # noqa: E402

HEADER = Path(__file__).resolve().parents[2] / "runtime_cuda" / "include" / "hbf_capacity.h"


def _c_structs() -> dict[str, list[str]]:
    return LP.c_structs(HEADER)


def _c_defines() -> list[str]:
    return LP.c_defines(HEADER, skip=("HBF_CAP_STATIC_ASSERT",))


def test_mirror_has_every_struct_and_field_in_order():
    cs = _c_structs()
    assert set(cs) == set(cap.STRUCTS)
    for name, fields in cs.items():
        assert fields == list(cap.STRUCTS[name].names), name


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    structs = {sname: list(dt.names) for sname, dt in cap.STRUCTS.items()}
    return LP.compile_probe(tmp_path_factory.mktemp("capprobe"), HEADER.parent, ["hbf_capacity.h"], structs,
                            _c_defines())


def test_sizes_and_offsets_match(probe):
    for sname, dt in cap.STRUCTS.items():
        assert probe[("size", sname)] == dt.itemsize, sname
        for fname in dt.names:
            sub, off = dt.fields[fname][:2]
            assert probe[("off", f"{sname}.{fname}")] == off, f"{sname}.{fname} offset"
            assert probe[("fsize", f"{sname}.{fname}")] == sub.itemsize, f"{sname}.{fname} size"


def test_constants_match(probe):
    defs = {k[1]: v for k, v in probe.items() if k[0] == "def"}
    assert len(defs) >= 11
    for name, value in defs.items():
        assert getattr(cap, name) == value, name


def test_frame_record_is_one_line():
    assert cap.FRAME_DTYPE.itemsize == 64 and cap.PTE_DTYPE.itemsize == 8
