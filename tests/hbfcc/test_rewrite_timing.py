"""Golden tests of the timing pass: where issues, waits and drains land (DESIGN.md §3.3).

Each case is a small hand-written kernel; the expected trace lists the original instructions and
the helper calls hbfcc inserts, in order. Every rewritten case also assembles with ptxas (sm_90a)
with the helper module linked.
"""
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

HDR = """.version 9.0
.target sm_90a
.address_size 64
"""

LD = abi.HBF_OP_LOAD | abi.HBF_F_ACTIVE      # 4
ST = abi.HBF_OP_STORE | abi.HBF_F_ACTIVE     # 5


def kernel(body: str, regs: str = "", params: str = ".param .u64 k_p, .param .u32 k_n", extra_top: str = "") -> str:
    return HDR + extra_top + f"""
.visible .entry k({params})
{{
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<16>;
    .reg .f32 %f<8>;
    {regs}
    ld.param.u64 %rd1, [k_p];
    ld.param.u32 %r1, [k_n];
    setp.gt.u32 %p1, %r1, 5;
{body}
}}
"""


PRE = ["kernel_enter 0", "ld.param.u64 %rd1, [k_p];", "ld.param.u32 %r1, [k_n];", "setp.gt.u32 %p1, %r1, 5;"]
EXIT = ["wait %__hb_d", "kernel_exit 0", "ret;"]


def run_pass(text: str, meta=None):
    """The timing pass; by default WITHOUT issue hoisting, so a site's issue stays at its access and the
    traces below pin the wait/future rules on their own (the hoisting tests at the end turn it on)."""
    # the wait/issue placement tests read the helper-call form; the inline path has its own tests
    # (tests/hbfcc/test_rewrite_inline.py)
    meta = {"hoist_issues": False, "inline_issues": False} if meta is None else {"inline_issues": False, **meta}
    m = timing_pass(parse_module(text), meta)
    return m, meta


def trace_of(text: str, **kw) -> list[str]:
    m, _ = run_pass(text)
    return U.trace(m, "k", **kw)


def assemble_linked(text: str) -> None:
    for hp in U.helper_paths():
        res = rewrite_text(text, helper=H.load_helper(hp))
        U.assemble(res.text)


# --------------------------------------------------------------------------------------------

def test_predicated_use_then_unconditional_use_still_waits():
    """The known trap: a predicated first use must not clear the may-pending state."""
    src = kernel("""
    ld.global.u32 %r2, [%rd1];
    @%p1 add.s32 %r3, %r2, 1;
    add.s32 %r4, %r2, 2;
    st.global.u32 [%rd1+4], %r4;
    ret;""")
    assert trace_of(src) == PRE + [
        f"issue bytes=4 flags={LD} site=0",
        "ld.global.u32 %r2, [%rd1];",
        "@%p1 wait %__hb_f0",
        "@%p1 add.s32 %r3, %r2, 1;",
        "wait %__hb_f0",                     # the unconditional path still waits
        "add.s32 %r4, %r2, 2;",
        f"issue bytes=4 flags={ST} site=1",
        "join %__hb_d %__hb_t",
        "st.global.u32 [%rd1+4], %r4;",
    ] + EXIT
    assemble_linked(src)


def test_unconditional_wait_clears_pending():
    src = kernel("""
    ld.global.u32 %r2, [%rd1];
    add.s32 %r3, %r2, 1;
    add.s32 %r4, %r2, 2;
    ret;""")
    t = trace_of(src)
    assert t.count("wait %__hb_f0") == 1
    assert t.index("wait %__hb_f0") == t.index("add.s32 %r3, %r2, 1;") - 1


def test_diamond_cfg_waits_on_both_paths_futures():
    src = kernel("""
    @%p1 bra ELSE;
    ld.global.u32 %r2, [%rd1];
    bra.uni JOIN;
ELSE:
    ld.global.u32 %r2, [%rd1+8];
JOIN:
    add.s32 %r3, %r2, 1;
    st.global.u32 [%rd1], %r3;
    ret;""")
    t = trace_of(src)
    j = t.index("add.s32 %r3, %r2, 1;")
    assert t[j - 2:j] == ["wait %__hb_f0", "wait %__hb_f1"]
    # no wait inside either arm
    assert not any(x.startswith("wait %__hb_f") for x in t[:j - 2])
    assemble_linked(src)


