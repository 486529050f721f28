"""The flags pass in hbfcc's pipeline (issue 7): selected by HBFCC_PASSES, the eidola helper PTX
linked textually (sha256 in the artifact), its functions admitted callees, non-flag global reads
counted, spin loops (with timeout checks) parked with monitor/mwait; the output assembles."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402

from hbfcommon import abi  # noqa: E402
from hbfcommon.errors import ConfigError  # noqa: E402
from hbfcc import artifact, knobs  # noqa: E402
from hbfcc import helpers as H  # noqa: E402
from hbfcc.link import link  # noqa: E402
from hbfcc.passes.flags import _spin_loops, flags_pass  # noqa: E402
from hbfcc.ptx import parse_module, print_module  # noqa: E402
from hbfcc.ptx.model import Block, Function, Instruction  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402

SPIN = r"""
extern "C" __global__ void k(const unsigned* f, unsigned s, unsigned* polls, const float* d, float* y,
                             unsigned long long tmo) {
    unsigned long long t0; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    unsigned n = 1;
    while (*(volatile const unsigned*)&f[blockIdx.x] != s) {
        ++n;
        unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > tmo) __trap();
    }
    polls[blockIdx.x] = n;
    float a = 0.f;
    for (int i = threadIdx.x; i < 1000; i += 32) a += __ldg(&d[i]);
    if (threadIdx.x & 1) a += d[threadIdx.x + 1000];
    y[threadIdx.x] = a;
}
__device__ __noinline__ float helper_fn(const float* d) { return d[3]; }
extern "C" __global__ void k2(const unsigned* f, unsigned* o, const float* d) {
    o[0] = *(volatile const unsigned*)f + (unsigned)helper_fn(d);
}
"""


@pytest.fixture(scope="module")
def eidola_ptx(tmp_path_factory) -> str:
    """The build tree's eidola helper (make helpers-ptx), else built here from the same source."""
    p = H.default_eidola_helper_path()
    if p.is_file():
        return str(p)
    U.tool("nvcc")
    from hbfcc.passes.flags import build_extern_ptx
    return str(build_extern_ptx(tmp_path_factory.mktemp("eidola")))


@pytest.fixture
def env(monkeypatch, eidola_ptx):
    monkeypatch.setenv("HBFCC_EIDOLA_HELPER_PTX", eidola_ptx)
    monkeypatch.delenv("HBFCC_PASSES", raising=False)
    helper = U.real_helper_ptx() or U.fixture_helper_ptx()
    monkeypatch.setenv("HBFCC_HELPER_PTX", helper)
    return {"eidola": eidola_ptx, "helper": helper}


@pytest.fixture(scope="module")
def spin_ptx() -> str:
    return U.compile_cu(SPIN, arch="compute_90a")


# ---- the knob ------------------------------------------------------------------------------

def test_passes_knob(monkeypatch):
    monkeypatch.delenv("HBFCC_PASSES", raising=False)
    assert knobs.load().passes == ("timing",)
    monkeypatch.setenv("HBFCC_PASSES", "flags, timing")
    assert knobs.load().passes == ("timing", "flags")
    monkeypatch.setenv("HBFCC_PASSES", "mwait,flags,timing")
    assert knobs.load().passes == ("timing", "flags", "mwait")
    for bad, word in (("timing,flag", "unknown pass"), ("flags", "must include 'timing'"),
                      ("timing,mwait", "add 'flags'")):
        monkeypatch.setenv("HBFCC_PASSES", bad)
        with pytest.raises(ConfigError, match=word):
            knobs.load()


def test_marker_line_changes_with_passes(monkeypatch, env):
    from hbfcc.cli import marker_line
    plain = marker_line()
    monkeypatch.setenv("HBFCC_PASSES", "timing,flags")
    fl = marker_line()
    monkeypatch.setenv("HBFCC_PASSES", "timing,flags,mwait")
    mw = marker_line()
    assert len({plain, fl, mw}) == 3          # Triton's cache key sees the selection
    sha = hashlib.sha256(Path(env["eidola"]).read_bytes()).hexdigest()
    assert "passes timing+flags eidola " + sha[:16] in fl


# ---- the pipeline ----------------------------------------------------------------------------

