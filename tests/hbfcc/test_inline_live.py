"""Issue 17 item 2 for the inline issue path (HBFCC_INLINE_LIVE, helper ABI 7): a long-lived thread's inline
counters reach the kernel's counter shards -- and so the live activity hbfd's energy bins read -- at every until
point, not only at the thread's exit. Before it, the inline path counted in registers and added them to the shards
only in the exit's ``__hb_kernel_flush``: a persistent / grid-stride kernel's inline requests were invisible to the
thermal model until its threads ended.

Three parts: the rewritten PTX of a grid-stride kernel (where the flush is, what it passes and zeroes, that the
per-access path is the code of before), the helper that serves it (flush first, then the until), and a host twin
that runs the emitted counting -- the site's increments, the ask's arguments and zeroing, the exit flush, all read
from the rewritten PTX -- against the live-activity publisher's twin (tests/thermal/test_live_activity.py): the
totals stay exact and the publication grows while the kernel runs; without the flush it stays flat until exit."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "thermal"))
import hbfcc_testutil as U  # noqa: E402
from test_live_activity import DeviceActivityTwin  # noqa: E402

from hbfcc import helpers as H  # noqa: E402
from hbfcc.passes.timing import timing_pass  # noqa: E402
from hbfcc.ptx import parse_module  # noqa: E402
from hbfcc.ptx.printer import print_module  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402
from hbfcommon import abi, ctl  # noqa: E402

GRID_STRIDE = """.version 9.0
.target sm_90a
.address_size 64

