"""Relocatable builds (nvcc -rdc, ptxas -c): the helpers compiled within every caller's register cap
(hbfcc/rdc.py). Real nvcc/ptxas/nvlink; nothing here runs on a GPU: nvlink's register report is the check
(a kernel launches a block of T threads only with registers x T <= 65536)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402

from hbfcc import artifact, rdc  # noqa: E402
from hbfcc import occupancy as O  # noqa: E402
from hbfcc.cubin import function_facts  # noqa: E402
from hbfcc.ptx import parse_module, print_module  # noqa: E402
from hbfcc.ptx.model import Directive  # noqa: E402

BOUNDED = r"""
__global__ void __launch_bounds__(1024, 2) scale(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = a * x[i]; }
"""
UNBOUNDED = r"""
__global__ void plain(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = a * x[i] + 1.0f; }
"""
HALF = r"""
__global__ void __launch_bounds__(640) wide(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = a - x[i]; }
"""


def _helper() -> str:
    h = U.real_helper_ptx()
    if h is None:
        pytest.skip("the real helper PTX (make helpers-ptx) is not built")
    return h


def _env(tmp_path, **kw):
    base = {"HBFCC_ARTIFACT_DIR": tmp_path / "store", "HBFCC_CACHE_DIR": tmp_path / "cache",
            "HBFCC_HELPER_PTX": _helper(), "NVCC_PREPEND_FLAGS": None, "NVCC_APPEND_FLAGS": None}
    base.update(kw)
    return U.env_with(**base)


def _hbfcc(args, tmp_path, **kw) -> subprocess.CompletedProcess:
    U.tool("nvcc")
    cp = subprocess.run([U.console("hbfcc"), *args], capture_output=True, text=True, cwd=tmp_path,
                        env=_env(tmp_path, **kw))
    assert cp.returncode == 0, cp.stderr
    return cp


def _compile(tmp_path, name: str, src: str, *extra: str) -> Path:
    (tmp_path / f"{name}.cu").write_text(src)
    _hbfcc(["-arch=sm_90a", "-rdc=true", "--no-compress", *extra, "-c", f"{name}.cu", "-o", f"{name}.o"], tmp_path)
    return tmp_path / f"{name}.o"


def nvlink_registers(objs, tmp_path) -> dict[str, int]:
    """``nvcc -dlink`` of the objects (in this order) with ``-Xnvlink -v``: registers per kernel."""
    cp = subprocess.run([U.tool("nvcc"), "-arch=sm_90a", "-dlink", *map(str, objs), "-o", str(tmp_path / "dl.o"),
                         "-Xnvlink", "-v"], capture_output=True, text=True, cwd=tmp_path)
    assert cp.returncode == 0, cp.stderr + cp.stdout
    out, regs, name = cp.stdout + cp.stderr, {}, None
    for line in out.splitlines():
        m = re.search(r"Function properties for '([^']+)'", line)
        if m:
            name = m.group(1)
        m = re.search(r"used (\d+) registers", line)
        if m and name:
            regs[name] = int(m.group(1))
    return regs


def _record(obj: Path, target: str = "sm_90a") -> dict:
    doc = json.loads(Path(str(obj) + ".hbfcc.json").read_text())
    (m,) = [m for m in doc["modules"] if m["ptxas"]["target"] == target]
    artifact.validate(m)
    return m


# ---- ptxas's own cap rule ---------------------------------------------------------------------

CAP_CASES = [
    (".maxntid 1024, 1, 1;.minnctapersm 2", 32), (".maxntid 1024", 64), (".maxntid 1000", 64),
    (".maxntid 640", 96), (".maxntid 768", 80), (".maxntid 672", 80), (".maxntid 32, 8, 4", 64),
    (".maxntid 1024;.minnctapersm 3", 64), (".maxntid 512;.minnctapersm 5", 128),
    (".maxntid 96;.minnctapersm 8", 80), (".maxntid 160;.minnctapersm 3", 128), (".maxntid 128;.minnctapersm 5", 96),
    (".reqntid 512;.minnctapersm 2", 64), (".maxnreg 37", 37), (".maxnreg 16", 24),
    (".maxntid 1024;.maxnreg 100", 100), (".maxntid 1024;.minnctapersm 1;.maxnreg 100", 64),
    (".maxntid 1024;.minnctapersm 2;.maxnreg 40", 32), (".maxntid 1024;.minnctapersm 2;.maxnreg 24", 24),
]


def _with_directives(module, spec: str):
    from dataclasses import replace
    ds = tuple(Directive(w[0][1:], tuple(w[1:])) for w in
               (s.replace(",", " , ").split() for s in spec.split(";")))
    items = tuple(replace(it, directives=ds) if getattr(it, "is_entry", False) and it.body is not None else it
                  for it in module.items)
    return replace(module, items=items)


@pytest.fixture(scope="module")
def weak_module():
    """A bounded kernel rewritten with the real helpers, still ``.weak``: ptxas -c then states the
    entry's cap in its error (``max regcount of N``)."""
    from hbfcc import helpers as H
    from hbfcc.rewrite import rewrite_text
    helper = _helper()
    text = U.compile_cu(BOUNDED, extra=("-rdc=true",))
    return rewrite_text(text, helper=H.load_helper(helper)).module