def test_default_pipeline_has_no_flags_pass(env, spin_ptx):
    r = rewrite_text(spin_ptx)
    assert "flags" not in r.meta and r.meta["passes"] == ["timing"]
    assert "__hb_eidola" not in r.text
    doc = artifact.build(path="k.ptx", result=r, ptxas=None, before=None, after=None)
    assert doc["passes"] == ["timing"] and doc["eidola_helper"] is None


@pytest.mark.parametrize("passes", [("timing", "flags"), ("timing", "flags", "mwait")])
def test_flags_pipeline_admitted_linked_assembles(env, spin_ptx, passes):
    r = rewrite_text(spin_ptx, passes=passes)
    fl = r.meta["flags"]
    assert fl["rewritten_loads"] >= 2 and fl["entries"] == ["k", "k2"]   # the peeled first poll too
    assert fl["spin_loops_parked"] == (1 if "mwait" in passes else 0)
    funcs = {f["name"]: f for f in r.meta["timing"]["functions"]}
    assert "__hb_eidola_ld_flag32_acct" in funcs["k"]["calls"] and "__hb_eidola_kernel_enter" in funcs["k"]["calls"]
    assert {"__hb_eidola_flush_flag", "__hb_eidola_flush_nonflag"} <= set(funcs["k"]["calls"])
    assert all(f["admitted"] for f in funcs.values()), {n: f["not_admitted_reasons"] for n, f in funcs.items()}
    assert all(not f["external_calls"] for f in funcs.values())
    # linked: every eidola function called is defined once, the state global once, all weak
    m = parse_module(r.text)
    for name in fl["extern"]:
        defs = [f for f in m.functions() if f.name == name and f.body is not None]
        assert len(defs) == 1 and defs[0].linkage == (".weak",), name
    state = [g for g in m.globals() if any(d.name == "__hb_eidola_state" for d in g.decls)]
    assert [(g.linkage, g.attrs, g.type) for g in state] == [((".weak",), (".align 8",), ".u64")]
    assert "sha256 " + hashlib.sha256(Path(env["eidola"]).read_bytes()).hexdigest() in r.text
    U.assemble(r.text)
    doc = artifact.build(path="k.ptx", result=r, ptxas=None, before=None, after=None)
    artifact.validate(doc)
    assert doc["admitted"] is True and doc["passes"] == list(passes)
    assert doc["eidola_helper"]["sha256"] == hashlib.sha256(Path(env["eidola"]).read_bytes()).hexdigest()
    assert set(doc["eidola_helper"]["functions"]) >= set(abi.EIDOLA_HELPERS)
    assert doc["flags"]["rewritten_loads"] == fl["rewritten_loads"]


def test_other_external_calls_still_refuse_admission(env):
    ptx = """.version 8.0
.target sm_90a
.address_size 64
.extern .func (.param .b32 r) foo(.param .b64 a);
.visible .entry k(.param .u64 p)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [p];
    cvta.to.global.u64 %rd2, %rd1;
    ld.volatile.global.u32 %r1, [%rd2];
    { .param .b64 a0; .param .b32 r0; st.param.b64 [a0], %rd2; call (r0), foo, (a0); ld.param.b32 %r2, [r0]; }
    st.global.u32 [%rd2+4], %r2;
    ret;
}
"""
    r = rewrite_text(ptx, passes=("timing", "flags"))
    k = r.meta["timing"]["functions"][0]
    assert k["admitted"] is False
    assert k["not_admitted_reasons"] == ["calls external function foo (not seen by this rewrite)"]
    assert "__hb_eidola_ld_flag32_acct" in k["calls"]


def test_without_the_helper_the_flags_pass_fails_loudly(monkeypatch, env, spin_ptx, tmp_path):
    monkeypatch.setenv("HBFCC_EIDOLA_HELPER_PTX", str(tmp_path / "missing.ptx"))
    with pytest.raises(ConfigError, match="eidola helper PTX not found"):
        rewrite_text(spin_ptx, passes=("timing", "flags"))


def test_wrong_helper_signature_is_refused(monkeypatch, env, spin_ptx, tmp_path):
    bad = Path(env["eidola"]).read_text().replace("__hb_eidola_mwait(\n\t.param .b64", "__hb_eidola_mwait(\n\t.param .b32", 1)
    assert bad != Path(env["eidola"]).read_text()
    (tmp_path / "bad.ptx").write_text(bad)
    monkeypatch.setenv("HBFCC_EIDOLA_HELPER_PTX", str(tmp_path / "bad.ptx"))
    from hbfcommon.errors import RewriteError
    with pytest.raises(RewriteError, match="signature differs"):
        rewrite_text(spin_ptx, passes=("timing", "flags"))


