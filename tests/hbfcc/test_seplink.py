"""HBFCC_LINK=separate (hbfcc/seplink.py): helpers extern, .maxnreg per instrumented entry, ptxas -c, a cached
helper object, nvlink; the fallbacks to the whole route; the knobs; the default route unchanged.

The builds use CUDA's ptxas and nvlink (CUDA 13) and the real helper PTX (runtime_cuda/ptx)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402

from hbfcc import artifact, cubin, knobs, seplink  # noqa: E402
from hbfcommon.abi import HELPERS  # noqa: E402
from hbfcommon.errors import ConfigError  # noqa: E402

FIX = U.REPO / "tests" / "fixtures" / "triton"
# a one-entry elementwise kernel, a two-pass reduction, and a tensor-core kernel with many registers
MODULES = ("vector_add_f32", "softmax_row", "flash_attn_fwd_d64")


# ---- knobs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("var,value", [("HBFCC_LINK", "both"), ("HBFCC_LINK", "1"),
                                       ("HBFCC_SEPARATE_CAP", "lots"), ("HBFCC_SEPARATE_CAP", "300"),
                                       ("HBFCC_SEPARATE_CAP", "8"), ("HBFCC_SEPARATE_CAP", "-64"),
                                       ("HBFCC_SEPARATE_CAP", "bodies"), ("HBFCC_SEPARATE_CAP", "body64")])
def test_bad_knob_is_a_config_error_naming_the_variable(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as e:
        knobs.load()
    assert var in str(e.value)


def test_knob_values(monkeypatch):
    monkeypatch.delenv("HBFCC_LINK", raising=False)
    monkeypatch.delenv("HBFCC_SEPARATE_CAP", raising=False)
    k = knobs.load()
    assert (k.link, k.separate_cap) == ("whole", None)
    for v, want in (("separate", "separate"), ("WHOLE", "whole"), (" Separate ", "separate")):
        monkeypatch.setenv("HBFCC_LINK", v)
        assert knobs.load().link == want
    for v, want in (("plain", None), ("PLAIN", None), ("", None), ("96", 96), ("0x80", 128), ("255", 255),
                    ("body", "body"), (" Body ", "body")):
        monkeypatch.setenv("HBFCC_SEPARATE_CAP", v)
        assert knobs.load().separate_cap == want


def test_bad_knob_through_the_cli_is_an_error_not_a_traceback(tmp_path):
    U.tool("ptxas")
    for var, value in (("HBFCC_LINK", "sep"), ("HBFCC_SEPARATE_CAP", "999")):
        cp = subprocess.run([U.console("hbfcc-ptxas"), "--version"], capture_output=True, text=True,
                            env=U.env_with(**{var: value}))
        assert cp.returncode == 2, cp
        assert var in cp.stderr and "Traceback" not in cp.stderr


def test_marker_names_the_mode_and_cap(tmp_path):
    U.tool("ptxas")

    def marker(**env):
        cp = subprocess.run([U.console("hbfcc-ptxas"), "--version"], capture_output=True, text=True,
                            env=U.env_with(**{"HBFCC_LINK": None, "HBFCC_SEPARATE_CAP": None, **env}))
        assert cp.returncode == 0, cp.stderr
        return cp.stdout.rstrip("\n").splitlines()[-1]
    default = marker()
    assert "link" not in default.split("helper")[1]
    assert marker(HBFCC_LINK="whole") == default
    sep = marker(HBFCC_LINK="separate")
    assert sep != default and sep.endswith(" link separate cap plain")
    assert marker(HBFCC_LINK="separate", HBFCC_SEPARATE_CAP="96").endswith(" link separate cap 96")
    assert marker(HBFCC_LINK="separate", HBFCC_SEPARATE_CAP="body").endswith(" link separate cap body")


def test_bad_cap_message_names_every_form():
    with pytest.raises(ConfigError) as e:
        knobs.parse_separate_cap("lots")
    assert "'plain', 'body' or a register count in [24, 255]" in str(e.value)


# ---- pieces -----------------------------------------------------------------------------------

def test_plain_cap():
    assert [seplink.plain_cap(n) for n in (None, 0, 26, 64, 65, 72, 73, 168, 250, 255)] == \
        [64, 64, 64, 64, 72, 72, 80, 168, 255, 255]


def test_body_cap_rounds_up_to_8_within_the_floor_and_255():
    assert seplink.FLOOR == 24
    assert [seplink.body_cap(n) for n in (1, 20, 24, 25, 48, 49, 54, 56, 57, 250, 255)] == \
        [24, 24, 24, 32, 48, 56, 56, 56, 64, 255, 255]


def test_entry_caps_records_the_decision():
    from hbfcc.rewrite import rewrite_text
    m = rewrite_text((FIX / "softmax_row.ptx").read_text(), filename="s.ptx", link=False).module
    callers = seplink.callers(m)
    assert callers == {"softmax_kernel"}
    caps, why = seplink.entry_caps(m, {"softmax_kernel": 29}, "body", callers, {"softmax_kernel": 77})
    assert caps == {"softmax_kernel": 80}
    assert why["softmax_kernel"] == {"mode": "body", "body_registers": 77, "cap": 80, "floor": 24,
                                     "source": seplink.BODY_SOURCE, "plain_registers": 29}
    caps, why = seplink.entry_caps(m, {"softmax_kernel": 29}, None, callers)
    assert caps == {"softmax_kernel": 64} and why["softmax_kernel"]["mode"] == "plain"
    caps, why = seplink.entry_caps(m, {}, 96, callers)
    assert caps == {"softmax_kernel": 96} and why["softmax_kernel"]["mode"] == "fixed"
    from hbfcommon.errors import RewriteError
    with pytest.raises(RewriteError, match="no body register count for softmax_kernel"):
        seplink.entry_caps(m, {}, "body", callers, {})


@pytest.mark.parametrize("args,arch,out,why", [
    (["-c", "--gpu-name=sm_90a", "a.ptx", "-o", "a.o"], "sm_90a", "a.o", "relocatable object (-c)"),
    (["--compile-only", "-arch=sm_90a", "a.ptx", "-o", "a.o"], "sm_90a", "a.o", "relocatable object"),
    (["-arch=sm_90a", "-arch=sm_80", "a.ptx", "-o", "a.o"], "sm_80", "a.o", "several -arch"),
    (["-arch=compute_90a", "a.ptx", "-o", "a.o"], "compute_90a", "a.o", "not one sm_XX cubin target"),
    (["a.ptx", "-o", "a.o"], None, "a.o", "not one sm_XX cubin target"),
    (["-arch=sm_90a", "a.ptx"], "sm_90a", None, "no -o output"),
])
def test_unsupported_calls(args, arch, out, why):
    got = seplink.unsupported(args, arch, out, nvcc_step=False, occupancy_guard=False, passes=("timing",))
    assert got is not None and why in got


def test_unsupported_by_knobs():
    a = ["--gpu-name=sm_90a", "a.ptx", "-o", "a.o"]
    assert seplink.unsupported(a, "sm_90a", "a.o", nvcc_step=False, occupancy_guard=False, passes=("timing",)) is None
    assert "nvcc step" in seplink.unsupported(a, "sm_90a", "a.o", nvcc_step=True, occupancy_guard=False,
                                              passes=("timing",))
    assert "OCCUPANCY_GUARD" in seplink.unsupported(a, "sm_90a", "a.o", nvcc_step=False, occupancy_guard=True,
                                                    passes=("timing",))
    assert "eidola" in seplink.unsupported(a, "sm_90a", "a.o", nvcc_step=False, occupancy_guard=False,
                                           passes=("timing", "flags"))


def test_extern_helpers_only_touches_helper_prototypes():
    from hbfcc.ptx.parser import parse_module
    from hbfcc.rewrite import rewrite_text
    res = rewrite_text((FIX / "vector_add_f32.ptx").read_text(), filename="v.ptx", link=False)
    m = seplink.extern_helpers(res.module)
    decl = {f.name: f.linkage for f in m.functions() if f.body is None}
    assert decl and all(n.startswith("__hb_") and lk == (".extern",) for n, lk in decl.items())
    entries = [(f.name, f.linkage) for f in m.functions() if f.body is not None]
    assert entries == [(f.name, f.linkage) for f in res.module.functions() if f.body is not None]
    # a declaration of the module's own (not a helper) keeps its linkage
    own = ".version 8.0\n.target sm_90a\n.address_size 64\n.weak .func (.param .b32 r) mine(.param .b32 a);\n"
    assert seplink.extern_helpers(parse_module(own)) == parse_module(own)


# ---- builds -----------------------------------------------------------------------------------

def _helper() -> str:
    h = U.real_helper_ptx()
    if h is None:
        pytest.skip("the real helper PTX is not built (make helpers-ptx)")
    return h


def build(tmp_path: Path, name: str, *extra: str, tag: str = "", **env) -> tuple[subprocess.CompletedProcess, Path, dict]:
    """hbfcc-ptxas as Triton runs it (-lineinfo -v --gpu-name=sm_90a X.ptx -o X.ptx.o); (process, cubin, record)."""
    U.tool("ptxas")
    d = tmp_path / f"{name}{tag}"
    d.mkdir(exist_ok=True)
    src = d / f"{name}.ptx"
    src.write_text((FIX / f"{name}.ptx").read_text())
    out = d / f"{name}.ptx.o"
    base = {"HBFCC_ARTIFACT_DIR": tmp_path / "store", "HBFCC_CACHE_DIR": tmp_path / "cache",
            "HBFCC_REAL_PTXAS": U.tool("ptxas"), "HBFCC_HELPER_PTX": _helper(), "HBFCC_SIDECAR": "1",
            "HBFCC_LINK": None, "HBFCC_SEPARATE_CAP": None}
    base.update(env)
    cp = subprocess.run([U.console("hbfcc-ptxas"), "-lineinfo", "-v", *extra, "--gpu-name=sm_90a", str(src),
                         "-o", str(out)], capture_output=True, text=True, env=U.env_with(**base), cwd=d)
    assert cp.returncode == 0, cp.stderr[-3000:]
    doc = json.loads(Path(str(out) + ".hbfcc.json").read_text())
    artifact.validate(doc)
    return cp, out, doc


def _symbols(path: Path, objects: bool = False) -> dict[str, str]:
    """name -> section index ('SHN_UNDEF' for an unresolved symbol) of the ELF's symbol table (objects: data
    symbols only)."""
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as f:
        return {s.name: s["st_shndx"] for s in ELFFile(f).get_section_by_name(".symtab").iter_symbols()
                if s.name and (not objects or s["st_info"]["type"] == "STT_OBJECT")}


@pytest.mark.slow
@pytest.mark.parametrize("name", MODULES)
def test_separate_build_links_the_helpers_under_the_caps(tmp_path, name):
    _, out, doc = build(tmp_path, name, HBFCC_LINK="separate")
    link = doc["link"]
    assert link["mode"] == "separate" and link["requested"] == "separate" and link["fallback_reason"] is None
    data = out.read_bytes()
    assert data[:4] == b"\x7fELF"
    # every entry of the module is in the cubin, with its cap as given and its registers within it
    from hbfcc.ptx.parser import parse_module
    entries = [f.name for f in parse_module((FIX / f"{name}.ptx").read_text()).functions()
               if f.is_entry and f.body is not None]
    facts = cubin.function_facts(out)
    assert set(link["caps"]) == set(entries)
    for e in entries:
        k = next(x for x in doc["kernels"] if x["name"] == e)
        want = seplink.plain_cap(k["ptxas_before"]["registers"])
        assert link["caps"][e] == want
        assert 0 < facts[e].registers <= want, (e, facts[e].registers, want)
        assert k["ptxas_after"]["registers"] == facts[e].registers
    assert link["helper_cap"] == min(link["caps"].values())
    # the helpers the kernels call are defined in the cubin (nvlink resolved them), none left undefined
    syms = _symbols(out)
    called = {h for h in HELPERS if h in syms}
    assert {"__hb_issue", "__hb_wait", "__hb_kernel_enter"} <= called
    assert all(syms[h] != "SHN_UNDEF" for h in called), {h: syms[h] for h in called}
    assert not [s for s, ix in syms.items() if s.startswith("__hb_") and ix == "SHN_UNDEF"]
    assert syms.get("__hb_state") not in (None, "SHN_UNDEF")
    # the helper object of the record is the cached one
    ho = link["helper_object"]
    assert ho["cached"] is False
    import hashlib
    assert hashlib.sha256(Path(ho["path"]).read_bytes()).hexdigest() == ho["sha256"]
    assert doc["admitted"] is True
    assert doc["build"]["marker"].endswith("link separate cap plain")
    assert doc["build"]["output_sha256"] == hashlib.sha256(data).hexdigest()


@pytest.mark.slow
def test_integer_cap_and_the_helper_object_cache(tmp_path):
    _, out1, d1 = build(tmp_path, "vector_add_f32", tag="a", HBFCC_LINK="separate", HBFCC_SEPARATE_CAP="80")
    assert d1["link"]["caps"] == {"add_kernel": 80} and d1["link"]["helper_cap"] == 80
    assert d1["link"]["helper_object"]["cached"] is False
    ho = Path(d1["link"]["helper_object"]["path"])
    mtime = ho.stat().st_mtime_ns
    # a second build (another module, same helper, cap, ptxas, arch) takes the object from the cache
    _, out2, d2 = build(tmp_path, "softmax_row", tag="b", HBFCC_LINK="separate", HBFCC_SEPARATE_CAP="80")
    assert d2["link"]["helper_object"]["cached"] is True
    assert d2["link"]["helper_object"]["sha256"] == d1["link"]["helper_object"]["sha256"]
    assert ho.stat().st_mtime_ns == mtime              # not written again
    assert all(f.registers <= 80 for n, f in cubin.function_facts(out2).items() if n in d2["link"]["caps"])
    # a corrupted object is not trusted: assembled again, the same bytes as before
    good = ho.read_bytes()
    ho.write_bytes(good[: len(good) // 2] + b"\0" * 64)
    _, out3, d3 = build(tmp_path, "vector_add_f32", tag="c", HBFCC_LINK="separate", HBFCC_SEPARATE_CAP="80")
    assert d3["link"]["mode"] == "separate" and d3["link"]["helper_object"]["cached"] is False
    assert ho.read_bytes() == good
    assert out3.read_bytes() == out1.read_bytes()
    # a record that is not JSON: the same
    rec = ho.with_suffix(".json")
    rec.write_text("{not json")
    _, _, d4 = build(tmp_path, "vector_add_f32", tag="d", HBFCC_LINK="separate", HBFCC_SEPARATE_CAP="80")
    assert d4["link"]["helper_object"]["cached"] is False and json.loads(rec.read_text())["sha256"] == \
        d1["link"]["helper_object"]["sha256"]
    # another cap is another object
    _, _, d5 = build(tmp_path, "vector_add_f32", tag="e", HBFCC_LINK="separate", HBFCC_SEPARATE_CAP="96")
    assert d5["link"]["helper_object"]["key"] != d1["link"]["helper_object"]["key"]


@pytest.mark.slow
def test_default_route_is_unchanged(tmp_path):
    """HBFCC_LINK unset and HBFCC_LINK=whole: byte-identical cubins, no link record; separate differs."""
    _, unset, du = build(tmp_path, "softmax_row", tag="u")
    _, whole, dw = build(tmp_path, "softmax_row", tag="w", HBFCC_LINK="whole", HBFCC_SEPARATE_CAP="96")
    _, sep, _ = build(tmp_path, "softmax_row", tag="s", HBFCC_LINK="separate")
    assert unset.read_bytes() == whole.read_bytes()
    assert "link" not in du and "link" not in dw
    assert sep.read_bytes() != unset.read_bytes()
    # the globals the runtime binds by name (cuModuleGetGlobal) are defined in the separate cubin as in the whole
    whole_g = {n for n, ix in _symbols(unset, objects=True).items() if n.startswith("__hb_") and ix != "SHN_UNDEF"}
    sep_g = {n for n, ix in _symbols(sep, objects=True).items() if n.startswith("__hb_") and ix != "SHN_UNDEF"}
    assert {"__hb_state", "__hb_cdesc", "__hb_kslot_base"} <= whole_g <= sep_g


@pytest.mark.slow
def test_triton_compile_through_the_separate_link(tmp_path):
    """triton.compile for GPUTarget('cuda', 90, 32) on the CPU with TRITON_PTXAS_PATH=hbfcc-ptxas and
    HBFCC_LINK=separate (CUDA's ptxas: the separate link needs nvlink beside it)."""
    pytest.importorskip("triton")
    import test_cli_triton as T
    got = T.compile_once(tmp_path, TRITON_PTXAS_PATH=U.console("hbfcc-ptxas"), HBFCC_REAL_PTXAS=U.tool("ptxas"),
                         HBFCC_LINK="separate", HBFCC_CACHE_DIR=tmp_path / "cache", HBFCC_HELPER_PTX=_helper())
    assert got["cubin_has_hb"]
    doc = json.loads((tmp_path / "store" / f"{got['ptx_sha256']}.hbfcc.json").read_text())
    artifact.validate(doc)
    assert doc["admitted"] is True
    assert doc["link"]["mode"] == "separate", doc["link"]
    assert set(doc["link"]["caps"]) == {"axpy_atomic"}


@pytest.mark.slow
def test_fallbacks_build_whole_and_say_why(tmp_path):
    _, ref, _ = build(tmp_path, "vector_add_f32", tag="ref")
    # no nvlink beside the ptxas
    lone = tmp_path / "lone"
    lone.mkdir()
    wrapper = lone / "ptxas"
    wrapper.write_text(f'#!/bin/sh\nexec {os.path.realpath(U.tool("ptxas"))} "$@"\n')
    wrapper.chmod(0o755)
    cp, out, doc = build(tmp_path, "vector_add_f32", tag="nonv", HBFCC_LINK="separate", HBFCC_REAL_PTXAS=wrapper)
    assert doc["link"]["mode"] == "whole" and "no nvlink beside" in doc["link"]["fallback_reason"]
    assert "HBFCC_LINK=separate" in cp.stderr and "no nvlink" in cp.stderr
    assert out.read_bytes() == ref.read_bytes()
    # an nvlink that fails: the whole route builds it, the same cubin as the default's
    (lone / "nvlink").write_text("#!/bin/sh\necho 'nvlink: refused by the test' >&2\nexit 3\n")
    (lone / "nvlink").chmod(0o755)
    cp, out, doc = build(tmp_path, "vector_add_f32", tag="badnv", HBFCC_LINK="separate", HBFCC_REAL_PTXAS=wrapper)
    assert doc["link"]["mode"] == "whole" and "nvlink failed (exit 3)" in doc["link"]["fallback_reason"]
    assert "refused by the test" in doc["link"]["fallback_reason"]
    assert out.read_bytes() == ref.read_bytes()
    # the caller asks for a relocatable object
    _, _, doc = build(tmp_path, "vector_add_f32", "-c", tag="c", HBFCC_LINK="separate")
    assert doc["link"]["mode"] == "whole" and "(-c)" in doc["link"]["fallback_reason"]
    # the flags pass
    if Path(U.REPO / "runtime_cuda" / "ptx" / "hbf_eidola_helpers.ptx").is_file():
        _, _, doc = build(tmp_path, "vector_add_f32", tag="fl", HBFCC_LINK="separate", HBFCC_PASSES="timing,flags")
        assert doc["link"]["mode"] == "whole" and "eidola" in doc["link"]["fallback_reason"]


@pytest.mark.slow
def test_module_not_instrumented_is_assembled_as_today(tmp_path):
    """A module below the helper's target is not instrumented: the same cubin in either mode."""
    U.tool("ptxas")
    text = (FIX / "vector_add_f32.ptx").read_text().replace(".target sm_90a", ".target sm_80")
    outs = {}
    for mode in (None, "separate"):
        d = tmp_path / str(mode)
        d.mkdir()
        (d / "m.ptx").write_text(text)
        env = U.env_with(HBFCC_ARTIFACT_DIR=tmp_path / "store", HBFCC_CACHE_DIR=tmp_path / "cache",
                         HBFCC_REAL_PTXAS=U.tool("ptxas"), HBFCC_HELPER_PTX=_helper(), HBFCC_SIDECAR="1",
                         HBFCC_LINK=mode)
        cp = subprocess.run([U.console("hbfcc-ptxas"), "--gpu-name=sm_80", str(d / "m.ptx"), "-o", str(d / "m.o")],
                            capture_output=True, text=True, env=env)
        assert cp.returncode == 0, cp.stderr
        outs[mode] = (d / "m.o").read_bytes()
        doc = json.loads((d / "m.o.hbfcc.json").read_text())
        if mode == "separate":
            assert doc["link"]["mode"] == "whole" and "not instrumented" in doc["link"]["fallback_reason"]
    assert outs[None] == outs["separate"]


def test_helper_header_is_the_same_helper():
    """The separate link's cheap helper identity names the module load_helper parses: same path, sha, header."""
    from hbfcc import helpers as H
    for p in filter(None, (U.real_helper_ptx(),)):
        full, head = H.load_helper(p), H.load_helper_header(p)
        assert (head.path, head.sha256, head.version, head.target_sm, head.abi_version) == \
            (full.path, full.sha256, full.version, full.target_sm, full.abi_version)
        assert head.functions == () and head.globals == ()
    with pytest.raises(ConfigError):
        H.load_helper_header("/nonexistent/helper.ptx")


@pytest.mark.slow
def test_concurrent_builds_share_one_cache_entry(tmp_path):
    """Two hbfcc-ptxas builds at once, empty cache: both link, and the entry left behind is valid (reused)."""
    import concurrent.futures as cf
    _helper()
    with cf.ThreadPoolExecutor(2) as ex:
        docs = list(ex.map(lambda i: build(tmp_path, "vector_add_f32", tag=f"p{i}", HBFCC_LINK="separate")[2],
                           range(2)))
    assert all(d["link"]["mode"] == "separate" for d in docs)
    assert docs[0]["link"]["helper_object"]["key"] == docs[1]["link"]["helper_object"]["key"]
    _, _, again = build(tmp_path, "vector_add_f32", tag="after", HBFCC_LINK="separate")
    assert again["link"]["helper_object"]["cached"] is True
    assert again["link"]["helper_object"]["sha256"] in {d["link"]["helper_object"]["sha256"] for d in docs}


# ---- HBFCC_SEPARATE_CAP=body ------------------------------------------------------------------

def _stub_registers(monkeypatch, tmp_path: Path, name: str, **env) -> dict[str, int]:
    """The entries' registers in the rewrite linked with do-nothing helpers, assembled here with the options build()
    gives (what HBFCC_SEPARATE_CAP=body must measure), under the same knobs."""
    from hbfcc import helpers as H
    from hbfcc.rewrite import rewrite_text
    from hbfcc.toolchain import parse_ptxas_v
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    text = rewrite_text((FIX / f"{name}.ptx").read_text(), filename=f"{name}.ptx", helper=H.stub_helper()).text
    src = tmp_path / f"{name}.stub.ptx"
    src.write_text(text)
    cp = subprocess.run([U.tool("ptxas"), "-lineinfo", "-v", "--gpu-name=sm_90a", str(src), "-o", str(src) + ".o"],
                        capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr[-2000:]
    return {n: f.registers for n, f in parse_ptxas_v(cp.stderr).functions.items() if f.registers}


@pytest.mark.slow
@pytest.mark.parametrize("name", ("vector_add_f32", "softmax_row"))
def test_body_cap_is_the_stub_count_rounded(tmp_path, monkeypatch, name):
    cp, out, doc = build(tmp_path, name, HBFCC_LINK="separate", HBFCC_SEPARATE_CAP="body")
    link = doc["link"]
    assert link["mode"] == "separate" and link["cap_mode"] == "body", link.get("fallback_reason")
    stub = _stub_registers(monkeypatch, tmp_path, name)
    facts = cubin.function_facts(out)
    for e, cap in link["caps"].items():
        d = link["cap_decisions"][e]
        assert d["body_registers"] == stub[e]
        assert cap == d["cap"] == seplink.body_cap(stub[e]) and cap % 8 == 0
        assert d["source"] == seplink.BODY_SOURCE and d["mode"] == "body"
        k = next(x for x in doc["kernels"] if x["name"] == e)
        assert d["plain_registers"] == k["ptxas_before"]["registers"]
        assert 0 < facts[e].registers <= cap, (e, facts[e].registers, cap)
    assert link["helper_cap"] == min(link["caps"].values())
    assert doc["build"]["marker"].endswith("link separate cap body")


@pytest.mark.slow
@pytest.mark.parametrize("name", ("vector_add_f32", "softmax_row"))
def test_body_cap_with_call_isolation_keeps_the_body_spill_free(tmp_path, monkeypatch, name):
    """With HBFCC_CALL_ISOLATION=1 nothing is live across a helper call, so the body assembled with ABI calls needs
    what the stub build measures: at cap = that need the entry (ptxas -c, whose -v output the build relays) has no
    spill, and its local-memory traffic is the isolation's own stores. (Without call isolation the ABI calls make
    the body need far more than the stub build: ptxas 13.0 spills it at that cap -- docs/RESULTS.md
    "wt/sepcap13".)"""
    from hbfcc.toolchain import parse_ptxas_v
    cp, out, doc = build(tmp_path, name, HBFCC_LINK="separate", HBFCC_SEPARATE_CAP="body", HBFCC_CALL_ISOLATION="1")
    link = doc["link"]
    assert link["mode"] == "separate", link.get("fallback_reason")
    stats = parse_ptxas_v(cp.stderr).functions
    stub = _stub_registers(monkeypatch, tmp_path, name, HBFCC_CALL_ISOLATION="1")
    for e, cap in link["caps"].items():
        assert cap >= stub[e]
        assert (stats[e].spill_stores, stats[e].spill_loads) == (0, 0), (e, cap, stats[e])


@pytest.mark.slow
def test_the_floor_cap_assembles_and_links(tmp_path):
    """HBFCC_SEPARATE_CAP=24 (ptxas's lower bound; seplink.FLOOR): the helper object assembles under it (every helper
    spills) and nvlink links it; the kernel keeps 24 registers."""
    _, out, doc = build(tmp_path, "vector_add_f32", HBFCC_LINK="separate", HBFCC_SEPARATE_CAP=str(seplink.FLOOR))
    assert doc["link"]["mode"] == "separate", doc["link"].get("fallback_reason")
    assert doc["link"]["helper_cap"] == seplink.FLOOR
    assert cubin.function_facts(out)["add_kernel"].registers <= seplink.FLOOR


@pytest.mark.slow
def test_body_cap_without_a_stub_build_builds_whole(tmp_path, monkeypatch):
    """The stub-helper build fails (a ptxas wrapper that refuses its input, hot.ptx): the whole route builds the
    module, the reason recorded."""
    lone = tmp_path / "lone"
    lone.mkdir()
    real = os.path.realpath(U.tool("ptxas"))
    (lone / "ptxas").write_text(f'#!/bin/sh\ncase "$*" in *hot.ptx*) echo refused >&2; exit 5;; esac\nexec {real} "$@"\n')
    (lone / "ptxas").chmod(0o755)
    (lone / "nvlink").symlink_to(os.path.join(os.path.dirname(real), "nvlink"))
    cp, _, doc = build(tmp_path, "vector_add_f32", HBFCC_LINK="separate", HBFCC_SEPARATE_CAP="body",
                       HBFCC_REAL_PTXAS=lone / "ptxas")
    assert doc["link"]["mode"] == "whole"
    assert "no body register count for add_kernel" in doc["link"]["fallback_reason"]