@pytest.mark.parametrize("spec,cap", CAP_CASES)
def test_ptxas_entry_cap_is_what_ptxas_derives(weak_module, tmp_path, spec, cap):
    m = _with_directives(weak_module, spec)
    (entry,) = [f for f in m.functions() if f.is_entry and not f.name.endswith("__hbnat")]   # not the native entry
    assert O.ptxas_entry_cap(entry)[0] == cap
    p = tmp_path / "m.ptx"
    from hbfcc.rewrite import print_text
    p.write_text(print_text(m))
    cp = subprocess.run([U.tool("ptxas"), "-arch=sm_90a", "-c", str(p), "-o", str(tmp_path / "m.o")],
                        capture_output=True, text=True)
    assert cp.returncode != 0
    assert f"with max regcount of {cap} calls function" in cp.stderr


def test_ptxas_entry_cap_sources():
    m = _with_directives(parse_module(".version 8.7\n.target sm_90a\n.address_size 64\n"
                                      ".visible .entry e()\n{\n    ret;\n}\n"), ".maxntid 1024;.minnctapersm 2")
    (e,) = list(m.functions())
    assert O.ptxas_entry_cap(e) == (32, ".maxntid 1024 .minnctapersm 2")
    assert O.ptxas_entry_cap(_one(_with_directives(m, ".maxnreg 300"))) is None       # ignored by ptxas
    assert O.ptxas_entry_cap(_one(_with_directives(m, ".maxnreg 48"))) == (48, ".maxnreg 48")


def _one(m):
    (e,) = list(m.functions())
    return e


def test_user_caps_parsing():
    assert rdc.user_caps(["-arch=sm_90a", "--compile-only", "-maxrregcount=40", "x.ptx"]) == \
        {"maxrregcount": 40, "device_function_maxrregcount": None}
    assert rdc.user_caps(["--maxrregcount", "48", "-func-maxrregcount=24"]) == \
        {"maxrregcount": 48, "device_function_maxrregcount": 24}
    assert rdc.relocatable(["-c"]) and rdc.relocatable(["--compile-only"]) and not rdc.relocatable(["-arch=sm_90a"])
    # hbfcc's device-function cap replaces the caller's (ptxas warns about a second one)
    given = ["-c", "-func-maxrregcount", "64", "x.ptx", "--device-function-maxrregcount=48"]
    assert rdc.with_device_function_cap(given, 32) == ["-c", "x.ptx", "--device-function-maxrregcount=32"]
    assert rdc.with_device_function_cap(["-c", "x.ptx"], None) == ["-c", "x.ptx"]