def test_link_skips_functions_the_module_already_defines(env, spin_ptx):
    r = rewrite_text(spin_ptx, passes=("timing", "flags"))
    again = print_module(link(parse_module(r.text), H.load_eidola_helper()))
    n = lambda t: sum(1 for f in parse_module(t).functions()  # noqa: E731
                      if f.body is not None and f.name == "__hb_eidola_ld_flag32_acct")
    assert n(again) == n(r.text) == 1
    U.assemble(again)


# ---- counting and spin-loop recognition ------------------------------------------------------

def _count_blocks(body) -> int:
    n = 0
    for st in body:
        if isinstance(st, Block):
            ops = [x.opcode for x in st.body if isinstance(x, Instruction)]
            if "activemask" in ops:
                n += 1
            n += _count_blocks(st.body)
    return n


def test_nonflag_counting_sites_and_flushes(spin_ptx):
    mod = parse_module(spin_ptx)
    n_global = {f.name: sum(1 for i in f.instructions() if i.opcode in ("ld", "ldu") and "global" in i.modifiers
                            and not {"volatile", "acquire", "relaxed"} & set(i.modifiers))
                for f in mod.functions() if f.body is not None}
    meta: dict = {}
    out = flags_pass(mod, meta, count_nonflag=True)
    assert meta["flags"]["nonflag_sites"] == {k: v for k, v in n_global.items() if v}
    assert n_global["k"] >= 2                               # __ldg + the guarded plain load
    for f in out.functions():
        if f.body is None or f.name not in meta["flags"]["nonflag_sites"]:
            continue
        assert _count_blocks(f.body) == n_global[f.name]
        # both flushes before every ret/exit, with the same guard
        flat = list(f.instructions())
        for i, ins in enumerate(flat):
            if ins.opcode in ("ret", "exit"):
                calls = [x for x in flat[max(0, i - 12):i] if x.opcode == "call"]
                assert [c.operands[0].name for c in calls[-2:]] == ["__hb_eidola_flush_nonflag", "__hb_eidola_flush_flag"]
                assert all(c.guard == ins.guard for c in calls[-2:])
    assert "%lanemask_eq" in print_module(out)