def test_diamond_one_arm_loads():
    src = kernel("""
    mov.u32 %r2, 0;
    @%p1 bra JOIN;
    ld.global.u32 %r2, [%rd1];
JOIN:
    add.s32 %r3, %r2, 1;
    ret;""")
    t = trace_of(src)
    j = t.index("add.s32 %r3, %r2, 1;")
    assert t[j - 1] == "wait %__hb_f0"


def test_loop_back_edge_use_waits_and_fixpoint():
    src = kernel("""
    mov.u32 %r2, 0;
    mov.u32 %r5, 0;
LOOP:
    add.s32 %r5, %r5, %r2;
    ld.global.u32 %r2, [%rd1];
    add.s64 %rd1, %rd1, 4;
    add.s32 %r1, %r1, -1;
    setp.ne.s32 %p2, %r1, 0;
    @%p2 bra LOOP;
    add.s32 %r6, %r5, %r2;
    st.global.u32 [%rd1], %r6;
    ret;""")
    t = trace_of(src)
    # the use at the loop head reads the value loaded in the previous iteration
    i = t.index("add.s32 %r5, %r5, %r2;")
    assert t[i - 1] == "wait %__hb_f0"
    # after the loop (last iteration's load)
    j = t.index("add.s32 %r6, %r5, %r2;")
    assert t[j - 1] == "wait %__hb_f0"
    # issue precedes the load inside the loop; the load's own address is not pending
    k = t.index("ld.global.u32 %r2, [%rd1];")
    assert t[k - 1].startswith("issue ")
    assemble_linked(src)


def test_loop_pending_across_nested_loops():
    src = kernel("""
    ld.global.u32 %r2, [%rd1];
    mov.u32 %r7, 0;
OUTER:
    mov.u32 %r8, 0;
INNER:
    add.s32 %r8, %r8, 1;
    setp.lt.u32 %p2, %r8, 4;
    @%p2 bra INNER;
    add.s32 %r7, %r7, 1;
    setp.lt.u32 %p3, %r7, 4;
    @%p3 bra OUTER;
    add.s32 %r9, %r2, %r7;
    ret;""")
    t = trace_of(src)
    assert t.count("wait %__hb_f0") == 1
    assert t[t.index("add.s32 %r9, %r2, %r7;") - 1] == "wait %__hb_f0"


def test_unguarded_overwrite_ends_pending_without_wait():
    src = kernel("""
    ld.global.u32 %r2, [%rd1];
    mov.u32 %r2, 7;
    add.s32 %r3, %r2, 1;
    ret;""")
    t = trace_of(src)
    assert not any(x.startswith("wait %__hb_f") for x in t)


def test_guarded_overwrite_keeps_pending():
    src = kernel("""
    ld.global.u32 %r2, [%rd1];
    @%p1 mov.u32 %r2, 7;
    add.s32 %r3, %r2, 1;
    ret;""")
    t = trace_of(src)
    assert t[t.index("add.s32 %r3, %r2, 1;") - 1] == "wait %__hb_f0"
    assert t.count("wait %__hb_f0") == 1


def test_guarded_load_site_flags_and_future_update():
    src = kernel("""
    @%p1 ld.global.u32 %r2, [%rd1+16];
    @!%p1 ld.global.u32 %r3, [%rd1];
    add.s32 %r4, %r2, %r3;
    ret;""")
    m, meta = run_pass(src)
    t = U.trace(m, "k", keep_hb_movs=True)
    # the call itself is unconditional; ACTIVE comes from the guard through selp
    assert "hb: add.s64 %__hb_a, %rd1, 16;" in t
    assert "hb: selp.b32 %__hb_fl, 4, 0, %p1;" in t
    assert "hb: selp.b32 %__hb_fl, 0, 4, %p1;" in t
    assert "issue bytes=4 flags=%__hb_fl site=0" in t
    # the future register changes only where the load happens
    assert "hb: @%p1 mov.b64 %__hb_f0, %__hb_t;" in t
    assert "hb: @!%p1 mov.b64 %__hb_f1, %__hb_t;" in t
    j = t.index("add.s32 %r4, %r2, %r3;")
    # a zero future skips the call inline (setp + bra), then wait + clear
    assert t[j - 8:j - 6] == ["hb: setp.eq.u64 %__hb_z, %__hb_f0, 0;", "hb: @%__hb_z bra $__hb_L3;"]
    assert [x for x in t[:j] if not x.startswith("hb: setp.eq.u64 %__hb_z") and "bra $__hb_L" not in x][-4:] == \
        ["wait %__hb_f0", "hb: mov.b64 %__hb_f0, 0;", "wait %__hb_f1", "hb: mov.b64 %__hb_f1, 0;"]
    assemble_linked(src)