def test_launch_plan_before_leaves_a_user_cap_that_keeps_the_block():
    m = parse_module(".version 8.7\n.target sm_90a\n.address_size 64\n.visible .entry a()\n{\n    ret;\n}\n")
    d = O.launch_plan_before(m, {"a": 12}, frozenset({"a"}), user_cap=40)
    assert not d["a"]["applied"] and "-maxrregcount 40" in d["a"]["reason"]
    assert O.launch_plan_before(m, {"a": 12}, frozenset({"a"}), user_cap=100)["a"]["maxntid"] == 1024


def test_local_helpers_stage_keeps_globals_weak(weak_module):
    names = rdc.helper_functions(weak_module)
    assert "__hb_issue" in names and all(n.startswith("__hb_") for n in names)
    out = print_module(rdc.stage(weak_module, {rdc.STAGE_NAME: {"local": sorted(names)}}))
    assert not re.search(r"^\.weak \.func", out, re.M) and re.search(r"^\.func .*__hb_issue\(", out, re.M)
    assert re.search(r"^\.weak \.global .*__hb_state;", out, re.M)


# ---- nvcc -rdc, linked with nvlink ------------------------------------------------------------

def test_bounded_and_unbounded_kernels_build_and_link_within_their_bounds(tmp_path):
    """The repro: a __launch_bounds__(1024, 2) kernel failed to build with -rdc (helpers at 156 registers
    against its 32); one without bounds linked at 156 registers (no 1024-thread launch). Two modules with
    different bounds, linked in either order: every kernel within its own bound."""
    k = _compile(tmp_path, "k", BOUNDED)
    u = _compile(tmp_path, "u", UNBOUNDED)
    w = _compile(tmp_path, "w", HALF)
    for order in ([k, u, w], [w, u, k]):
        regs = nvlink_registers(order, tmp_path)
        assert regs["_Z5scalePffi"] <= 32 and regs["_Z5plainPffi"] <= 64 and regs["_Z4widePffi"] <= 96, regs
    rk = _record(k)["link"]["rdc_register_cap"]
    assert rk["helpers"] == "module-local" and "__hb_issue" in rk["local"]
    assert (rk["cap"], rk["set_by"], rk["source"]) == (32, "_Z5scalePffi", ".maxntid 1024 .minnctapersm 2")
    assert rk["entries"]["_Z5scalePffi"]["fits"] and rk["device_function_maxrregcount"] is None
    mu = _record(u)
    assert mu["link"]["rdc_register_cap"]["entries"]["_Z5plainPffi"] == \
        {"cap": 64, "source": ".maxntid 1024", "registers": mu["link"]["rdc_register_cap"]["entries"]["_Z5plainPffi"]
         ["registers"], "external_calls": [], "fits": True}
    assert mu["kernels"][0]["launch_bound"]["applied"]        # the whole-program launch bound, now built
    # the object's helpers are module-local: nothing for nvlink to choose between modules
    from elftools.elf.elffile import ELFFile
    for e in U.fatbin_entries(k.read_bytes()):
        if e["kind"] == 2:
            import io
            elf = ELFFile(io.BytesIO(e["payload"]))
            syms = {s.name: s["st_info"]["bind"] for s in elf.get_section_by_name(".symtab").iter_symbols()}
            assert syms["__hb_issue"] == "STB_LOCAL" and syms["__hb_state"] == "STB_WEAK"


