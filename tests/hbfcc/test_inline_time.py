"""HBFCC_INLINE_TIME (helper ABI 8): an honest counter for the inline issue path's own time.

The inline path (docs/design.md §3.3) serves requests without a helper call, so none of its time reached
``overhead_ns``: kernels served wholly inline had counters that explained nothing of their instrumented/native
difference (docs/RESULTS.md stop 45/46). With the knob each served inline path -- a site served inline (one range or
the multi-range re-check), an issue group served inline, a ready wait tested inline -- reads ``%globaltimer`` a second
time at its end, after its counters, and adds the time since the path's own first read to ``%__hb_ins`` on the leader
lane only; both flushes pass it as ``inline_ns`` and the live ask zeroes it after its flush. Without the knob: no
register, not one instruction more at a site, the flushes pass 0.

What is checked here, on the CPU: the emitted PTX with the knob on and off (the off build is the on build less the
timer code exactly; the reads only at the ends of served paths, never on the way to ``__hb_issue`` / ``__hb_wait``;
the accumulation guarded by the leader predicate; the flushes' argument), ptxas assembling the timed build with
every helper build and the whole fixture corpus (slow), and the helper's flush adding the warp sum once per warp.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import hbfcc_testutil as U  # noqa: E402
from test_inline_live import GRID_STRIDE, call_blocks  # noqa: E402

from hbfcc import helpers as H  # noqa: E402
from hbfcc import knobs  # noqa: E402
from hbfcc.passes.timing import R_INS, timing_pass  # noqa: E402
from hbfcc.ptx import parse_module  # noqa: E402
from hbfcc.ptx.printer import print_module  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402
from hbfcommon import abi  # noqa: E402
from hbfcommon.errors import ConfigError  # noqa: E402

# two input ranges' worth of loads in one block (a group of 2 sites), a predicated store: every served path kind
TWO_LOADS = """.version 9.0
.target sm_90a
.address_size 64

