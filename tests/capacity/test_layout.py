"""The numpy mirror (hbfcommon/capacity.py) matches runtime_cuda/include/hbf_capacity.h field by field: a
compiled offsetof/sizeof probe of every struct field and #define constant."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hbfcommon import capacity as cap

HEADER = Path(__file__).resolve().parents[2] / "runtime_cuda" / "include" / "hbf_capacity.h"
CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def _c_structs() -> dict[str, list[str]]:
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    out = {}
    for m in re.finditer(r"typedef struct (\w+) \{(.*?)\} (\w+);", text, flags=re.S):
        out[m.group(3)] = re.findall(r"^\s*[\w ]+?\s+(\w+)\s*(?:\[[^\]]+\])?\s*;", m.group(2), flags=re.M)
    return out


def _c_defines() -> list[str]:
    return [n for n in re.findall(r"^#define (HBF_\w+)\s+\S", HEADER.read_text(), flags=re.M)
            if n not in ("HBF_CAPACITY_H", "HBF_CAP_STATIC_ASSERT")]


def test_mirror_has_every_struct_and_field_in_order():
    cs = _c_structs()
    assert set(cs) == set(cap.STRUCTS)
    for name, fields in cs.items():
        assert fields == list(cap.STRUCTS[name].names), name


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    if CC is None:
        pytest.fail("no C compiler (cc/gcc/clang) found: the layout probe cannot run")
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "hbf_capacity.h"', "int main(void) {"]
    for sname, dt in cap.STRUCTS.items():
        lines.append(f'printf("size {sname} %zu\\n", sizeof({sname}));')
        for fname in dt.names:
            lines.append(f'printf("off {sname}.{fname} %zu\\n", offsetof({sname}, {fname}));')
            lines.append(f'printf("fsize {sname}.{fname} %zu\\n", sizeof((({sname}*)0)->{fname}));')
    for d in _c_defines():
        lines.append(f'printf("def {d} %llu\\n", (unsigned long long)({d}));')
    lines.append("return 0; }")
    d = tmp_path_factory.mktemp("capprobe")
    (d / "probe.c").write_text("\n".join(lines))
    argv = [CC, "-std=c11", "-Wall", "-Werror", f"-I{HEADER.parent}", str(d / "probe.c"), "-o", str(d / "probe")]
    r = subprocess.run(argv, capture_output=True, text=True)
    assert r.returncode == 0, f"probe failed to compile: {' '.join(argv)}\n{r.stderr}"
    out = subprocess.run([str(d / "probe")], capture_output=True, text=True, check=True).stdout
    return {tuple(l.split()[:2]): int(l.split()[2]) for l in out.splitlines()}


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
