"""runtime_cuda/devstate.py mirrors runtime_cuda/include/hbf_device.h (offsetof/sizeof probe), and the
Python constants match hbf_abi.h / hbf_device.h."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hbfcommon import ctl as C
from runtime_cuda import devstate as D

INC = Path(__file__).resolve().parents[2] / "runtime_cuda" / "include"
CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def _c_structs(path: Path) -> dict[str, list[str]]:
    text = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)
    out = {}
    for m in re.finditer(r"typedef struct (\w+) \{(.*?)\} (\w+);", text, flags=re.S):
        out[m.group(3)] = re.findall(r"^\s*[\w ]+?\s+(\w+)\s*(?:\[[^\]]+\])?\s*;", m.group(2), flags=re.M)
    return out


def test_mirror_has_every_struct_and_field_in_order():
    cs = _c_structs(INC / "hbf_device.h")
    assert set(cs) == set(D.STRUCTS)
    for name, fields in cs.items():
        assert fields == [f[0] for f in D.STRUCTS[name]._fields_], name


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    if CC is None:
        pytest.fail("no C compiler found: the layout probe cannot run")
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "hbf_device.h"', '#include "hbf_abi.h"',
             "int main(void) {"]
    for sname, cls in D.STRUCTS.items():
        lines.append(f'printf("size {sname} %zu\\n", sizeof({sname}));')
        for fname, *_ in cls._fields_:
            lines.append(f'printf("off {sname}.{fname} %zu\\n", offsetof({sname}, {fname}));')
            lines.append(f'printf("fsize {sname}.{fname} %zu\\n", sizeof((({sname}*)0)->{fname}));')
    for hdr in ("hbf_device.h", "hbf_abi.h"):
        for n in re.findall(r"^#define (HBF_\w+)[ \t]+\S", (INC / hdr).read_text(), flags=re.M):
            if n.endswith("_H") or "(" in n:
                continue
            lines.append(f'printf("def {n} %llu\\n", (unsigned long long)({n}));')
    lines.append("return 0; }")
    d = tmp_path_factory.mktemp("probe")
    (d / "probe.c").write_text("\n".join(lines))
    argv = [CC, "-std=c11", "-Wall", "-Werror", f"-I{INC}", str(d / "probe.c"), "-o", str(d / "probe")]
    r = subprocess.run(argv, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = subprocess.run([str(d / "probe")], capture_output=True, text=True, check=True).stdout
    res = {}
    for ln in out.splitlines():
        kind, key, val = ln.split()
        res[(kind, key)] = int(val)
    return res


def test_sizes_and_offsets_match(probe):
    import ctypes
    for sname, cls in D.STRUCTS.items():
        assert probe[("size", sname)] == ctypes.sizeof(cls), sname
        for fname, *_ in cls._fields_:
            assert probe[("off", f"{sname}.{fname}")] == getattr(cls, fname).offset, (sname, fname)
            assert probe[("fsize", f"{sname}.{fname}")] == getattr(cls, fname).size, (sname, fname)


def test_constants_match(probe):
    defs = {k[1]: v for k, v in probe.items() if k[0] == "def"}
    py = {"HBF_DEVSTATE_MAGIC": D.HBF_DEVSTATE_MAGIC, "HBF_DEVSTATE_VERSION": D.HBF_DEVSTATE_VERSION,
          "HBF_DEV_MAX_CHANNELS": D.HBF_DEV_MAX_CHANNELS, "HBF_DEV_MAX_BANKS": D.HBF_DEV_MAX_BANKS, "HBF_BUF_READY_BITS": D.HBF_BUF_READY_BITS,
          "HBF_DEV_GUARD_BYTES": D.HBF_DEV_GUARD_BYTES, "HBF_DSF_ALLOW_UNMODELED": D.HBF_DSF_ALLOW_UNMODELED,
          "HBF_HELPER_ABI_VERSION": D.HBF_HELPER_ABI_VERSION, "HBF_F_OP_MASK": D.HBF_F_OP_MASK,
          "HBF_F_ACTIVE": D.HBF_F_ACTIVE, "HBF_F_GENERIC": D.HBF_F_GENERIC, "HBF_F_WAIT_NOW": D.HBF_F_WAIT_NOW,
          "HBF_F_NC": D.HBF_F_NC, "HBF_F_RELEASE": D.HBF_F_RELEASE,
          "HBF_FUTURE_TICKET_BIT": D.HBF_FUTURE_TICKET_BIT, "HBF_KSHARDS": D.HBF_KSHARDS,
          "HBF_THC_REPLICA_STRIDE": D.HBF_THC_REPLICA_STRIDE}
    assert set(py) == set(defs), set(defs) ^ set(py)
    for k, v in py.items():
        assert defs[k] == v, k


def test_native_reject_line_is_first():
    """__hb_issue reads {lo, span} as one 16-byte load at offset 0 of the block."""
    assert D.hbf_device_state.lo.offset == 0 and D.hbf_device_state.span.offset == 8
    assert D.hbf_device_state.range_seq.offset < 64 and D.HEAD_BYTES % 64 == 0


def _r(base, length, rid=1, mode=C.HBF_MODE_TIMING, perms=C.HBF_PERM_ALL, pb=4096):
    return D.DevRange(base, length, 0, rid, mode, perms, pb)


def test_fill_ranges_bounds_and_order():
    st = D.new_state(0, None, D.RunParams())
    assert st.span == 0 and st.n_ranges == 0          # nothing registered: every address is native
    D.fill_ranges(st, [_r(0x30000000, 8192, 2), _r(0x10000000, 4096, 1)], 5)
    assert st.n_ranges == 2 and st.generation == 5
    assert [st.ranges[i].base for i in range(2)] == [0x10000000, 0x30000000]
    assert st.ranges[0].end == 0x10001000 and st.ranges[0].page_shift == 12
    assert st.lo == 0x10000000 - D.HBF_DEV_GUARD_BYTES
    assert st.lo + st.span == 0x30002000
    addr_in, addr_below = 0x10000010, 0x10000000 - D.HBF_DEV_GUARD_BYTES - 1
    assert (addr_in - st.lo) % (1 << 64) < st.span
    assert (addr_below - st.lo) % (1 << 64) >= st.span


@pytest.mark.parametrize("bad,code", [
    ([_r(0x1000, 8192, 1), _r(0x2000, 4096, 2)], "RANGE_OVERLAP"),
    ([_r(0x1000, 0, 1)], "RANGE_ZERO_LENGTH"),
    ([_r(0x1000, 4096, 1, pb=3000)], "RANGE_MISALIGNED"),
])
def test_fill_ranges_rejects(bad, code):
    from hbfcommon.errors import RangeError
    st = D.new_state(0, None, D.RunParams())
    with pytest.raises(RangeError) as ei:
        D.fill_ranges(st, bad, 1)
    assert ei.value.code.name == code