def test_pointer_chase_waits_before_issue():
    src = kernel("""
    ld.global.u64 %rd2, [%rd1];
    ld.global.u32 %r2, [%rd2+4];
    st.global.u32 [%rd1], %r2;
    ret;""")
    t = trace_of(src)
    i = t.index("ld.global.u32 %r2, [%rd2+4];")
    assert t[i - 2:i] == ["wait %__hb_f0", f"issue bytes=4 flags={LD} site=1"]


def test_vector_load_sinks_and_bytes():
    src = kernel("""
    ld.global.v4.f32 {%f1, _, %f3, %f4}, [%rd1];
    add.f32 %f5, %f3, %f3;
    add.f32 %f6, %f1, %f4;
    ret;""")
    t = trace_of(src)
    assert f"issue bytes=16 flags={LD} site=0" in t
    assert t[t.index("add.f32 %f5, %f3, %f3;") - 1] == "wait %__hb_f0"
    # one future for the whole vector: the second use does not wait again
    assert t.count("wait %__hb_f0") == 1


def test_volatile_acquire_and_atomics_wait_at_once():
    src = kernel("""
    ld.volatile.global.u32 %r2, [%rd1];
    ld.acquire.gpu.global.u32 %r3, [%rd1+4];
    atom.global.add.u32 %r4, [%rd1+8], 1;
    add.s32 %r5, %r2, %r3;
    add.s32 %r5, %r5, %r4;
    ret;""")
    t = trace_of(src)
    wn = abi.HBF_F_WAIT_NOW
    i = t.index("ld.volatile.global.u32 %r2, [%rd1];")
    assert t[i - 2:i] == [f"issue bytes=4 flags={LD | wn} site=0", "wait %__hb_w"]
    i = t.index("ld.acquire.gpu.global.u32 %r3, [%rd1+4];")
    assert t[i - 2:i] == [f"issue bytes=4 flags={LD | wn} site=1", "wait %__hb_w"]
    i = t.index("atom.global.add.u32 %r4, [%rd1+8], 1;")
    assert t[i - 3:i] == ["wait %__hb_d", f"issue bytes=4 flags={abi.HBF_OP_ATOMIC | abi.HBF_F_ACTIVE | wn} site=2",
                          "wait %__hb_w"]
    # nothing pending afterwards
    assert not any(x.startswith("wait %__hb_f") for x in t)
    assemble_linked(src)


def test_stores_posted_and_drained_at_fences_release_and_exit():
    src = kernel("""
    st.global.u32 [%rd1], %r1;
    st.global.u32 [%rd1+4], %r1;
    membar.gl;
    st.global.u32 [%rd1+8], %r1;
    fence.acq_rel.gpu;
    st.release.gpu.global.u32 [%rd1+12], %r1;
    red.global.add.u32 [%rd1+16], 1;
    ret;""")
    t = trace_of(src)
    # posted: no wait between the two stores
    i0, i1 = t.index("st.global.u32 [%rd1], %r1;"), t.index("st.global.u32 [%rd1+4], %r1;")
    assert "wait %__hb_d" not in t[i0:i1]
    for anchor in ("membar.gl;", "fence.acq_rel.gpu;", "red.global.add.u32 [%rd1+16], 1;"):
        assert t[t.index(anchor) - 1 if not anchor.startswith("red") else t.index(anchor) - 3] == "wait %__hb_d", anchor
    i = t.index("st.release.gpu.global.u32 [%rd1+12], %r1;")
    assert t[i - 3] == "wait %__hb_d"
    assert t[i - 2] == f"issue bytes=4 flags={ST | abi.HBF_F_RELEASE} site=3"
    assert t[-3:] == EXIT
    assemble_linked(src)