.visible .entry gs(.param .u64 gs_x, .param .u64 gs_y, .param .u64 gs_n)
{
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<16>;
    ld.param.u64 %rd1, [gs_x];
    ld.param.u64 %rd2, [gs_y];
    ld.param.u64 %rd3, [gs_n];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mov.u32 %r4, %nctaid.x;
    mul.wide.u32 %rd4, %r1, %r2;
    cvt.u64.u32 %rd5, %r3;
    add.s64 %rd6, %rd4, %rd5;
    mul.wide.u32 %rd7, %r4, %r2;
    setp.ge.u64 %p1, %rd6, %rd3;
    @%p1 bra $DONE;
$LOOP:
    shl.b64 %rd8, %rd6, 2;
    add.s64 %rd9, %rd1, %rd8;
    ld.global.f32 %f1, [%rd9];
    add.f32 %f2, %f1, 0f3F800000;
    add.s64 %rd10, %rd2, %rd8;
    st.global.f32 [%rd10], %f2;
    add.s64 %rd6, %rd6, %rd7;
    setp.lt.u64 %p2, %rd6, %rd3;
    @%p2 bra $LOOP;
$DONE:
    ret;
}
"""

COUNTERS = ("%__hb_icr", "%__hb_igr", "%__hb_ibr", "%__hb_icw", "%__hb_ibw", "%__hb_irw", "%__hb_isl")


def rewrite(live: bool = True, src: str = GRID_STRIDE, group: bool = True) -> tuple[str, dict]:
    meta = {"inline_issues": True, "group_issues": group, "hoist_issues": True, "inline_live": live}
    return print_module(timing_pass(parse_module(src), meta)), meta


def call_blocks(out: str, name: str) -> list[tuple[int, int, list[str]]]:
    """Every call of ``name``: (start, end) of its ``{ ... }`` block and the registers/immediates it passes, in
    parameter order."""
    res = []
    for m in re.finditer(r"\{\n((?:\t\t[^\n]*\n)*?)\t\tcall(?:\.uni)? \t(?:\(__hb_rv\), )?" + name + r", \(", out):
        end = out.index("\t}\n", m.end()) + 3
        args = re.findall(r"st\.param\.b\d+ \t\[__hb_p\d+\], ([^;]+);", out[m.start():end])
        res.append((m.start(), end, args))
    return res


def zeroed_after(out: str, end: int) -> list[str]:
    """The counters set to 0 right after a call block (the statements that follow it directly)."""
    regs = []
    while True:
        m = re.match(r"\tmov\.b(?:32|64) \t(%__hb_i\w+), 0;\n", out[end:])
        if not m or m.group(1) not in COUNTERS:
            return regs
        regs.append(m.group(1))
        end += m.end()


def _strip_asks(out: str, name: str) -> str:
    """``out`` without the until asks (their call blocks and the zeroing after them)."""
    for s, e, _ in reversed(call_blocks(out, name)):
        z = e + sum(len(f"\tmov.b{64 if r in ('%__hb_ibr', '%__hb_ibw', '%__hb_isl') else 32} \t{r}, 0;\n")
                    for r in zeroed_after(out, e))
        out = out[:s] + "<ASK>\n" + out[z:]
    return out


# ---- the rewritten PTX ---------------------------------------------------------------------------------------------

def test_a_grid_stride_loop_flushes_its_inline_counters_where_it_asks_for_its_until():
    out, meta = rewrite()
    assert meta["timing"]["inline_live"] is True
    loop = out[out.index("$LOOP:"):out.index("bra \t$LOOP;")]
    asks = call_blocks(loop, "__hb_inline_until_live")
    # the load's until point (its one-site group, and the site alone where the group's vote fails), the store's
    assert [a[2][0] for a in asks] == [str(abi.HBF_OP_LOAD)] * 2 + [str(abi.HBF_OP_STORE)]
    assert "__hb_inline_until, (" not in out                       # the plain ask is gone from the kernel
    flush_params = [n for _, n in abi.HELPERS["__hb_kernel_flush"].params]
    live_params = [n for _, n in abi.HELPERS["__hb_inline_until_live"].params]
    assert live_params == ["op"] + flush_params                   # the exit flush's parameters, behind the op
    (_, _, exit_args), = call_blocks(out, "__hb_kernel_flush")
    for s, e, args in asks:
        assert args[1:] == exit_args                               # the same counters, in the same order
        assert sorted(zeroed_after(loop, e)) == sorted(COUNTERS)   # every counter zeroed after the ask
    assert exit_args[1:-1] == list(COUNTERS) and exit_args[-1] == "0"   # inline_ns (ABI 8): 0 without HBFCC_INLINE_TIME
    # the exit flush is still there, after the loop, before the exit's bookkeeping
    assert out.index("$DONE:") < out.index("__hb_kernel_flush, (") < out.rindex("__hb_kernel_exit, (")
    assert meta["timing"]["functions"][0]["live_flushes"] == 3


def test_the_per_access_path_is_the_code_of_before():
    """With the until in force a site runs exactly what it ran without the flush: the two builds differ only in the
    ask (its call and the zeroing after it), the rare path."""
    on, _ = rewrite(True)
    off, meta = rewrite(False)
    assert meta["timing"]["inline_live"] is False and "__hb_inline_until_live" not in off.split("// hbfcc: helper")[1] \
        .split(".visible .entry")[1]
    assert _strip_asks(on, "__hb_inline_until_live") == _strip_asks(off, "__hb_inline_until")


def test_the_knob_reaches_the_pass(monkeypatch):
    monkeypatch.setenv("HBFCC_INLINE_LIVE", "0")
    res = rewrite_text(GRID_STRIDE, filename="gs.ptx", link=False)
    body = res.text[res.text.index(".visible .entry"):]
    assert "__hb_inline_until_live" not in body and "__hb_inline_until, (" in body
    monkeypatch.setenv("HBFCC_INLINE_LIVE", "1")
    res = rewrite_text(GRID_STRIDE, filename="gs.ptx", link=False)
    assert "__hb_inline_until_live, (" in res.text[res.text.index(".visible .entry"):]


def test_the_live_build_assembles_with_every_helper_build():
    for hp in U.helper_paths():
        for src in (GRID_STRIDE,):
            U.assemble(rewrite_text(src, helper=H.load_helper(hp)).text)


def test_the_helper_flushes_before_it_answers():
    """runtime_cuda's __hb_inline_until_live: __hb_kernel_flush of its counters first (so a publication this ask runs
    already holds them), then __hb_inline_until(op), whose value it returns."""
    for hp in sorted((Path(__file__).resolve().parents[2] / "runtime_cuda" / "ptx").glob("hbf_helpers*.ptx")):
        text = Path(hp).read_text()
        i = text.index("__hb_inline_until_live(")
        body = text[text.index("{", i):text.index("\n}\n", i)]
        calls = re.findall(r"call(?:\.uni)?\s+(?:\(\w+\),\s*)?(__hb_\w+),", body)
        assert calls == ["__hb_kernel_flush", "__hb_inline_until"], (hp, calls)
        nparams = len(abi.HELPERS["__hb_inline_until_live"].params)
        assert all(f"__hb_inline_until_live_param_{k}" in body for k in range(nparams))   # every one forwarded
        assert "[func_retval0" in body[body.index("__hb_inline_until,"):]               # its answer returned


# ---- a host twin of the emitted counting against the live-activity publisher's twin ----------------------------------

class ThreadTwin:
    """One warp of a grid-stride kernel, as the rewritten PTX counts: the site's register increments (read from the
    PTX), the ask at each until point (its arguments and the zeroing after it, read from the PTX) and the exit flush.
    The flush is __hb_kernel_flush's arithmetic (hbf_helpers.cu): warp sums into the SM's shard."""

    def __init__(self, out: str, live: bool, tw: DeviceActivityTwin, k: int, smid: int, gshift: int):
        self.tw, self.k, self.smid, self.gshift = tw, k, smid, gshift
        loop = out[out.index("$LOOP:"):out.index("bra \t$LOOP;")]
        name = "__hb_inline_until_live" if live else "__hb_inline_until"
        asks = call_blocks(loop, name)
        assert len(asks) == 2
        self.ask = [(a[2], zeroed_after(loop, a[1]) if live else []) for a in asks]
        (_, _, self.exit_args), = call_blocks(out, "__hb_kernel_flush")
        # the increments the load site and the store site make when they serve inline (after each ask block)
        self.inc = []
        for _, e, _ in asks:     # up to the site's helper call (its counters come once, on the served path)
            seg = loop[e:loop.index("__hb_issue", e)]
            self.inc.append({r: int(v) for r, v in
                             re.findall(r"add\.u(?:32|64) \t(%__hb_i\w+), \1, (\d+);", seg) if r in COUNTERS})
        self.regs = {r: 0 for r in COUNTERS}

    def flush(self, args: list[str]) -> None:
        names = [n for _, n in abi.HELPERS["__hb_kernel_flush"].params][1:]   # after kernel_index
        v = {n: self.regs.get(a, 0) for n, a in zip(names, args)}
        if v.get("rd_req", 0) or v.get("wr_req", 0):
            self.tw.count(self.k, self.smid, abi.HBF_OP_LOAD, v["rd_req"], v["rd_granules"] << self.gshift)
            self.tw.count(self.k, self.smid, abi.HBF_OP_STORE, v["wr_req"], v["wr_bytes"])

    def until_point(self, site: int) -> None:
        args, zero = self.ask[site]
        self.flush(args[2:])                                       # __hb_inline_until_live: the flush first
        for r in zero:
            self.regs[r] = 0

    def serve(self, site: int) -> None:
        """The warp leader's view (one request per warp, the lane's granule and bytes): what the site adds."""
        for r, d in self.inc[site].items():
            self.regs[r] += d

    def exit(self) -> None:
        self.flush(self.exit_args[1:])                             # after kernel_index


def run_kernel(live: bool, warps: int = 8, iters: int = 4000, until_every: int = 250):
    out, _ = rewrite(live, group=False)                            # each site alone: its increments are immediates
    c = ctl.hbf_ctl()
    tw = DeviceActivityTwin(c)
    k = 5
    tw.kernel_enter(k, 0)
    ths = [ThreadTwin(out, live, tw, k, smid=w % 3, gshift=5) for w in range(warps)]
    t, seen = 0, []
    for i in range(iters):
        for th in ths:
            for site in (0, 1):
                if i % until_every == 0:                            # the until has passed: ask (and flush)
                    th.until_point(site)
                th.serve(site)
        t += 10_000                                                 # 10 us of GPU time per iteration
        if tw.flush(t):                                             # the publisher, at most once per ms
            a = ctl.read_activity(c)
            seen.append((i, a.requests[abi.HBF_OP_LOAD], a.requests[abi.HBF_OP_STORE]))
    for th in ths:
        th.exit()
    for _ in range(4):                                              # the publications after the kernel
        t += ctl.HBF_ACT_PERIOD_NS
        tw.flush(t)
    final = ctl.read_activity(c)
    return seen, final, tw


def test_twin_inline_requests_reach_the_live_activity_while_the_kernel_runs():
    warps, iters = 8, 4000
    seen, final, tw = run_kernel(True, warps, iters)
    # exact at the end: every served request counted once (load and store: one warp request per iteration each)
    assert final.requests[abi.HBF_OP_LOAD] == warps * iters and final.requests[abi.HBF_OP_STORE] == warps * iters
    assert final.bytes[abi.HBF_OP_STORE] == warps * iters * 4
    assert final.bytes[abi.HBF_OP_LOAD] == warps * iters * 32     # one 32-byte granule per warp-load (gshift 5)
    sh = tw.shards.sum(axis=(0, 1))
    assert int(sh[abi.HBF_OP_LOAD, 0]) == warps * iters              # the shards: nothing twice, nothing lost
    # during the kernel: the publications grow, each at most one until period (250 iterations) behind
    mid = [s for s in seen if s[0] >= iters // 2]
    assert mid and all(s[1] >= warps * ((s[0] // 250) * 250) for s in seen)
    assert seen[len(seen) // 2][1] > 0.3 * warps * iters
    assert all(b[1] >= a[1] for a, b in zip(seen, seen[1:]))


def test_twin_without_the_flush_the_live_activity_is_flat_until_exit():
    """The gap (HBFCC_INLINE_LIVE=0, the code of before): the same kernel publishes nothing of its inline requests
    while it runs, and the same exact totals after its exit."""
    warps, iters = 8, 4000
    seen, final, _ = run_kernel(False, warps, iters)
    assert seen and all(s[1] == 0 and s[2] == 0 for s in seen)
    assert final.requests[abi.HBF_OP_LOAD] == warps * iters and final.requests[abi.HBF_OP_STORE] == warps * iters
    assert np.all(np.array(final.bytes) >= 0)


# ---- HBFCC_SHARE_UNTIL: one ask serves both ops ------------------------------------------------------------------

def share_lines(out: str, end: int) -> list[str]:
    """The statements right after an ask's call block and its zeroing (the until shared with the other op)."""
    z = end + sum(len(f"\tmov.b{64 if r in ('%__hb_ibr', '%__hb_ibw', '%__hb_isl') else 32} \t{r}, 0;\n")
                  for r in zeroed_after(out, end))
    return out[z:].split("\n")[:4]


