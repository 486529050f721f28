"""The RPC contract: hbfcommon.errors.ErrorCode and proto/hbf.proto's ErrorCode are the same enum, both
ways (names and values); the generated stubs (hbfproto) agree with the proto."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from hbfcommon.errors import ErrorCode

PROTO = Path(__file__).resolve().parents[2] / "proto" / "hbf.proto"


def proto_enum(name: str, text: str | None = None) -> dict[str, int]:
    """``enum name { A = 0; ... }`` of a .proto file as {A: 0, ...} (comments dropped)."""
    text = re.sub(r"//[^\n]*", "", PROTO.read_text() if text is None else text)
    m = re.search(r"\benum\s+" + re.escape(name) + r"\s*\{(.*?)\}", text, flags=re.S)
    assert m, f"no enum {name} in {PROTO}"
    body = m.group(1)
    entries = re.findall(r"\b([A-Z][A-Z0-9_]*)\s*=\s*(-?\d+)\s*;", body)
    assert len(entries) == body.count(";"), f"enum {name}: an entry the checker cannot read"
    out = dict((k, int(v)) for k, v in entries)
    assert len(out) == len(entries), f"enum {name}: a name appears twice"
    return out


def test_error_codes_match_the_proto_both_ways():
    proto = proto_enum("ErrorCode")
    py = {c.name: c.value for c in ErrorCode}
    only_proto = sorted(set(proto.items()) - set(py.items()))
    only_py = sorted(set(py.items()) - set(proto.items()))
    assert not only_proto and not only_py, \
        f"proto/hbf.proto ErrorCode and hbfcommon.errors.ErrorCode differ: only in the proto {only_proto}, " \
        f"only in ErrorCode {only_py}"
    assert len(set(proto.values())) == len(proto), "two proto codes share a value"


def test_the_generated_stubs_match_the_proto():
    pb = pytest.importorskip("hbfproto.hbf_pb2")
    assert dict(pb.ErrorCode.items()) == proto_enum("ErrorCode")
    assert dict(pb.RangeMode.items()) == proto_enum("RangeMode")


def test_range_modes_match_the_control_region():
    from hbfcommon import ctl
    modes = proto_enum("RangeMode")
    assert {v: k.lower() for k, v in modes.items() if v} == ctl.MODE_NAMES


@pytest.mark.parametrize("text,problem", [
    ("enum ErrorCode { OK = 0; INTERNAL = 1; INTERNAL = 2; }", "twice"),
    ("enum ErrorCode { OK = 0; bad-name = 1; }", "cannot read"),
])
def test_the_proto_reader_refuses_what_it_cannot_compare(text, problem):
    with pytest.raises(AssertionError) as ei:
        proto_enum("ErrorCode", text)
    assert problem in str(ei.value)


def test_the_check_sees_a_difference():
    text = PROTO.read_text().replace("SHUTTING_DOWN = 26;", "SHUTTING_DOWN = 26;\n  NEW_CODE = 27;")
    assert set(proto_enum("ErrorCode", text)) - {c.name for c in ErrorCode} == {"NEW_CODE"}
