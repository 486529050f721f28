"""TMA and the bulk async copies in the timing pass (issue 15; hbfcc/passes/tma.py, docs/design.md §3.3
"TMA and bulk async copies"): the admission decision and reason of every form, where the helper calls land
(__hb_tma before the native copy, the wait hook after an mbarrier wait that returned true, the bulk-group
waits), and that every rewritten module assembles with ptxas 13 for sm_90a with the helper modules linked --
hand-written fixtures of every form and the real Triton 3.6 TMA kernels (tests/fixtures/triton/tma_*.ptx:
host TensorDescriptor, device tl.make_tensor_descriptor, pipelined TMA matmuls)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402

from hbfcommon import abi  # noqa: E402
from hbfcc import helpers as H  # noqa: E402
from hbfcc.passes.timing import timing_pass  # noqa: E402
from hbfcc.ptx import parse_module  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402

HDR = ".version 8.6\n.target sm_90a\n.address_size 64\n"
TRITON = U.REPO / "tests" / "fixtures" / "triton"


def kernel(body: str) -> str:
    return HDR + f"""
.visible .entry k(.param .align 64 .b8 k_tm[128], .param .u64 k_p)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    .reg .b16 %rs<4>;
    .shared .align 128 .b8 smem[4096];
    .shared .align 8 .b64 bar;
    .shared .align 8 .b64 bar2;
    mov.b64 %rd1, k_tm;
    cvta.param.u64 %rd1, %rd1;
    ld.param.u64 %rd2, [k_p];
    mov.u32 %r1, smem;
    mov.u32 %r2, bar;
    add.u32 %r3, %r1, 2048;
    mov.u32 %r4, 0;
    mov.u32 %r5, 8;
    mov.u32 %r6, 0;
    mov.u16 %rs1, 3;
    mov.u64 %rd3, 0;
    elect.sync %r10|%p1, -1;
    mbarrier.init.shared.b64 [%r2], 1;
{body}
    ret;
}}
"""


def run_pass(text: str):
    meta = {"hoist_issues": False, "inline_issues": False}
    return timing_pass(parse_module(text), meta), meta


def fn_report(text: str) -> dict:
    return run_pass(text)[1]["timing"]["functions"][0]


def assemble_linked(text: str, both: bool = False) -> list[str]:
    """Rewrite with the real helper module (``both``: and the fixture) and ptxas the result; the ptxas -v lines."""
    out = []
    for hp in (U.helper_paths() if both else U.helper_paths()[:1]):
        res = rewrite_text(text, helper=H.load_helper(hp))
        out.append(U.assemble(res.text).stderr)
    return out


WAIT = "    { .reg .pred c; w: mbarrier.try_wait.parity.shared.b64 c, [%r2], %r6; @!c bra.uni w; }"
ARRIVE = "    @%p1 mbarrier.arrive.expect_tx.shared.b64 _, [%r2], 256;"

# (name, body, class, action, reason substring); every form that ptxas accepts on sm_90a is also assembled
FORMS = [
    ("bulk_load", ARRIVE + "\n    @%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd2], 256, [%r2];\n" + WAIT,
     "tma.load.bulk", "rewritten", ""),
    ("bulk_load_cta", ARRIVE + "\n    @%p1 cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes [%r1], [%rd2], 256, [%r2];\n" + WAIT,
     "tma.load.bulk", "rewritten", ""),
    ("bulk_load_multicast", ARRIVE + "\n    @%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%r1], [%rd2], 256, [%r2], %rs1;\n" + WAIT,
     "tma.load.bulk", "rewritten", ""),
    ("bulk_store", "    cp.async.bulk.global.shared::cta.bulk_group [%rd2], [%r1], 256;\n    cp.async.bulk.commit_group;\n"
     "    cp.async.bulk.wait_group 0;", "tma.store.bulk", "rewritten", ""),
    ("bulk_store_hint", "    cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%rd2], [%r1], 256, %rd3;\n"
     "    cp.async.bulk.commit_group;\n    cp.async.bulk.wait_group.read 0;", "tma.store.bulk", "rewritten", ""),
    ("bulk_dsmem", ARRIVE + "\n    cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%r1], [%r3], 256, [%r2];",
     "tma.dsmem.bulk", "native", "DSMEM"),
    ("tensor_1d", ARRIVE + "\n    @%p1 cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r4}], [%r2];\n" + WAIT,
     "tma.load.tensor.1d", "rewritten", ""),
    ("tensor_2d", ARRIVE + "\n    @%p1 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r4, %r5}], [%r2];\n" + WAIT,
     "tma.load.tensor.2d", "rewritten", ""),
    ("tensor_3d", ARRIVE + "\n    @%p1 cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r4, %r5, %r6}], [%r2];\n" + WAIT,
     "tma.load.tensor.3d", "rewritten", ""),
    ("tensor_4d", ARRIVE + "\n    @%p1 cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r4, %r5, %r6, 1}], [%r2];\n" + WAIT,
     "tma.load.tensor.4d", "rewritten", ""),
    ("tensor_5d", ARRIVE + "\n    @%p1 cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r4, %r5, %r6, %r4, %r5}], [%r2];\n" + WAIT,
     "tma.load.tensor.5d", "rewritten", ""),
    ("tensor_2d_multicast_hint", ARRIVE + "\n    @%p1 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster.L2::cache_hint [%r1], [%rd1, {%r4, %r5}], [%r2], %rs1, %rd3;\n" + WAIT,
     "tma.load.tensor.2d", "rewritten", ""),
    ("tensor_store_3d", "    fence.proxy.async.shared::cta;\n    @%p1 cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%rd1, {%r4, %r5, %r6}], [%r1];\n"
     "    cp.async.bulk.commit_group;\n    cp.async.bulk.wait_group.read 0;", "tma.store.tensor.3d", "rewritten", ""),
    ("tensor_im2col", ARRIVE + "\n    cp.async.bulk.tensor.3d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r4, %r5, %r6}], [%r2], {%rs1};",
     "tma.load.tensor.3d", "refused", "im2col"),
    ("reduce_bulk", "    cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32 [%rd2], [%r1], 256;\n"
     "    cp.async.bulk.commit_group;\n    cp.async.bulk.wait_group 0;", "tma.reduce.bulk", "rewritten", ""),
    ("reduce_tensor", "    cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%rd1, {%r4, %r5}], [%r1];\n"
     "    cp.async.bulk.commit_group;\n    cp.async.bulk.wait_group 0;", "tma.reduce.tensor.2d", "rewritten", ""),
    ("reduce_dsmem", ARRIVE + "\n    cp.reduce.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes.add.u32 [%r1], [%r3], 256, [%r2];",
     "tma.reduce.dsmem.bulk", "native", "DSMEM"),
    ("prefetch_bulk", "    cp.async.bulk.prefetch.L2.global [%rd2], 256;", "tma.prefetch.bulk", "rewritten", ""),
    ("prefetch_tensor", "    cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%rd1, {%r4, %r5}];", "tma.prefetch.tensor.2d",
     "rewritten", ""),
    ("cp_async_mbarrier_arrive", "    cp.async.ca.shared.global [%r1], [%rd2], 16;\n    cp.async.mbarrier.arrive.shared.b64 [%r2];\n" + WAIT,
     "cp.async.mbarrier.arrive", "rewritten", ""),
    ("cp_async_mbarrier_arrive_noinc", "    cp.async.cg.shared.global [%r1], [%rd2], 16;\n    cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%r2];\n" + WAIT,
     "cp.async.mbarrier.arrive.noinc", "rewritten", ""),
    ("mbarrier_tx", "    mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%r2], 256;\n    mbarrier.complete_tx.relaxed.cta.shared::cta.b64 [%r2], 256;\n"
     "    mbarrier.test_wait.parity.shared::cta.b64 %p2, [%r2], %r6;", "mbarrier.expect_tx", "native", "shared memory"),
    ("tensormap_global", "    tensormap.replace.tile.global_address.global.b1024.b64 [%rd2], %rd3;\n"
     "    fence.proxy.tensormap::generic.acquire.gpu [%rd2], 128;\n    prefetch.tensormap [%rd2];",
     "tensormap.replace.global", "rewritten", ""),
    ("tensormap_cp_fenceproxy", "    tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%rd2], [%r1], 128;\n"
     "    fence.proxy.tensormap::generic.acquire.gpu [%rd2], 128;", "tensormap.cp_fenceproxy.global", "rewritten", ""),
]
# sm_100-family forms: ptxas 13 rejects them for sm_90a, hbfcc refuses them with a reason naming the form
REFUSED_ONLY = [
    ("gather4", "cp.async.bulk.tensor.2d.shared::cluster.global.tile::gather4.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r4, %r5, %r6, %r4, %r5}], [%r2];",
     "gather4"),
    ("cta_group", "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.cta_group::1 [%r1], [%rd1, {%r4, %r5}], [%r2];",
     "cta_group"),
    ("cp_mask", "cp.async.bulk.global.shared::cta.bulk_group.cp_mask [%rd2], [%r1], 256, %rs1;", "cp_mask"),
]


@pytest.mark.parametrize("name, body, cls, action, why", FORMS, ids=[f[0] for f in FORMS])
def test_every_form_is_admitted_or_refused_with_its_reason_and_assembles(name, body, cls, action, why):
    text = kernel(body)
    fn = fn_report(text)
    c = fn["classes"][cls]
    assert c[action] >= 1, (cls, c)
    assert fn["tma"][cls] >= 1
    if action == "refused":
        assert not fn["admitted"]
        assert any(r["class"] == cls and why in r["reason"] for r in fn["refused"]), fn["refused"]
        return
    if action == "native":
        assert why in fn["native_reasons"][cls]
    assert fn["admitted"], fn["refused"]
    assemble_linked(text)


@pytest.mark.parametrize("name, line, why", REFUSED_ONLY, ids=[f[0] for f in REFUSED_ONLY])
def test_sm100_forms_are_refused_naming_the_form(name, line, why):
    fn = fn_report(kernel("    " + line))
    assert not fn["admitted"] and why in fn["refused"][0]["reason"]


def test_the_helper_call_comes_before_the_native_copy_with_the_copy_guard():
    text = kernel(ARRIVE + "\n    @%p1 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                  " [%r1], [%rd1, {%r4, %r5}], [%r2], %rs1;\n" + WAIT)
    m, meta = run_pass(text)
    t = U.trace(m, "k", keep_hb_movs=True)
    i = next(i for i, x in enumerate(t) if x.startswith("@%p1 cp.async.bulk.tensor"))
    assert t[i - 1] == "tma %rd1"
    # the kind: ACTIVE only where the copy's guard holds; multicast and rank 2; the mask widened to 32 bits
    kind = abi.HBF_TMA_K_LOAD | (2 << abi.HBF_TMA_RANK_SHIFT) | abi.HBF_TMA_F_MULTICAST
    assert f"hb: selp.b32 %__hb_fl, {kind | abi.HBF_TMA_F_ACTIVE}, {kind}, %p1;" in t
    assert "hb: cvt.u32.u16 %__hb_tm, %rs1;" in t
    # the copy, the mbarrier and the destination are untouched (the instruction is the original one)
    assert t[i] == ("@%p1 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                    ".L2::cache_hint [%r1], [%rd1, {%r4, %r5}], [%r2], %rs1;".replace(".L2::cache_hint", ""))
    fn = meta["timing"]["functions"][0]
    assert fn["address_source"] == "memory" and fn["native_version"]


def test_the_wait_hook_follows_a_true_wait_with_its_parity():
    text = kernel(ARRIVE + "\n    @%p1 cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r4}], [%r2];\n"
                  + WAIT + "\n    @%p3 mbarrier.test_wait.parity.shared::cta.b64 %p2, [%r2], 1;")
    m, _ = run_pass(text)
    t = U.trace(m, "k", keep_hb_movs=True)
    i = next(i for i, x in enumerate(t) if x.startswith("mbarrier.try_wait.parity"))
    assert t[i + 1].startswith("@!c bra $__hb_L") and t[i + 2] == "mbar_wait %__hb_tbl" and t[i + 3] == "@!c bra.uni w;"
    j = next(i for i, x in enumerate(t) if x.startswith("@%p3 mbarrier.test_wait"))
    # a guarded wait: the hook runs only where the guard held and the wait returned true
    assert t[j + 1].startswith("@!%p3 bra $__hb_L") and t[j + 2].startswith("@!%p2 bra $__hb_L")
    assert t[j + 3] == "mbar_wait %__hb_tbl"
    from hbfcc.ptx.printer import print_module
    txt = print_module(m)
    assert "st.param.b32 \t[__hb_p2], %r6;" in txt and "st.param.b32 \t[__hb_p2], 1;" in txt   # the parities


def test_the_table_is_declared_initialised_and_closed_only_with_tracked_copies():
    tracked = print_of(kernel(ARRIVE + "\n    @%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd2], 64, [%r2];\n" + WAIT))
    flat = " ".join(tracked.split())
    # declared in whole KiB (TABLE_DECL_BYTES, the helpers use the first HBF_TMA_TABLE_BYTES): a kernel's dynamic
    # shared memory, placed after the static bytes, keeps its 1024-byte alignment (the H100 fault of 2026-12-06)
    from hbfcc.passes.tma import TABLE_DECL_BYTES
    assert TABLE_DECL_BYTES % 1024 == 0 and TABLE_DECL_BYTES >= abi.HBF_TMA_TABLE_BYTES
    assert f".shared .align 8 .b8 __hb_mbt[{TABLE_DECL_BYTES}];" in flat
    assert flat.index("call __hb_tma_enter") > flat.index("$__hb_native;")      # after the native branch
    assert "call __hb_tma_exit" in flat
    # a module whose waits have nothing tracked behind them: waits stay native, no table
    plain = kernel(WAIT + "\n    cp.async.bulk.global.shared::cta.bulk_group [%rd2], [%r1], 64;\n    cp.async.bulk.commit_group;\n"
                   "    cp.async.bulk.wait_group 0;")
    fn = fn_report(plain)
    assert fn["classes"]["mbarrier.try_wait.parity"]["native"] == 1
    txt = print_of(plain)
    assert "__hb_mbt" not in txt and "__hb_mbar_wait" not in txt.split("// hbfcc: helper prototypes")[1].split(".entry")[1]


def print_of(text: str) -> str:
    from hbfcc.ptx.printer import print_module
    return print_module(run_pass(text)[0])


def test_multicast_makes_the_table_a_cluster_table():
    txt = print_of(kernel(ARRIVE + "\n    @%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                          " [%r1], [%rd2], 64, [%r2], %rs1;\n" + WAIT))
    flat = " ".join(txt.split())
    i = flat.index("call __hb_tma_enter")
    assert f"st.param.b32 [__hb_p1], {abi.HBF_TMA_E_CLUSTER};" in flat[i - 200:i]


def test_bulk_groups_wait_at_wait_group_not_at_read_and_drain_at_exit():
    text = kernel("""    cp.async.bulk.global.shared::cta.bulk_group [%rd2], [%r1], 256;
    cp.async.bulk.commit_group;
    cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd1, {%r4, %r5}], [%r1];
    cp.async.bulk.commit_group;
    cp.async.bulk.wait_group.read 0;
    cp.async.bulk.wait_group 1;""")
    m, meta = run_pass(text)
    fn = meta["timing"]["functions"][0]
    K = fn["bulk_window"]
    assert K == 2
    t = U.trace(m, "k")
    r = t.index("cp.async.bulk.wait_group.read 0;")
    w = t.index("cp.async.bulk.wait_group 1;")
    assert t[r - 1] == "cp.async.bulk.commit_group;"                         # .read: no wait
    assert t[r + 1:w] == [f"wait %__hb_bg{s}" for s in range(2, K + 1)]       # 1: the groups older than the newest
    e = t.index("ret;")
    assert [x for x in t[w + 1:e] if x.startswith("wait %__hb_bg")] == [f"wait %__hb_bg{s}" for s in range(0, K + 1)]
    assemble_linked(text)


def test_cp_async_arrive_notes_the_copies_since_the_last_arrive():
    text = kernel("""    cp.async.ca.shared.global [%r1], [%rd2], 16;
    cp.async.ca.shared.global [%r3], [%rd2+16], 16;
    @%p1 cp.async.mbarrier.arrive.noinc.shared.b64 [%r2];