def test_guarded_load_counts_lanes_whose_guard_holds(env):
    """@%p ld.global: the warp count goes to the lowest lane among those whose guard holds
    (vote.ballot over the guard), the thread count is guarded like the load."""
    ptx = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 p)
{
    .reg .pred %p<3>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [p];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    and.b32 %r2, %r1, 1;
    setp.eq.u32 %p1, %r2, 1;
    @%p1 ld.global.u32 %r3, [%rd2];
    @!%p1 ld.global.nc.u32 %r4, [%rd2+4];
    @%p1 ld.volatile.global.u32 %r3, [%rd2+12];
    add.u32 %r5, %r3, %r4;
    st.global.u32 [%rd2+8], %r5;
    @%p1 ret;
    ret;
}
"""
    r = rewrite_text(ptx, passes=("timing", "flags"))
    assert r.meta["flags"]["nonflag_sites"] == {"k": 2}
    assert "vote.sync.ballot.b32 \t%__hb_nm, %p1, %__hb_nm;" in r.text.replace("\t\t", "\t")
    assert "vote.sync.ballot.b32 \t%__hb_nm, !%p1, %__hb_nm;" in r.text.replace("\t\t", "\t")
    # wt/grp13: the ballot's mask is the active lanes OR-ed with this lane's bit (checked per lane by ptxas)
    t = r.text.replace("\t\t", "\t")
    assert t.count("or.b32 \t%__hb_nm, %__hb_nm, %__hb_ne;") == t.count("vote.sync.ballot.b32 \t%__hb_nm,") >= 2
    assert "@%p1 add.u32 \t%__hb_nft" in r.text and "@!%p1 add.u32 \t%__hb_nft" in r.text
    # before both rets, guarded alike, in the instrumented and in the native version (the timing pass
    # keeps a copy of the flags-rewritten body for launches with nothing registered)
    assert r.text.count("call \t__hb_eidola_flush_nonflag") == 4
    assert "@%p1 call \t__hb_eidola_flush_nonflag" in r.text
    assert "@!%p1 mov.b64 \t%__hb_fr, 0;" in r.text            # lanes that did not load count nothing
    assert r.meta["timing"]["functions"][0]["admitted"]
    U.assemble(r.text)


def _body(ptx_body: str):
    mod = parse_module(".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry k(.param .u64 p)\n{\n"
                       "    .reg .pred %p<4>;\n    .reg .b32 %r<9>;\n    .reg .b64 %rd<9>;\n" + ptx_body + "\n    ret;\n}\n")
    return next(f for f in mod.functions() if isinstance(f, Function)).body


def test_spin_loop_recognition():
    # the plain GEMV's shape: timeout check in the loop, an inner label, backward branch on ne
    parked = _body("$L1:\n    add.s32 %r2, %r2, 1;\n    mov.u64 %rd3, %globaltimer;\n    setp.le.u64 %p2, %rd3, %rd4;\n"
                   "    @%p2 bra $L2;\n    trap;\n$L2:\n    ld.volatile.global.u32 %r1, [%rd1];\n"
                   "    setp.ne.s32 %p1, %r1, %r3;\n    @%p1 bra $L1;")
    assert len(_spin_loops(parked)) == 1
    eq_form = _body("$L1:\n    ld.acquire.gpu.global.u32 %r1, [%rd1+8];\n    setp.eq.u32 %p1, %r1, 7;\n"
                    "    add.s32 %r2, %r2, 1;\n    @!%p1 bra $L1;")
    (addr, k), = _spin_loops(eq_form).values()
    assert addr.offset == 8 and str(k) == "7"
    # not spin-waits: a forward exit test, K redefined before the branch, a call in between
    assert not _spin_loops(_body("ld.volatile.global.u32 %r1, [%rd1];\n    setp.eq.s32 %p1, %r1, %r3;\n"
                                 "    @%p1 bra $L9;\n$L9:"))
    assert not _spin_loops(_body("$L1:\n    ld.volatile.global.u32 %r1, [%rd1];\n    setp.ne.s32 %p1, %r1, %r3;\n"
                                 "    add.s32 %r3, %r3, 1;\n    @%p1 bra $L1;"))
    assert not _spin_loops(_body("$L1:\n    ld.volatile.global.u32 %r1, [%rd1];\n    setp.ne.s32 %p1, %r1, %r3;\n"
                                 "    membar.gl;\n    bar.sync 0;\n    @%p1 bra $L1;"))


# ---- the entry points --------------------------------------------------------------------------

def test_rewrite_cli_passes_option(env, spin_ptx, tmp_path):
    (tmp_path / "k.ptx").write_text(spin_ptx)
    cp = subprocess.run([sys.executable, "-m", "hbfcc.cli", "rewrite", str(tmp_path / "k.ptx"), "-o",
                         str(tmp_path / "o.ptx"), "--passes", "timing,flags,mwait"],
                        capture_output=True, text=True, env=U.env_with(HBFCC_EIDOLA_HELPER_PTX=env["eidola"],
                                                                       HBFCC_HELPER_PTX=env["helper"]))
    assert cp.returncode == 0, cp.stderr
    doc = json.loads((tmp_path / "o.ptx.hbfcc.json").read_text())
    assert doc["passes"] == ["timing", "flags", "mwait"] and doc["admitted"] is True
    assert doc["flags"]["spin_loops_parked"] == 1
    U.assemble((tmp_path / "o.ptx").read_text())


def test_ptxas_entry_point_triton_style(env, spin_ptx, tmp_path):
    """hbfcc-ptxas (TRITON_PTXAS_PATH) with HBFCC_PASSES: rewritten, admitted, artifact in the store
    under the ORIGINAL PTX's sha256 (what runtime_cuda looks up for a Triton kernel)."""
    (tmp_path / "k.ptx").write_text(spin_ptx)
    e = U.env_with(HBFCC_EIDOLA_HELPER_PTX=env["eidola"], HBFCC_HELPER_PTX=env["helper"],
                   HBFCC_ARTIFACT_DIR=tmp_path / "store", HBFCC_PASSES="timing,flags")
    cp = subprocess.run([sys.executable, "-m", "hbfcc.cli", "ptxas", "-arch=sm_90a", "k.ptx", "-o", "k.cubin"],
                        capture_output=True, text=True, env=e, cwd=tmp_path)
    assert cp.returncode == 0, cp.stderr
    assert (tmp_path / "k.cubin").stat().st_size > 0
    doc = json.loads((tmp_path / "store" / f"{hashlib.sha256(spin_ptx.encode()).hexdigest()}.hbfcc.json").read_text())
    assert doc["passes"] == ["timing", "flags"] and doc["admitted"] is True
    assert doc["eidola_helper"]["sha256"] == hashlib.sha256(Path(env["eidola"]).read_bytes()).hexdigest()
    ver = subprocess.run([sys.executable, "-m", "hbfcc.cli", "ptxas", "--version"], capture_output=True, text=True,
                         env=e).stdout
    assert "passes timing+flags eidola" in ver