def test_generic_shared_local_param_classes():
    src = HDR + """
.global .align 4 .u32 gvar[4];
.visible .entry k(.param .u64 k_p)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<8>;
    .shared .align 4 .u32 sbuf[32];
    .local .align 4 .u32 lbuf[4];
    ld.param.u64 %rd1, [k_p];
    ld.u32 %r1, [%rd1];
    st.shared.u32 [sbuf], %r1;
    ld.shared.u32 %r2, [sbuf+4];
    st.local.u32 [lbuf], %r2;
    ld.global.u32 %r3, [gvar+8];
    ld.u32 %r4, [sbuf+8];
    st.u32 [%rd1+4], %r3;
    ret;
}
"""
    m, meta = run_pass(src)
    fn = meta["timing"]["functions"][0]
    cls = fn["classes"]
    assert cls["ld.generic"] == {"count": 2, "rewritten": 1, "native": 1, "refused": 0}
    assert cls["st.shared"]["native"] == 1 and cls["ld.shared"]["native"] == 1
    assert cls["st.local"]["native"] == 1 and cls["ld.param"]["native"] == 1
    assert cls["ld.global"]["rewritten"] == 1 and cls["st.generic"]["rewritten"] == 1
    assert fn["admitted"] is True
    t = U.trace(m, "k", keep_hb_movs=True)
    assert f"issue bytes=4 flags={LD | abi.HBF_F_GENERIC} site=0" in t
    assert "hb: cvta.global.u64 %__hb_a, gvar;" in t and "hb: add.s64 %__hb_a, %__hb_a, 8;" in t
    assert f"issue bytes=4 flags={ST | abi.HBF_F_GENERIC} site=2" in t
    assemble_linked(src)


# a shared buffer and one committed group: a 16-byte cp.async from [%rd1]
CP_ASYNC_ONE_GROUP = """
    .shared .align 16 .b8 smem[256];
    mov.u32 %r2, smem;
    cp.async.ca.shared.global [%r2], [%rd1], 16;
    cp.async.commit_group;"""


def test_cp_async_group_window():
    src = kernel(CP_ASYNC_ONE_GROUP + """
    cp.async.cg.shared.global [%r2+16], [%rd1+16], 16, %r1;
    cp.async.commit_group;
    @%p1 cp.async.ca.shared.global [%r2+32], [%rd1+32], 8;
    cp.async.commit_group;
    cp.async.wait_group 1;
    cp.async.wait_all;
    ret;""")
    m, meta = run_pass(src, {"cpasync_window": 4})
    t = U.trace(m, "k", keep_hb_movs=True)
    fn = meta["timing"]["functions"][0]
    assert fn["classes"]["cp.async.shared.global"]["rewritten"] == 3
    K = fn["cp_async_window"]
    assert K == 4
    # each copy joins the open group
    assert t.count("join %__hb_g0 %__hb_t") == 3
    # src-size register: passed as bytes, and a zero src-size clears ACTIVE
    assert "issue bytes=%r1 flags=%__hb_fl site=1" in t
    assert "hb: setp.eq.u32 %__hb_q, %r1, 0;" in t
    # commit: oldest absorbs the next-oldest, then shift
    assert "join %__hb_t %__hb_g3" in t and "hb: mov.b64 %__hb_g1, %__hb_g0;" in t
    # wait_group 1 waits for every group but the newest: slots 2..K
    i = t.index("cp.async.wait_group 1;")
    waits = [x for x in t[:i] if x.startswith("wait %__hb_g")]
    assert waits == [f"wait %__hb_g{s}" for s in range(2, K + 1)]
    j = t.index("cp.async.wait_all;")
    waits = [x for x in t[i:j] if x.startswith("wait %__hb_g")]
    assert waits == [f"wait %__hb_g{s}" for s in range(0, K + 1)]
    assemble_linked(src)


def test_cp_async_window_grows_with_wait_group_depth():
    src = kernel(CP_ASYNC_ONE_GROUP + """
    cp.async.wait_group 11;
    ret;""")
    _, meta = run_pass(src, {"cpasync_window": 4})
    assert meta["timing"]["functions"][0]["cp_async_window"] == 12


# TMA, bulk copies and cp.async with mbarrier completion (admitted since issue 15): tests/hbfcc/test_tma_rewrite.py


def test_inline_asm_block_local_labels_and_spin_wait():
    src = kernel("""
    {
    .reg .pred complete;
    waitLoop:
    ld.volatile.global.u32 %r2, [%rd1];
    setp.eq.u32 complete, %r2, 0;
    @complete bra.uni waitLoop;
    }
    {
    .reg .pred complete;
    waitLoop:
    ld.acquire.gpu.global.u32 %r3, [%rd1+4];
    setp.eq.u32 complete, %r3, 0;
    @complete bra.uni waitLoop;
    }
    ld.global.u32 %r4, [%rd1+8];
    ret;""")
    m, meta = run_pass(src)
    assert meta["timing"]["functions"][0]["sites"] == 3
    assemble_linked(src)


