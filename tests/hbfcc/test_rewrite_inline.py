"""The inline issue path of the timing pass (hbf_abi.h "Inline issue"): what an entry's load and store
sites, waits and exits become, where it is NOT emitted, and that every form assembles with the real
helpers. The GPU side (counters, bit-identity, cost) is bench/devpath_cost.py and bench/devpath_matrix.py."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402

from hbfcommon import abi  # noqa: E402
from hbfcc import helpers as H  # noqa: E402
from hbfcc.passes.timing import timing_pass  # noqa: E402
from hbfcc.ptx import parse_module  # noqa: E402
from hbfcc.ptx.printer import print_module  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402

HDR = """.version 9.0
.target sm_90a
.address_size 64
"""

STREAM = HDR + """
.visible .entry k(.param .u64 k_p, .param .u64 k_q, .param .u32 k_n)
{
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<16>;
    ld.param.u64 %rd1, [k_p];
    ld.param.u64 %rd2, [k_q];
    ld.param.u32 %r1, [k_n];
    mov.u32 %r2, %tid.x;
    setp.lt.u32 %p1, %r2, %r1;
    mul.wide.u32 %rd3, %r2, 16;
    add.s64 %rd4, %rd1, %rd3;
    add.s64 %rd5, %rd2, %rd3;
    @%p1 ld.global.v4.b32 {%r4, %r5, %r6, %r7}, [%rd4];
    add.s32 %r8, %r4, %r5;
    @%p1 st.global.v4.b32 [%rd5], {%r8, %r5, %r6, %r7};
    ret;
}
"""

FUNC = HDR + """
.func f(.param .u64 f_p)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [f_p];
    ld.global.u32 %r1, [%rd1];
    add.s32 %r2, %r1, 1;
    st.global.u32 [%rd1], %r2;
    ret;
}
"""


def rewrite(text: str, inline: bool = True) -> str:
    meta = {"inline_issues": inline}
    return print_module(timing_pass(parse_module(text), meta))


def test_entry_sites_are_served_inline_with_the_helpers_as_fallback():
    out = rewrite(STREAM)
    # the until check, the descriptor's range, the warp vote, the deadline from the descriptor
    assert out.count("%globaltimer") >= 3                      # load issue, store issue, the wait
    assert "setp.lt.s64 \t%__hb_ipa, %__hb_it, %__hb_iur;" in out
    assert "setp.lt.s64 \t%__hb_ipa, %__hb_it, %__hb_iuw;" in out
    assert f"[__hb_cdesc+{abi.CDESC_R0_LEN_OFF}]" in out and f"[__hb_cdesc+{abi.CDESC_R0_BASE_OFF}]" in out
    assert f"[__hb_cdesc+{abi.CDESC_INL_READ_DELAY_OFF}]" in out and f"[__hb_cdesc+{abi.CDESC_INL_WRITE_DELAY_OFF}]" in out
    assert out.count("vote.sync.all.pred") == 2
    # the general path stays reachable from both sites, and an expired until asks the helper again
    assert out.count("__hb_issue, (") == 2 and out.count("__hb_inline_until, (") == 2
    # the guarded lanes that do not access skip the site (future 0, as the helper gives them)
    assert "@!%p1 bra" in out
    # the thread's counters go to the kernel at its exit, before the exit's bookkeeping
    assert out.index("__hb_kernel_flush, (") < out.rindex("__hb_kernel_exit, (")
    # the descriptor is declared for the linker (it becomes the helper's definition)
    assert f".extern .const .align 8 .b8 \t{abi.CDESC_GLOBAL}[{abi.CDESC_BYTES}];" in out


def test_a_ready_wait_is_counted_inline_and_a_pending_one_calls_the_helper():
    out = rewrite(STREAM)
    i = out.index("setp.lt.u64 \t%__hb_ipa, %__hb_it, %__hb_f0;")     # due? (a ticket, bit 63, never is)
    seg = out[i:out.index("__hb_wait, (", i) + 20]
    assert "add.u32 \t%__hb_irw, %__hb_irw, 1;" in seg and "add.u64 \t%__hb_isl, %__hb_isl, %__hb_ix;" in seg
    assert "__hb_wait, (" in seg


def test_not_inline_in_functions_or_when_off():
    out = rewrite(FUNC)                                           # no exit flushes the counters of a .func
    assert "%__hb_iur" not in out and "__hb_inline_until" not in out.split("// hbfcc: helper prototypes")[1].split(".func f")[1]
    assert "__hb_cdesc" not in out
    off = rewrite(STREAM, inline=False)                           # HBFCC_INLINE_ISSUE=0
    assert "%__hb_iur" not in off and "vote.sync.all" not in off and "__hb_kernel_flush, (" not in off


def test_loads_that_wait_at_once_use_the_helpers():
    vol = STREAM.replace("@%p1 ld.global.v4.b32", "@%p1 ld.volatile.global.v4.b32")
    out = rewrite(vol)
    assert out.count("vote.sync.all.pred") == 1                   # the store only; the volatile load calls


def test_inline_forms_assemble_with_every_helper_build():
    for hp in U.helper_paths():
        for src in (STREAM, FUNC):
            res = rewrite_text(src, helper=H.load_helper(hp))
            U.assemble(res.text)