def test_exported_device_function_links_into_a_bounded_kernel(tmp_path):
    """A device function other modules call (b.cu's scale) reaches the helpers: its module's device
    functions are capped at 32 (no launch bound gives less), so a __launch_bounds__(1024, 2) kernel in
    a.cu links (without the cap nvlink refuses: scale -> __hb_issue at 156 registers)."""
    (tmp_path / "a.cu").write_text(r"""
__device__ float scale(float x);
__global__ void __launch_bounds__(1024, 2) kb(float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = scale(y[i]); }
__global__ void ku(float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = scale(y[i]) + 1.0f; }
""")
    (tmp_path / "b.cu").write_text(r"""
__device__ float g_bias = 1.0f;
__device__ float scale(float x) { return x * 2.0f + g_bias; }
""")
    a = _compile(tmp_path, "a", (tmp_path / "a.cu").read_text())
    b = _compile(tmp_path, "b", (tmp_path / "b.cu").read_text())
    regs = nvlink_registers([b, a], tmp_path)
    assert regs["_Z2kbPfi"] <= 32 and regs["_Z2kuPfi"] <= 64, regs
    rb = _record(b)["link"]["rdc_register_cap"]
    assert rb["exported_callers"] == ["_Z5scalef"] and rb["device_function_maxrregcount"] == 32
    assert rb["set_by"] == "_Z5scalef" and f"{rdc.DF_CAP_OPTION}=32" in rb["source"]
    ra = _record(a)["link"]["rdc_register_cap"]
    assert ra["entries"]["_Z2kbPfi"]["external_calls"] == ["_Z5scalef"]
    # the caller's own, larger device-function cap is replaced (no ptxas warning about two), a smaller one kept
    cp = _hbfcc(["-arch=sm_90a", "-rdc=true", "-Xptxas", "--device-function-maxrregcount=64", "-c", "b.cu", "-o",
                 "b64.o"], tmp_path)
    assert "redefinition" not in cp.stderr
    assert nvlink_registers([tmp_path / "b64.o", a], tmp_path)["_Z2kbPfi"] <= 32
    _hbfcc(["-arch=sm_90a", "-rdc=true", "-Xptxas", "--device-function-maxrregcount=24", "-c", "b.cu", "-o",
            "b24.o"], tmp_path)
    r24 = _record(tmp_path / "b24.o")["link"]["rdc_register_cap"]
    assert r24["device_function_maxrregcount"] is None and (r24["cap"], r24["set_by"]) == (24, "(ptxas options)")
    assert nvlink_registers([tmp_path / "b24.o", a], tmp_path)["_Z2kbPfi"] <= 32


def test_user_maxrregcount_is_respected(tmp_path):
    """-maxrregcount=40: ptxas ignores it for an entry with .maxntid, so hbfcc's launch bound (which
    would give 64) is not added where the user's cap already keeps the block launchable: -rdc and
    whole-program alike."""
    u = _compile(tmp_path, "u", UNBOUNDED, "-maxrregcount=40")
    assert nvlink_registers([u], tmp_path)["_Z5plainPffi"] <= 40
    m = _record(u)
    assert not m["kernels"][0]["launch_bound"]["applied"]
    r = m["link"]["rdc_register_cap"]
    assert r["user"]["maxrregcount"] == 40 and r["entries"]["_Z5plainPffi"]["cap"] == 40
    # whole-program (no -rdc): the cubin's kernel within 40 too
    _hbfcc(["-arch=sm_90a", "-maxrregcount=40", "-cubin", "u.cu", "-o", "u.cubin"], tmp_path)
    assert function_facts(tmp_path / "u.cubin")["_Z5plainPffi"].registers <= 40


def test_whole_program_build_keeps_weak_helpers_and_no_rdc_record(tmp_path):
    (tmp_path / "u.cu").write_text(UNBOUNDED)
    _hbfcc(["-arch=sm_90a", "--no-compress", "-c", "u.cu", "-o", "u.o"], tmp_path)
    m = _record(tmp_path / "u.o")
    assert "link" not in m and m["kernels"][0]["launch_bound"]["applied"]
    ptx = [e for e in U.fatbin_entries((tmp_path / "u.o").read_bytes()) if e["kind"] == 1]
    assert ptx and all(b".weak .func" in e["payload"] for e in ptx)