def test_device_function_call_admission_and_drain_at_ret():
    src = HDR + """
.func (.param .b32 rv) helper(.param .b64 a)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [a];
    ld.global.u32 %r1, [%rd1];
    st.global.u32 [%rd1+4], %r1;
    st.param.b32 [rv], %r1;
    ret;
}
.extern .func (.param .b32 rv) mystery(.param .b64 a);
""" + U.call_entry("k", "helper", regs=4) + U.call_entry("k2", "mystery", regs=4)
    m, meta = run_pass(src)
    fns = {f["name"]: f for f in meta["timing"]["functions"]}
    assert meta["timing"]["kernels"] == ["k", "k2"]
    assert fns["k"]["kernel_index"] == 0 and fns["k2"]["kernel_index"] == 1
    assert fns["helper"]["kernel_index"] == 2 and fns["helper"]["kind"] == "func"
    assert fns["k"]["admitted"] and fns["helper"]["admitted"]
    assert not fns["k2"]["admitted"] and "mystery" in fns["k2"]["not_admitted_reasons"][0]
    t = U.trace(m, "helper")
    # the store reads the loaded register: wait, then the store's own issue
    i = t.index("st.global.u32 [%rd1+4], %r1;")
    assert t[i - 3:i - 1] == ["wait %__hb_f0", f"issue bytes=4 flags={ST} site={(2 << 16) | 1}"]
    assert t.count("wait %__hb_f0") == 1
    assert t[-2:] == ["wait %__hb_d", "ret;"]          # drain at ret; no kernel_exit in a .func
    assert not any(x.startswith("kernel_") for x in t)
    # site encoding: kernel index in the high half
    assert f"issue bytes=4 flags={LD} site={2 << 16}" in t


def test_already_instrumented_module_is_refused_by_the_pass():
    src = kernel("ret;")
    res = rewrite_text(src, helper=H.load_helper(U.fixture_helper_ptx()))
    from hbfcommon.errors import RewriteError
    with pytest.raises(RewriteError):
        timing_pass(parse_module(res.text), {})
    # the pipeline passes an instrumented module through unchanged
    again = rewrite_text(res.text, helper=H.load_helper(U.fixture_helper_ptx()))
    assert again.already_instrumented and again.text == res.text


def test_every_function_gets_prototypes_before_first_function_and_version_kept():
    src = HDR.replace("9.0", "8.7") + """
.visible .entry k()
{
    ret;
}
"""
    res = rewrite_text(src, helper=H.load_helper(U.fixture_helper_ptx()))
    txt = res.text
    # the helpers the kernel reaches are declared before it; one it never calls is not linked at all
    for f in ("__hb_kernel_enter", "__hb_kernel_exit", "__hb_kernel_flush"):
        assert txt.index(f".weak .func {f}(") < txt.index(".visible .entry k"), f
    assert "__hb_issue" not in txt
    assert ".version 9.0" in txt and ".target sm_90a" in txt    # raised to the helper's version
    U.assemble(txt)