def test_nvcc_entry_point_builds_the_plain_gemv(env, tmp_path):
    """workloads/gemv_allreduce/gemv_allreduce_plain.cu through `hbfcc -cubin` with HBFCC_PASSES."""
    U.tool("nvcc")
    from workloads.gemv_allreduce.plain import build_plain
    e = U.env_with(HBFCC_EIDOLA_HELPER_PTX=env["eidola"], HBFCC_HELPER_PTX=env["helper"],
                   HBFCC_CACHE_DIR=tmp_path / "cache", NVCC_PREPEND_FLAGS=None, NVCC_APPEND_FLAGS=None)
    cubin, doc = build_plain(tmp_path, passes=("timing", "flags", "mwait"), env=e)
    assert cubin.stat().st_size > 0
    assert doc["admitted"] is True and doc["passes"] == ["timing", "flags", "mwait"]
    assert doc["flags"]["rewritten_loads"] == 2 and doc["flags"]["spin_loops_parked"] == 1
    assert doc["eidola_helper"]["sha256"] == hashlib.sha256(Path(env["eidola"]).read_bytes()).hexdigest()
    assert doc["flags"]["nonflag_sites"]["gemv_allreduce_plain_kernel"] >= 3


# ---- on the GPU: the hbfcc-built plain GEMV counts like the hand-instrumented one -------------

def _gpu() -> bool:
    try:
        from runtime_cuda import cudrv
        return cudrv.gpu_available()
    except Exception:  # noqa: BLE001
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu(), reason="no GPU")
@pytest.mark.parametrize("wait", ["spin", "hoare"])
def test_plain_gemv_counts_match_hand_on_gpu(tmp_path, wait):
    import numpy as np

    from eidola.generator import uniform_delay
    from eidola import replay as E
    from workloads.gemv_allreduce import fused as F
    from workloads.gemv_allreduce.plain import PlainKernel, build_plain, run_plain
    passes = ("timing", "flags") if wait == "spin" else ("timing", "flags", "mwait")
    cubin, doc = build_plain(tmp_path, passes=passes)
    assert doc["admitted"]
    rt = E.EidolaRuntime.create()
    pk = PlainKernel(cubin, rt.device)
    shape = F.GarShape(n_gpus=4, M=256, Kl=256, tiles=32)
    g = F.GemvAllReduce(rt, shape)
    rep = E.Replay(rt, [g.flag_region()], arm_slots=shape.tiles * shape.threads)
    rep.register_trace(uniform_delay(n_gpus=4, tiles=32, tile_rows=8, delay_ns=20000), g.bases())
    rep.install(engine="virtual", mon_mode="off" if wait == "spin" else "hoare")
    hand = g.run_replay(rep, wait=wait, engine="virtual")
    plain = run_plain(pk, g, rep, engine="virtual")
    ref = g.reference_y()
    for o in (hand, plain):
        assert np.array_equal(o["y"].view(np.uint32), ref.view(np.uint32))
    assert (hand["seen_rel"][:, 1:] >= 20000).all()
    ha, pa = hand["accounting"], plain["accounting"]
    assert pa["nonflag_reads_thread"] == ha["nonflag_reads_thread"] > 0
    assert pa["nonflag_reads_warp"] == ha["nonflag_reads_warp"] > 0
    polls = plain["polls"][:, 1:].astype(np.int64)
    assert pa["flag_reads_thread"] == (int(polls.sum()) if wait == "spin" else int((2 * polls - 1).sum()))
    assert ha["flag_reads_thread"] == int(hand["polls"][:, 1:].astype(np.int64).sum())
    if wait == "hoare":   # 20 us: past the compute phase, every waiting lane parks (arms; the hit ones skip mwait)
        assert pa["monitor_arms"] >= 1 and pa["mwait_calls"] <= pa["monitor_arms"]