""" + WAIT)
    m, meta = run_pass(text)
    t = U.trace(m, "k", keep_hb_movs=True)
    a = next(i for i, x in enumerate(t) if x.startswith("@%p1 cp.async.mbarrier.arrive"))
    assert t[a - 1] == "hb: @%p1 mov.b64 %__hb_cpall, 0;" and t[a - 2] == "mbar_note %__hb_tbl"
    joins = [x for x in t[:a] if x == "join %__hb_cpall %__hb_t"]
    assert len(joins) == 2                                                    # both copies
    assert meta["timing"]["functions"][0]["admitted"]


def test_a_token_wait_takes_the_parity_captured_at_its_arrive():
    text = kernel(ARRIVE + "\n    @%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd2], 64, [%r2];\n"
                  "    mbarrier.arrive.shared.b64 %rd4, [%r2];\n"
                  "    { .reg .pred c; w: mbarrier.try_wait.shared.b64 c, [%r2], %rd4; @!c bra.uni w; }")
    m, meta = run_pass(text)
    t = U.trace(m, "k", keep_hb_movs=True)
    a = t.index("mbarrier.arrive.shared.b64 %rd4, [%r2];")
    assert t[a - 2] == "hb: mbarrier.test_wait.parity.shared.b64 %__hb_tq, [%r2], 0;"
    assert t[a - 1] == "hb: selp.b32 %__hb_tk0, 1, 0, %__hb_tq;"
    from hbfcc.ptx.printer import print_module
    assert "st.param.b32 \t[__hb_p2], %__hb_tk0;" in print_module(m)
    assert meta["timing"]["functions"][0]["admitted"]
    assemble_linked(text, both=True)
    # a state that does not come from an arrive of this function: refused, naming the form
    bad = kernel(ARRIVE + "\n    @%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd2], 64, [%r2];\n"
                 "    ld.param.u64 %rd4, [k_p];\n"
                 "    { .reg .pred c; w: mbarrier.try_wait.shared.b64 c, [%r2], %rd4; @!c bra.uni w; }")
    fn = fn_report(bad)
    assert not fn["admitted"] and "token-form mbarrier wait" in fn["refused"][0]["reason"]


def test_the_native_version_runs_no_helper():
    text = kernel(ARRIVE + "\n    @%p1 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r4, %r5}], [%r2];\n"
                  + WAIT + "\n    cp.async.bulk.global.shared::cta.bulk_group [%rd2], [%r1], 256;\n    cp.async.bulk.commit_group;\n"
                  "    cp.async.bulk.wait_group 0;")
    txt = print_of(text)
    native = txt.split("$__hb_native:")[1]
    assert "call" not in native and "__hb_" not in native.split("ret;")[0].replace("$__hb_native", "")


TRITON_TMA = ["tma_host_desc_copy", "tma_device_desc_copy", "tma_matmul_host_desc_s3", "tma_matmul_device_desc_s4"]


@pytest.mark.parametrize("name", TRITON_TMA)
def test_triton_tma_kernels_are_admitted_and_assemble(name):
    text = (TRITON / f"{name}.ptx").read_text()
    fn = fn_report(text)
    assert fn["admitted"], fn["refused"]
    assert fn["tma"].get("tma.load.tensor.2d", 0) >= 1 and fn["tma"].get("tma.store.tensor.2d", 0) == 1
    assert fn["tma"]["mbarrier.try_wait.parity"] >= 1 and fn["native_version"]
    if "device" in name:      # the device-built descriptor's publication: a 128-byte store into global scratch
        assert fn["classes"]["tensormap.cp_fenceproxy.global"]["rewritten"] >= 1
    assemble_linked(text)


def _static_smem(text: str, tmp: Path, kernel: str) -> tuple[int, int]:
    """ptxas (sm_90a, -v) the text: the kernel's static shared bytes as -v reports them (hbfcc.toolchain's parser)
    and the size of the cubin's .nv.shared.<kernel> section (the 1 KiB sm_90 reserves included): where ptxas puts
    the kernel's dynamic shared memory."""
    import subprocess
    from elftools.elf.elffile import ELFFile
    from hbfcc.toolchain import parse_ptxas_v
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "m.ptx").write_text(text)
    cp = subprocess.run([U.tool("ptxas"), "-arch=sm_90a", "-v", str(tmp / "m.ptx"), "-o", str(tmp / "m.cubin")],
                        capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr[-3000:]
    with open(tmp / "m.cubin", "rb") as f:
        sec = ELFFile(f).get_section_by_name(f".nv.shared.{kernel}")
        section = sec["sh_size"] if sec is not None else 0
    return parse_ptxas_v(cp.stderr).functions[kernel].smem_bytes, section


@pytest.mark.parametrize("name", TRITON_TMA)
def test_triton_dynamic_shared_memory_stays_1024_aligned_behind_the_table(name, tmp_path):
    """Issue 15, H100 2026-12-06: every instrumented Triton TMA kernel faulted (CUDA_ERROR_MISALIGNED_ADDRESS at its
    first UTMALDG). Triton's tiles live in its dynamic shared memory (``.extern .shared global_smem``), which ptxas
    places after the kernel's static bytes; the 392-byte completion table made those 400 B and moved every TMA
    destination off the 1024-byte alignment its 128-byte-swizzled tiles need. The instrumented build's static bytes
    must differ from the plain build's by whole KiB, so global_smem starts where it did, modulo 1024."""
    text = (TRITON / f"{name}.ptx").read_text()
    assert ".extern .shared .align 16 .b8 global_smem[];" in " ".join(text.split())
    kernel = next(ln.split("(")[0].split()[-1] for ln in text.splitlines() if ".entry" in ln)
    plain = _static_smem(text, tmp_path / "plain", kernel)
    inst = _static_smem(rewrite_text(text, helper=H.load_helper(U.helper_paths()[0])).text, tmp_path / "hbf", kernel)
    assert plain[0] == 0 and plain[1] % 1024 == 0        # no static bytes: global_smem right after the reserved KiB
    assert inst[0] >= abi.HBF_TMA_TABLE_BYTES, inst      # the table is there
    assert (inst[0] - plain[0]) % 1024 == 0 and inst[1] % 1024 == 0, (plain, inst)


TRITON_SRC = r'''
import triton, triton.language as tl

@triton.jit
def copy_host(in_desc, out_desc, BM: tl.constexpr, BN: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    out_desc.store([pid_m * BM, pid_n * BN], in_desc.load([pid_m * BM, pid_n * BN]))

@triton.jit
def copy_dev(x, o, M, N, BM: tl.constexpr, BN: tl.constexpr):
    i = tl.make_tensor_descriptor(x, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    d = tl.make_tensor_descriptor(o, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    d.store([pid_m * BM, pid_n * BN], i.load([pid_m * BM, pid_n * BN]))

@triton.jit
def matmul_dev(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    ad = tl.make_tensor_descriptor(a, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    bd = tl.make_tensor_descriptor(b, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    cd = tl.make_tensor_descriptor(c, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, K, BK, num_stages=3):
        acc += tl.dot(ad.load([pm * BM, k]), bd.load([k, pn * BN]))
    cd.store([pm * BM, pn * BN], acc.to(tl.float16))
'''


def test_triton_tma_kernels_compiled_here_are_admitted_and_assemble(tmp_path):
    """Triton 3.6 compiles for sm_90a on the CPU: a host TensorDescriptor copy, a device tl.make_tensor_descriptor
    copy and a 3-stage pipelined device-descriptor matmul, each rewritten, admitted and assembled."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from workloads.triton_kernels import import_text
    K = import_text(tmp_path / "tk_tma.py", TRITON_SRC)
    T = GPUTarget("cuda", 90, 32)
    desc = "tensordesc<fp32[64, 64]>"
    jobs = [(K.copy_host, {"in_desc": desc, "out_desc": desc, "BM": "constexpr", "BN": "constexpr"}, {"BM": 64, "BN": 64}),
            (K.copy_dev, {"x": "*fp32", "o": "*fp32", "M": "i32", "N": "i32", "BM": "constexpr", "BN": "constexpr"},
             {"BM": 64, "BN": 64}),
            (K.matmul_dev, {"a": "*fp16", "b": "*fp16", "c": "*fp16", "M": "i32", "N": "i32", "K": "i32",
                            "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}, {"BM": 128, "BN": 128, "BK": 64})]
    for fn, sig, cx in jobs:
        ptx = triton.compile(triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=cx), target=T).asm["ptx"]
        assert "cp.async.bulk.tensor" in ptx
        rep = fn_report(ptx)
        assert rep["admitted"], (fn.__name__, rep["refused"])
        assert rep["tma_hooks"] >= 2 and rep["native_version"]
        assemble_linked(ptx)


# ---- the emitted code run on the CPU (tests/runtime/test_group_layout.py's interpreter, with control flow) ----

def flow(text: str, regs: dict, returns: dict, preds: dict | None = None) -> list:
    """Run kernel k's instrumented version (up to its native copy) with helpers that return ``returns[name]``
    (a list: successive values) and record their calls; -> [(name, args)] of the TMA / wait helpers."""
    sys.path.insert(0, str(U.REPO / "tests" / "runtime"))
    from test_group_layout import run_flow
    from hbfcc.ptx.printer import print_module
    txt = print_module(run_pass(text)[0])
    body = txt[txt.index(".visible .entry k"):txt.index("$__hb_native:")]
    lines = body.split("\n")[body.split("\n").index("{") + 1:]

    def helper(name):
        vals = returns.get(name)
        return lambda *a: vals.pop(0) if vals else None
    names = ("__hb_tma", "__hb_issue", "__hb_wait", "__hb_mbar_wait", "__hb_mbar_note", "__hb_future_join",
             "__hb_kernel_enter", "__hb_kernel_exit", "__hb_tma_enter", "__hb_tma_exit")
    calls = {n: helper(n) for n in names}
    calls["__hb_future_join"] = lambda a, b: max(a, b)
    st = {"@state": 0x1000, "@lo": 0, "@span": 1 << 40, **regs}
    made = run_flow(lines, st, calls, preds)
    return [(n, a) for n, a in made if n not in ("__hb_kernel_enter", "__hb_kernel_exit")]


def test_run_bulk_groups_wait_for_the_right_deadlines():
    text = kernel("""    cp.async.bulk.global.shared::cta.bulk_group [%rd2], [%r1], 256;
    cp.async.bulk.commit_group;
    cp.async.bulk.global.shared::cta.bulk_group [%rd2], [%r1], 256;
    cp.async.bulk.commit_group;
    cp.async.bulk.global.shared::cta.bulk_group [%rd2], [%r1], 256;
    cp.async.bulk.commit_group;
    cp.async.bulk.wait_group.read 0;
    cp.async.bulk.wait_group 1;""")
    made = flow(text, {"%rd2": 1 << 30, "%r1": 0}, {"__hb_tma": [100, 300, 200]})
    waits = [a[0] for n, a in made if n == "__hb_wait"]
    # .read waits for nothing; wait_group 1: groups 1 and 2 (300); the exit: group 3 (200)
    assert waits == [300, 200]
    assert [n for n, _ in made].count("__hb_tma") == 3


def test_run_the_wait_hook_runs_once_when_the_phase_completes():
    tw = "mbarrier.try_wait.parity.shared.b64 c, [%r2], %r6;"
    text = kernel(ARRIVE + "\n    @%p1 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r4, %r5}], [%r2];\n"
                  + WAIT + "\n    @%p3 mbarrier.test_wait.parity.shared::cta.b64 %p2, [%r2], 1;")
    tw2 = "@%p3 mbarrier.test_wait.parity.shared::cta.b64 %p2, [%r2], 1;".split(" ", 1)[1]
    regs = {"%r2": 0x40, "%r6": 1, "%p1": True, "%p3": False, "%rd1": 0x7000, "%r4": 0, "%r5": 8}
    made = flow(text, regs, {"__hb_tma": [0]}, {tw: [False, False, True], tw2: [True]})
    tma = [a for n, a in made if n == "__hb_tma"]
    kind = abi.HBF_TMA_K_LOAD | (2 << abi.HBF_TMA_RANK_SHIFT) | abi.HBF_TMA_F_ACTIVE
    assert tma == [[0x7000, 0, 8, 0, 0, 0, 0, 0x40, kind, 0, 0x100, 0]]
    # one hook: after the true try_wait, with its parity; none for the test_wait whose guard is false
    assert [a[:3] for n, a in made if n == "__hb_mbar_wait"] == [[0x100, 0x40, 1]]
    regs["%p3"] = True
    made = flow(text, regs, {"__hb_tma": [0]}, {tw: [True], tw2: [False]})
    assert [a[:3] for n, a in made if n == "__hb_mbar_wait"] == [[0x100, 0x40, 1]]
    regs["%p1"] = False          # the copy's guard false: the helper is told the lane is inactive
    made = flow(text, regs, {"__hb_tma": [0]}, {tw: [True], tw2: [True]})
    assert [a[8] for n, a in made if n == "__hb_tma"] == [kind & ~abi.HBF_TMA_F_ACTIVE]


def test_run_cp_async_arrive_notes_the_latest_copy_since_the_last_arrive():
    text = kernel("""    cp.async.ca.shared.global [%r1], [%rd2], 16;
    cp.async.ca.shared.global [%r3], [%rd2+16], 16;
    cp.async.mbarrier.arrive.noinc.shared.b64 [%r2];
    cp.async.mbarrier.arrive.noinc.shared.b64 [%r2];""")
    made = flow(text, {"%rd2": 1 << 30, "%r1": 0, "%r3": 16, "%r2": 0x40}, {"__hb_issue": [700, 500]})
    notes = [a[:3] for n, a in made if n == "__hb_mbar_note"]
    assert notes == [[0x100, 0x40, 700], [0x100, 0x40, 0]]     # the second arrive covers no new copy


def test_a_shared_memory_proxy_fence_does_not_drain_global_stores():
    """fence.proxy.async.shared::cta (what a TMA store's producer issues) orders shared memory only; a plain
    fence and a global proxy fence still drain the posted stores."""
    text = kernel("""    st.global.u32 [%rd2], %r4;
    fence.proxy.async.shared::cta;
    st.global.u32 [%rd2+4], %r4;
    fence.proxy.async.global;
    st.global.u32 [%rd2+8], %r4;
    fence.acq_rel.gpu;""")
    t = U.trace(run_pass(text)[0], "k")
    for f, drained in (("fence.proxy.async.shared::cta;", False), ("fence.proxy.async.global;", True),
                       ("fence.acq_rel.gpu;", True)):
        assert (t[t.index(f) - 1] == "wait %__hb_d") is drained, (f, t)


def test_operand_forms_a_64_bit_barrier_address_with_an_offset():
    """The barrier in a 64-bit register with an offset: cvt to the 32-bit shared::cta key, then the offset."""
    text = kernel("""    cvt.u64.u32 %rd5, %r2;
    add.u64 %rd5, %rd5, -8;
    mbarrier.arrive.expect_tx.shared.b64 _, [%rd5+8], 64;
    cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r4}], [%rd5+8];
    { .reg .pred c; w: mbarrier.try_wait.parity.shared.b64 c, [%rd5+8], %r6; @!c bra.uni w; }""")
    t = U.trace(run_pass(text)[0], "k", keep_hb_movs=True)
    assert t.count("hb: cvt.u32.u64 %__hb_mb, %rd5;") == 2 and t.count("hb: add.u32 %__hb_mb, %__hb_mb, 8;") == 2
    assert fn_report(text)["admitted"]
    assemble_linked(text)


def test_the_multicast_debug_helper_links_its_buffer_and_assembles(tmp_path):
    """-DHBF_TMA_MC_DEBUG=1 (bench/tma_semantics.py --mc-debug): the helper defines __hb_tma_dbg, hbfcc links it
    into a multicast kernel's module (a __hb_ global: a root, looked up by name), and ptxas assembles the result;
    the default helper has no such buffer (the debug code compiles out)."""
    import os
    import subprocess
    import sys
    U.tool("nvcc")
    hp = tmp_path / "hbf_helpers_mcdbg.ptx"
    subprocess.run([sys.executable, "setup.py", "helper-ptx", "direct", str(hp)], cwd=U.REPO, check=True,
                   capture_output=True, env=dict(os.environ, NVCC_APPEND_FLAGS="-DHBF_TMA_MC_DEBUG=1"))
    text = kernel(ARRIVE + "\n    @%p1 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                  " [%r1], [%rd1, {%r4, %r5}], [%r2], %rs1;\n" + WAIT)
    res = rewrite_text(text, helper=H.load_helper(str(hp)))
    flat = " ".join(res.text.split())
    assert f".weak .global .align 4 .b8 {abi.TMA_DBG_GLOBAL}[{4 * abi.HBF_TMA_DBG_WORDS}];" in flat   # as __hb_state
    U.assemble(res.text)
    real = U.real_helper_ptx()
    if real:
        assert abi.TMA_DBG_GLOBAL not in Path(real).read_text()