def test_detached_and_zero_future_fast_paths():
    """__hb_state is read once at entry, and with it the fast-reject band {lo, span} (span stays 0
    when detached); every access site calls __hb_issue only when addr - lo < span (inline fast
    reject: the native path never calls a helper), and a zero future / zero store future skips
    the wait / join call inline. kernel_enter/exit are skipped (uniform) when detached."""
    src = kernel("""
    ld.global.u32 %r2, [%rd1];
    st.global.u32 [%rd1+4], %r2;
    ret;""")
    m, _ = run_pass(src)
    t = U.trace(m, "k", keep_hb_movs=True)
    # a detached module's switch first (the constant bank), then the word (tests/hbfcc/test_native_version.py)
    assert t[:3] == ["hb: ld.const.u64 %__hb_s, [__hb_detached];", "hb: setp.ne.u64 %__hb_off, %__hb_s, 0;",
                     "hb: @%__hb_off bra.uni $__hb_native;"]
    t = t[3:]
    assert t[:6] == ["hb: ld.global.u64 %__hb_s, [__hb_state];", "hb: setp.eq.u64 %__hb_off, %__hb_s, 0;",
                     "hb: mov.b64 %__hb_lo, 0;", "hb: mov.b64 %__hb_span, 0;",
                     "hb: @!%__hb_off ld.global.u64 %__hb_lo, [%__hb_s];",
                     "hb: @!%__hb_off ld.global.u64 %__hb_span, [%__hb_s+8];"]
    i = t.index(f"issue bytes=4 flags={LD} site=0")
    assert t[i - 4:i - 1] == ["hb: mov.b64 %__hb_f0, 0;", "hb: sub.u64 %__hb_b, %rd1, %__hb_lo;",
                              "hb: setp.ge.u64 %__hb_o, %__hb_b, %__hb_span;"]
    assert t[i - 1].startswith("hb: @%__hb_o bra $__hb_L")
    s = t.index(f"issue bytes=4 flags={ST} site=1")
    assert t[s - 4:s - 1] == ["hb: add.s64 %__hb_a, %rd1, 4;", "hb: sub.u64 %__hb_b, %__hb_a, %__hb_lo;",
                              "hb: setp.ge.u64 %__hb_o, %__hb_b, %__hb_span;"]
    j = t.index("join %__hb_d %__hb_t")
    assert t[j - 7] == "hb: setp.eq.u64 %__hb_z, %__hb_t, 0;" and t[j - 6].startswith("hb: @%__hb_z bra $__hb_L")
    # two deadline futures join inline (max); only a ticket (bit 63: negative as s64) calls the helper
    assert t[j - 5:j - 1] == ["hb: or.b64 %__hb_w, %__hb_d, %__hb_t;", "hb: setp.lt.s64 %__hb_q, %__hb_w, 0;",
                              t[j - 3], "hb: max.u64 %__hb_d, %__hb_d, %__hb_t;"]
    assert t[j - 3].startswith("hb: @%__hb_q bra $__hb_L") and t[j - 1].startswith("hb: @!%__hb_q bra $__hb_L")
    e = t.index("kernel_enter 0")
    assert t[e - 1].startswith("hb: @%__hb_off bra.uni $__hb_L")
    # the extern declaration the pass emits is replaced by the helper's weak definition at link time
    res = rewrite_text(src, helper=H.load_helper(U.fixture_helper_ptx()))
    assert ".extern .global .align 8 .u64" not in res.text
    items = parse_module(res.text).items
    at = next(i for i, it in enumerate(items) if type(it).__name__ == "VarDecl"
              and [d.name for d in it.decls] == ["__hb_state"])
    assert items[at].linkage == (".weak",) and items[at].attrs == (".align 8",) and items[at].type == ".u64"
    assert at < next(i for i, it in enumerate(items) if getattr(it, "name", None) == "k")
    U.assemble(res.text)


def test_cp_async_committed_elsewhere_refused():
    src = HDR + """
.func copy_one(.param .b64 g, .param .b32 s)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [g];
    ld.param.u32 %r1, [s];
    cp.async.ca.shared.global [%r1], [%rd1], 16;
    ret;
}
"""
    _, meta = run_pass(src)
    f = meta["timing"]["functions"][0]
    assert not f["admitted"] and "never committed in this function" in f["refused"][0]["reason"]


# ---- issue hoisting (HBFCC_HOIST_ISSUES, default on) -----------------------------------------------

HOIST = {"hoist_issues": True, "hoist_loads": False}   # the issue alone; loads moved too: at the end


def hoisted_trace(src: str) -> tuple[list[str], dict]:
    m, meta = run_pass(src, dict(HOIST))
    return U.trace(m, "k", keep_hb_movs=True), meta["timing"]["functions"][0]


LOAD_USE_LOAD = """
    ld.global.u32 %r2, [%rd1];
    add.s32 %r3, %r2, 1;
    add.s64 %rd2, %rd1, 256;
    ld.global.u32 %r4, [%rd2];
    add.s32 %r5, %r4, %r3;
    st.global.u32 [%rd1+4], %r5;
    ret;"""   # Triton's order: a load, its use, then the next address and load


def test_hoisting_puts_a_later_load_in_flight_before_the_earlier_use():
    """Triton's order: load, use, then the next address and load. The second issue moves above the first
    use's wait, with its address computed into an hbfcc register from the same inputs; the loads and
    the uses stay where they were, each use still waits for its own future."""
    src = kernel(LOAD_USE_LOAD)
    t, rep = hoisted_trace(src)
    ev = [x for x in t if not x.startswith("hb: ")]
    i0 = ev.index(f"issue bytes=4 flags={LD} site=0")
    i1 = ev.index(f"issue bytes=4 flags={LD} site=1")
    w0 = ev.index("wait %__hb_f0")
    assert i0 < i1 < w0 < ev.index("add.s32 %r3, %r2, 1;")
    # program order of the original instructions is unchanged
    orig = [x for x in ev if not x.startswith(("issue", "wait", "join", "kernel_"))]
    assert orig == ["ld.param.u64 %rd1, [k_p];", "ld.param.u32 %r1, [k_n];", "setp.gt.u32 %p1, %r1, 5;",
                    "ld.global.u32 %r2, [%rd1];", "add.s32 %r3, %r2, 1;", "add.s64 %rd2, %rd1, 256;",
                    "ld.global.u32 %r4, [%rd2];", "add.s32 %r5, %r4, %r3;", "st.global.u32 [%rd1+4], %r5;", "ret;"]
    assert ev.index("wait %__hb_f1") < ev.index("add.s32 %r5, %r4, %r3;")
    # the address of the hoisted issue: a copy of add.s64 %rd2 into an hbfcc register
    copy = next(x for x in t if x.startswith("hb: add.s64 %__hb_x"))
    assert copy.endswith(", %rd1, 256;")
    assert rep["hoisted_issues"] == 2      # the first load's issue moved above the parameter loads too
    assemble_linked(src)