.visible .entry add2(.param .u64 a_x, .param .u64 a_y, .param .u64 a_z, .param .u32 a_n)
{
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<16>;
    ld.param.u64 %rd1, [a_x];
    ld.param.u64 %rd2, [a_y];
    ld.param.u64 %rd3, [a_z];
    ld.param.u32 %r5, [a_n];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.s32 %r4, %r1, %r2, %r3;
    setp.lt.s32 %p1, %r4, %r5;
    mul.wide.s32 %rd4, %r4, 4;
    add.s64 %rd5, %rd1, %rd4;
    add.s64 %rd6, %rd2, %rd4;
    add.s64 %rd7, %rd3, %rd4;
    @%p1 ld.global.f32 %f1, [%rd5];
    @%p1 ld.global.f32 %f2, [%rd6];
    add.f32 %f3, %f1, %f2;
    @%p1 st.global.f32 [%rd7], %f3;
    ret;
}
"""

# line-anchored (re.M): the printer indents a statement by its block depth (an ask's zeroing may sit in a nested block)
TIMER = re.compile(r"^[ \t]*mov\.u64 \t%__hb_ix, %globaltimer;\n"
                   r"[ \t]*sub\.u64 \t%__hb_ix, %__hb_ix, (%__hb_i[ty]);\n"
                   r"[ \t]*@%__hb_ipl add\.u64 \t%__hb_ins, %__hb_ins, %__hb_ix;\n", re.M)
GROUP_START = re.compile(r"^[ \t]*and\.b32 \t%__hb_il, %__hb_lmlt, %__hb_im;\n"
                         r"[ \t]*setp\.eq\.u32 \t%__hb_ipl, %__hb_il, 0;\n"
                         r"[ \t]*ld\.const\.u64 \t%__hb_iy, \[__hb_cdesc\+" + str(abi.CDESC_INL_READ_DELAY_OFF) +
                         r"\];\n[ \t]*sub\.u64 \t%__hb_iy, %__hb_it, %__hb_iy;\n", re.M)
INS_LINES = re.compile(r"^[ \t]*(\.reg \.b64 \t%__hb_ins|mov\.b64 \t%__hb_ins, 0);\n", re.M)


def rewrite(itime: bool, src: str = GRID_STRIDE, group: bool = True, live: bool = True, multi: bool = True):
    meta = {"inline_issues": True, "group_issues": group, "hoist_issues": True, "inline_live": live,
            "inline_multi": multi, "inline_time": itime}
    return print_module(timing_pass(parse_module(src), meta)), meta


def strip_timer(out: str) -> str:
    """The timed build less everything HBFCC_INLINE_TIME adds: what the untimed build must be, character for
    character."""
    out = INS_LINES.sub("", out)
    out = GROUP_START.sub("", out)
    out = TIMER.sub("", out)
    return re.sub(r"(st\.param\.b64 \t\[__hb_p\d+\]), %__hb_ins;", r"\1, 0;", out)


def blocks(out: str) -> list[str]:
    """The straight-line pieces of ``out``: split at labels and after branches."""
    out_blocks, cur = [], []
    for line in out.split("\n"):
        if re.match(r"\$\w+:", line) and cur:
            out_blocks.append("\n".join(cur))
            cur = []
        cur.append(line)
        if re.search(r"\bbra(\.uni)? \t\$\w+;", line):
            out_blocks.append("\n".join(cur))
            cur = []
    return [b for b in out_blocks + ["\n".join(cur)] if b.strip()]


@pytest.mark.parametrize("src", [GRID_STRIDE, TWO_LOADS], ids=["grid_stride", "add2"])
@pytest.mark.parametrize("group", [True, False], ids=["groups", "alone"])
def test_off_is_the_timed_build_less_the_timer_exactly(src, group):
    on, meta_on = rewrite(True, src, group)
    off, meta_off = rewrite(False, src, group)
    assert meta_on["timing"]["inline_time"] is True and meta_off["timing"]["inline_time"] is False
    assert R_INS not in off and "%globaltimer" in off
    assert meta_off["timing"]["functions"][0]["timed_paths"] == 0
    assert strip_timer(on) == off
    # one second read per timed path, nothing else reads the clock twice
    n = meta_on["timing"]["functions"][0]["timed_paths"]
    assert n > 0 and len(TIMER.findall(on)) == n
    assert on.count("%globaltimer") == off.count("%globaltimer") + n


def test_every_served_path_kind_is_timed():
    """The grid-stride kernel with groups: its load's group (served), the load alone (where the group's vote
    fails), the store, the load's ready wait and the exit's store drain: 5 paths, two of them waits."""
    on, meta = rewrite(True)
    f = meta["timing"]["functions"][0]
    assert f["timed_paths"] == 5
    starts = [m.group(1) for m in TIMER.finditer(on)]
    assert starts.count("%__hb_iy") == len(GROUP_START.findall(on)) == f["issue_groups"] == 1
    assert starts.count("%__hb_it") == 4
    # without groups: the two sites and the two waits
    _, meta = rewrite(True, group=False)
    assert meta["timing"]["functions"][0]["timed_paths"] == 4


def test_the_reads_end_served_paths_only():
    """Every second read sits in a straight-line piece that ends in the uniform branch to the path's end (a served
    path), after its counters, with no helper call in it; the paths that end in __hb_issue / __hb_wait are never
    timed (their time is the helpers' overhead_ns / wait_wall_ns)."""
    for src in (GRID_STRIDE, TWO_LOADS):
        on, _ = rewrite(True, src)
        timed = [b for b in blocks(on) if TIMER.search(b + "\n")]
        assert timed and len(timed) == len(TIMER.findall(on))
        for b in timed:
            assert "call" not in b and re.search(r"bra\.uni \t\$\w+;$", b), b
            tail = b[TIMER.search(b + "\n").end():]
            # after the timer only the wait's clearing of its future and the branch to the path's end
            assert re.fullmatch(r"(\tmov\.b64 \t%__hb_(f\d+|d|g\d+), 0;\n)?\tbra\.uni \t\$\w+;", tail), tail
            head = b[:TIMER.search(b + "\n").start()]
            # the counters come first: the request, or the ready wait's count
            assert re.search(r"@%__hb_ipl add\.u32 \t%__hb_i(cr|cw|rw), %__hb_i\1, 1;|add\.u32 \t%__hb_icr, "
                             r"%__hb_icr, %__hb_gc;", head), b
        for b in blocks(on):                    # no slow path carries a second read
            if re.search(r"call(\.uni)? \t(\(__hb_rv\), )?__hb_(issue|wait|issue_group), ", b):
                assert not TIMER.search(b + "\n"), b


def test_the_accumulation_is_the_leaders():
    """The add into %__hb_ins is predicated on %__hb_ipl, and that predicate is the leader of the lanes the path
    served: for a site and a wait the lowest active lane (_leader: activemask & lanemask_lt == 0, the lane that
    counts the request), for a group the lowest lane of the group's active mask (recomputed: %__hb_ipl held the last
    site's leader)."""
    on, _ = rewrite(True, TWO_LOADS)
    for m in TIMER.finditer(on):
        before = on[:m.start()]
        last_ipl = before.rindex("%__hb_ipl, %__hb_il, 0;")
        # nothing between the leader's definition and the add writes %__hb_ipl again
        seg = before[last_ipl + 25:]
        assert not re.search(r"(setp|and\.pred|mov\.pred)[^\n]*\t%__hb_ipl,", seg), seg[-400:]
    assert len(re.findall(r"@%__hb_ipl add\.u64 \t%__hb_ins", on)) == len(TIMER.findall(on))
    assert not re.search(r"(?<!@%__hb_ipl )add\.u64 \t%__hb_ins", on)


def test_the_flushes_pass_it_and_the_live_ask_zeroes_it():
    on, _ = rewrite(True)
    names = [n for _, n in abi.HELPERS["__hb_kernel_flush"].params]
    assert names[-1] == "inline_ns" and [n for _, n in abi.HELPERS["__hb_inline_until_live"].params][-1] == "inline_ns"
    (_, _, exit_args), = call_blocks(on, "__hb_kernel_flush")
    assert exit_args[-1] == R_INS
    asks = call_blocks(on, "__hb_inline_until_live")
    assert len(asks) == 3
    for _, e, args in asks:
        assert args[-1] == R_INS
        after = on[e:e + 400]
        assert f"\tmov.b64 \t{R_INS}, 0;\n" in after.split("setp")[0]     # zeroed with the other counters
    # the plain ask (HBFCC_INLINE_LIVE=0) flushes nothing: only the exit passes it
    on_exit_only, _ = rewrite(True, live=False)
    assert "__hb_inline_until_live" not in on_exit_only.split(".visible .entry")[1]
    (_, _, exit_args), = call_blocks(on_exit_only, "__hb_kernel_flush")
    assert exit_args[-1] == R_INS
    # off: 0 in both
    off, _ = rewrite(False)
    (_, _, exit_args), = call_blocks(off, "__hb_kernel_flush")
    assert exit_args[-1] == "0" and all(a[2][-1] == "0" for a in call_blocks(off, "__hb_inline_until_live"))


def test_the_knob(monkeypatch):
    monkeypatch.delenv("HBFCC_INLINE_TIME", raising=False)
    assert knobs.load().inline_time is False                       # default off until a GPU measured its cost
    res = rewrite_text(GRID_STRIDE, filename="gs.ptx", link=False)
    assert R_INS not in res.text and res.meta["timing"]["inline_time"] is False
    monkeypatch.setenv("HBFCC_INLINE_TIME", "1")
    res = rewrite_text(GRID_STRIDE, filename="gs.ptx", link=False)
    assert R_INS in res.text and res.meta["timing"]["inline_time"] is True
    monkeypatch.setenv("HBFCC_INLINE_TIME", "maybe")
    with pytest.raises(ConfigError):
        knobs.load()


def test_no_inline_path_no_timer():
    """HBFCC_INLINE_ISSUE=0 (and .func bodies): no inline path, so nothing to time -- no register either."""
    meta = {"inline_issues": False, "inline_time": True}
    out = print_module(timing_pass(parse_module(GRID_STRIDE), meta))
    assert R_INS not in out and meta["timing"]["functions"][0]["timed_paths"] == 0


@pytest.mark.parametrize("src", [GRID_STRIDE, TWO_LOADS], ids=["grid_stride", "add2"])
def test_the_timed_build_assembles_with_every_helper_build(src):
    for hp in U.helper_paths():
        for multi in (True, False):
            res_env = {"HBFCC_INLINE_TIME": "1", "HBFCC_INLINE_MULTI": "1" if multi else "0"}
            with pytest.MonkeyPatch.context() as mp:
                for k, v in res_env.items():
                    mp.setenv(k, v)
                U.assemble(rewrite_text(src, helper=H.load_helper(hp)).text)


def test_the_helper_adds_the_warp_sum_once():
    """runtime_cuda's __hb_kernel_flush (every helper build): inline_ns (its last parameter) is warp-summed like
    slack_ns and added once per warp into the kernel counters' inline_ns word; a warp whose only count is time
    still flushes (the group leader may count no request of its own)."""
    src = (Path(__file__).resolve().parents[2] / "runtime_cuda" / "src" / "hbf_helpers.cu").read_text()
    i = src.index("void __hb_kernel_flush(")
    body = src[i:src.index("\n}\n", i)]
    assert "unsigned long long inline_ns)" in body
    assert "(inline_ns != 0ull ? 2u : 0u)" in body                     # in the nothing-to-do test, a bit of its own
    assert "if (any == 0u) return;" in body
    assert "(any & 2u) ? hb_warp_sum(mask, inline_ns) : 0ull" in body   # summed only where some lane timed
    assert body.count("hb_red_add(&ks->inline_ns, ins)") == 1
    for hp in sorted((Path(__file__).resolve().parents[2] / "runtime_cuda" / "ptx").glob("hbf_helpers*.ptx")):
        text = hp.read_text()
        j = text.index(".func __hb_kernel_flush(")
        params = re.findall(r"\.param \.b(\d+) __hb_kernel_flush_param_\d+", text[j:text.index(")", j)])
        assert [int(p) for p in params] == [w for w, _ in abi.HELPERS["__hb_kernel_flush"].params], hp


@pytest.mark.slow
def test_corpus_timed_build_assembles(tmp_path, monkeypatch):
    """Every module of the fixture corpus, rewritten with HBFCC_INLINE_TIME=1, assembles (ptxas -c and nvlink
    against the real helper, as test_rewrite_corpus does for most modules) and is the untimed build less the timer."""
    import test_rewrite_corpus as RC  # noqa: PLC0415
    import concurrent.futures as cf  # noqa: PLC0415
    import os  # noqa: PLC0415
    helper, hobj = RC.helper_object(tmp_path)
    items = sorted(RC.corpus().items())
    monkeypatch.setenv("HBFCC_INLINE_TIME", "1")

    def one(kv):
        name, path = kv
        text = path.read_text()
        res = rewrite_text(text, filename=name, helper=helper, link=False)
        RC._assemble_separate(res.text, hobj)
        # the timing pass alone, knob on and off: the off build is the on build less the timer, character for character
        on = print_module(timing_pass(parse_module(text), {"inline_time": True}))
        assert strip_timer(on) == print_module(timing_pass(parse_module(text), {"inline_time": False})), name
        return sum(f.get("timed_paths", 0) for f in res.meta["timing"]["functions"])

    with cf.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as ex:
        timed = list(ex.map(one, items))
    assert len(timed) == len(items) >= 30 and sum(timed) > 0