def run_share(lines: list[str], inl_flags: int, until: int, other: int, mine: str, theirs: str) -> int:
    """The four share statements run for one thread: the descriptor's inl_flags word, the until just asked (in
    ``mine``) and the other op's (in ``theirs``); returns the other op's until after them."""
    regs = {mine: until, theirs: other}
    for ln in lines:
        ln = ln.strip().rstrip(";")
        g = None
        if ln.startswith("@"):
            g, ln = ln.split(None, 1)
        op, args = ln.split(None, 1)
        a = [x.strip() for x in args.split(",")]
        if g is not None and not regs[g[1:]]:
            continue
        if op == "ld.const.u32":
            assert a[1] == f"[{abi.CDESC_GLOBAL}+{abi.CDESC_INL_FLAGS_OFF}]", a
            regs[a[0]] = inl_flags
        elif op == "and.b32":
            regs[a[0]] = regs[a[1]] & int(a[2])
        elif op == "setp.eq.u32":
            regs[a[0]] = regs[a[1]] == int(a[2])
        elif op == "mov.b64":
            regs[a[0]] = regs[a[1]]
        else:
            raise AssertionError(f"unexpected statement {ln!r}")
    return regs[theirs]


def test_an_until_asked_for_one_op_serves_the_other():
    """A thread that loads and stores asked for two untils (each starts at 0): the store at the end of a stream
    kernel asked once more per warp, a whole __hb_inline_until_live call (stop 52's ncu: 2.25 asks per warp).
    Now each ask's answer also becomes the other op's until -- only where the descriptor serves both ops inline
    (inl_flags READ|WRITE), since that flag is all __hb_inline_until answers differently per op."""
    out, meta = rewrite()
    loop = out[out.index("$LOOP:"):out.index("bra \t$LOOP;")]
    asks = call_blocks(loop, "__hb_inline_until_live")
    assert len(asks) == 3 and meta["timing"]["functions"][0]["shared_untils"] == 3
    both = abi.HBF_CDI_READ | abi.HBF_CDI_WRITE
    for (s, e, args), mine, theirs in zip(asks, ("%__hb_iur", "%__hb_iur", "%__hb_iuw"),
                                          ("%__hb_iuw", "%__hb_iuw", "%__hb_iur")):
        lines = share_lines(loop, e)
        assert lines[-1].strip() == f"@%__hb_ipb mov.b64 \t{theirs}, {mine};", lines
        for flags in range(8):
            for until in (123_456, -987_654, -0x7FFFFFFFFFFFFFFF):     # a deadline, an ask-again time, never
                got = run_share(lines, flags, until, 42, mine, theirs)
                assert got == (until if flags & both == both else 42), (flags, until, got)
    off, meta_off = rewrite_share(False)
    assert meta_off["timing"]["share_until"] is False and meta_off["timing"]["functions"][0]["shared_untils"] == 0
    assert f"[{abi.CDESC_GLOBAL}+{abi.CDESC_INL_FLAGS_OFF}]" not in off[off.index(".visible .entry"):]
    # everything else is the code of before: without the share statements the two builds are the same text
    share = "".join("\n".join(share_lines(out, e)) + "\n" for _, e, _ in call_blocks(out, "__hb_inline_until_live"))
    stripped = out
    for ln in set(share.splitlines()):
        stripped = stripped.replace(ln + "\n", "")
    assert stripped == off


def rewrite_share(share: bool) -> tuple[str, dict]:
    meta = {"inline_issues": True, "group_issues": True, "hoist_issues": True, "inline_live": True,
            "share_until": share}
    return print_module(timing_pass(parse_module(GRID_STRIDE), meta)), meta


def test_the_share_knob_reaches_the_pass(monkeypatch):
    monkeypatch.setenv("HBFCC_SHARE_UNTIL", "0")
    res = rewrite_text(GRID_STRIDE, filename="gs.ptx", link=False)
    assert res.meta["timing"]["share_until"] is False
    monkeypatch.delenv("HBFCC_SHARE_UNTIL")
    res = rewrite_text(GRID_STRIDE, filename="gs.ptx", link=False)
    assert res.meta["timing"]["share_until"] is True