def test_hoisting_copies_a_late_guard():
    """A guard computed after the earlier use is copied too: the issue's ACTIVE flag and the future
    update use the copy; the load keeps its own guard."""
    src = kernel("""
    ld.global.u32 %r2, [%rd1];
    add.s32 %r3, %r2, 1;
    setp.lt.u32 %p2, %r1, 9;
    @%p2 ld.global.u32 %r4, [%rd1+64];
    add.s32 %r5, %r4, %r3;
    st.global.u32 [%rd1+4], %r5;
    ret;""")
    t, _ = hoisted_trace(src)
    ev = [x for x in t if not x.startswith("hb: ")]
    assert ev.index(f"issue bytes=4 flags=%__hb_fl site=1") < ev.index("wait %__hb_f0")
    assert "@%p2 ld.global.u32 %r4, [%rd1+64];" in ev
    setp = next(x for x in t if x.startswith("hb: setp.lt.u32 %__hb_x"))
    px = setp.split()[2].rstrip(",")
    assert f"hb: selp.b32 %__hb_fl, {LD}, 0, {px};" in t
    assert f"hb: @{px} mov.b64 %__hb_f1, %__hb_t;" in t
    assemble_linked(src)


@pytest.mark.parametrize("between, why, site", [
    ("bar.sync 0;", "barrier", 1),
    ("mov.u64 %rd5, %globaltimer;", "clock read", 1),
    ("ld.volatile.global.u32 %r6, [%rd1+128];", "volatile load", 2),   # itself site 1 (waits at once)
    ("membar.gl;", "fence", 1),
])
def test_hoisting_stops_at_ordering_points(between, why, site):
    src = kernel(f"""
    ld.global.u32 %r2, [%rd1];
    add.s32 %r3, %r2, 1;
    {between}
    ld.global.u32 %r4, [%rd1+256];
    add.s32 %r5, %r4, %r3;
    st.global.u32 [%rd1+4], %r5;
    ret;""")
    t, _ = hoisted_trace(src)
    ev = [x for x in t if not x.startswith("hb: ")]
    b = next(i for i, x in enumerate(ev) if x.startswith(between.split()[0]))
    assert ev.index(f"issue bytes=4 flags={LD} site={site}") > b, why
    assemble_linked(src)


def test_hoisting_never_moves_above_a_use_of_its_address_source():
    """Pointer chase: the second address is the first load's value, so its issue comes after that
    value's wait (the address is not known earlier)."""
    src = kernel("""
    ld.global.u64 %rd2, [%rd1];
    add.s64 %rd3, %rd2, 8;
    ld.global.u32 %r4, [%rd3];
    st.global.u32 [%rd1+4], %r4;
    ret;""")
    t, _ = hoisted_trace(src)
    ev = [x for x in t if not x.startswith("hb: ")]
    assert ev.index("wait %__hb_f0") < ev.index(f"issue bytes=4 flags={LD} site=1")
    assemble_linked(src)


def test_hoisting_stops_at_a_read_of_the_loads_destination():
    """In a loop body the destination may still hold the previous iteration's value, whose wait uses
    the same future register: the issue never moves above a read of it."""
    src = kernel("""
    mov.u32 %r4, 0;
$LOOP:
    add.s32 %r6, %r4, 1;
    add.s64 %rd3, %rd1, 64;
    ld.global.u32 %r4, [%rd3];
    add.s32 %r1, %r1, -1;
    setp.ne.u32 %p3, %r1, 0;
    @%p3 bra $LOOP;
    st.global.u32 [%rd1+4], %r4;
    ret;""")
    t, _ = hoisted_trace(src)
    ev = [x for x in t if not x.startswith("hb: ")]
    assert ev.index("add.s32 %r6, %r4, 1;") < ev.index(f"issue bytes=4 flags={LD} site=0")
    assemble_linked(src)


def test_hoisting_off_keeps_issues_at_their_access():
    src = kernel("""
    ld.global.u32 %r2, [%rd1];
    add.s32 %r3, %r2, 1;
    ld.global.u32 %r4, [%rd1+256];
    add.s32 %r5, %r4, %r3;
    st.global.u32 [%rd1+4], %r5;
    ret;""")
    m, meta = run_pass(src)
    assert meta["timing"]["functions"][0]["hoisted_issues"] == 0 and meta["timing"]["hoist_issues"] is False
    ev = U.trace(m, "k")
    assert ev.index("wait %__hb_f0") < ev.index(f"issue bytes=4 flags={LD} site=1")


def test_hoisting_setting_is_in_the_version_marker(monkeypatch):
    """Triton keys its cache on `hbfcc-ptxas --version`: a build without hoisting must not reuse one with."""
    from hbfcc.cli import marker_line
    monkeypatch.delenv("HBFCC_HOIST_ISSUES", raising=False)
    on = marker_line()
    monkeypatch.setenv("HBFCC_HOIST_ISSUES", "0")
    off = marker_line()
    assert "hoist-issues" not in on and off.endswith(" hoist-issues off") and off.startswith(on)


# ---- loads moved with their issue (HBFCC_HOIST_LOADS, default on) -----------------------------------

def test_a_load_moves_with_its_hoisted_issue_above_the_earlier_use():
    """With nothing but computation between, the second load itself runs right after its issue, above the
    first use and its wait: both loads are in flight before the first wait (ptxas would not move it above
    the wait's call). Every other instruction keeps its order; the store stays last."""
    src = kernel(LOAD_USE_LOAD)
    m, meta = run_pass(src, {"hoist_issues": True, "hoist_loads": True})
    t = U.trace(m, "k", keep_hb_movs=True)
    second = next(x for x in t if x.startswith("hb: ld.global.u32 %r4, [%__hb_x"))   # its address: the copy
    assert t.index(second) < t.index("wait %__hb_f0") < t.index("add.s32 %r3, %r2, 1;")
    assert "ld.global.u32 %r4, [%rd2];" not in t and t.count("add.s64 %rd2, %rd1, 256;") == 1
    assert t.index("st.global.u32 [%rd1+4], %r5;") > t.index("add.s32 %r5, %r4, %r3;")
    assert meta["timing"]["functions"][0]["moved_loads"] >= 1
    assemble_linked(src)


def test_a_store_between_keeps_the_load_where_it_is():
    src = kernel("""
    ld.global.u32 %r2, [%rd1];
    add.s32 %r3, %r2, 1;
    st.global.u32 [%rd1+8], %r3;
    add.s64 %rd2, %rd1, 256;
    ld.global.u32 %r4, [%rd2];
    add.s32 %r5, %r4, %r3;
    st.global.u32 [%rd1+4], %r5;
    ret;""")
    m, meta = run_pass(src, {"hoist_issues": True, "hoist_loads": True})
    ev = [x for x in U.trace(m, "k", keep_hb_movs=True) if not x.startswith("hb: ")]
    assert ev.index("st.global.u32 [%rd1+8], %r3;") < ev.index("ld.global.u32 %r4, [%rd2];")


def test_a_default_value_still_pending_keeps_the_load_where_it_is():
    """The default-value mov reads a loaded value whose wait lies between: moved up, it would consume that
    value before its modeled completion, so the load stays (its issue is still hoisted, to the barrier)."""
    src = kernel("""
    ld.global.u32 %r2, [%rd1];
    bar.sync 0;
    add.s32 %r3, %r2, 1;
    add.s64 %rd2, %rd1, 256;
    mov.u32 %r4, %r2;
    @%p1 ld.global.u32 %r4, [%rd2];
    add.s32 %r5, %r4, %r3;
    st.global.u32 [%rd1+4], %r5;
    ret;""")
    m, meta = run_pass(src, {"hoist_issues": True, "hoist_loads": True})
    t = U.trace(m, "k", keep_hb_movs=True)
    assert "@%p1 ld.global.u32 %r4, [%rd2];" in t and t.index("mov.u32 %r4, %r2;") > t.index("wait %__hb_f0")
    assemble_linked(src)
