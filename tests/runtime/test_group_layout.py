"""The issue group's range test (hbfcc/passes/timing.py `_group_code`, the prologue's %__hb_cdb / %__hb_gz)
evaluated on the runtime's own device-state layout (runtime_cuda/devstate.py: fill_ranges puts the band
HBF_DEV_GUARD_BYTES below the first range; cdesc_for writes the descriptor). The first group build assumed
lo == base and so never took its fast path on the GPU; this runs the emitted PTX's integer code in a small
interpreter against the real layout, so such a mismatch fails on the CPU."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "hbfcc"))
from test_rewrite_inline import group_meta, loads  # noqa: E402

from hbfcommon import abi  # noqa: E402
from hbfcommon import ctl as C  # noqa: E402
from hbfcc.passes.timing import timing_pass  # noqa: E402
from hbfcc.ptx import parse_module  # noqa: E402
from hbfcc.ptx.printer import print_module  # noqa: E402
from runtime_cuda import devstate as D  # noqa: E402

M64 = (1 << 64) - 1
INS = re.compile(r"^\s*(\w+)((?:\.\w+)*)\s+(.*);$")


def run(lines: list[str], regs: dict, cdesc: bytes) -> dict:
    """Straight-line u64 integer and predicate PTX (mov, add, sub, or, and, setp with and/or) on ``regs``;
    ld.const reads the descriptor bytes."""
    def val(o: str):
        neg = o.startswith("!")
        o = o.lstrip("!")
        v = regs[o] if o.startswith("%") else int(o, 0)
        return (not v) if neg else v
    for line in lines:
        m = INS.match(line)
        assert m, line
        op, mods, args = m.group(1), m.group(2).split(".")[1:], [a.strip() for a in m.group(3).split(",")]
        if op == "ld":
            off = int(re.search(r"\+(\d+)\]", args[1]).group(1))
            n = 1 if "u8" in mods else 8
            regs[args[0]] = int.from_bytes(cdesc[off:off + n], "little")
        elif op == "mov":
            regs[args[0]] = val(args[1])
        elif op in ("add", "sub", "or", "and", "max") and "pred" not in mods:
            a, b = val(args[1]), val(args[2])
            regs[args[0]] = {"add": a + b, "sub": a - b, "or": a | b, "and": a & b, "max": max(a, b)}[op] & M64
        elif op == "selp":
            regs[args[0]] = val(args[1]) if val(args[3]) else val(args[2])
        elif op in ("or", "and"):
            a, b = val(args[1]), val(args[2])
            regs[args[0]] = (a or b) if op == "or" else (a and b)
        elif op == "not":
            regs[args[0]] = not val(args[1])
        elif op == "setp":
            cmp = mods[0]
            a, b = val(args[1]), val(args[2])
            if "s64" in mods:                      # signed compares (the ticket bit test)
                a, b = (a - (1 << 64) if a >> 63 else a), (b - (1 << 64) if b >> 63 else b)
            r = {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "ge": a >= b, "gt": a > b}[cmp]
            if len(args) == 4:
                c = val(args[3])
                r = (r and c) if "and" in mods else (r or c)
            regs[args[0]] = r
        else:
            raise AssertionError(f"not interpreted: {line}")
    return regs


FLOW_SKIP = (".reg", ".param", "{", "}", "//", ".loc", ".pragma")


def run_flow(lines: list[str], regs: dict, calls: dict, preds: dict | None = None, max_steps: int = 100000) -> list:
    """The emitted code of a function with its control flow: labels, guarded branches, helper calls through
    parameter blocks (``calls[name](*args)`` -> the return value or None), and :func:`run`'s integer and
    predicate instructions for hbfcc's own registers. An original instruction (no ``%__hb_`` register) is
    not executed, except ``mbarrier.try_wait``/``test_wait``, whose result is the next value of
    ``preds[instruction text]``; ``ld.global`` of ``[__hb_state]``/``[%__hb_s]``/``[%__hb_s+8]`` read
    ``regs["@state"]``, ``regs["@lo"]``, ``regs["@span"]``, ``ld.const`` of the attach switch ``[__hb_detached]``
    ``regs["@detached"]`` (default 0: ask __hb_state). Returns the calls made: [(name, args)]."""
    prog, labels = [], {}
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith(FLOW_SKIP):
            continue
        if line.endswith(":"):
            labels[line[:-1]] = len(prog)
            continue
        prog.append(" ".join(line.split()))
    params: dict = {}
    made = []
    pc = steps = 0
    while pc < len(prog):
        steps += 1
        assert steps < max_steps, "no progress"
        line = prog[pc]
        pc += 1
        if line.startswith("@"):
            g, line = line.split(None, 1)
            neg = g.startswith("@!")
            if bool(regs.get(g.lstrip("@!"), False)) == neg:
                continue
        op = line.split(None, 1)[0]
        rest = line.split(None, 1)[1].rstrip(";") if " " in line else ""
        if op.startswith("bra"):
            pc = labels[rest.strip()]
        elif op in ("ret", "exit"):
            break
        elif op.startswith("st.param") and rest.startswith("[__hb_"):
            name, v = [x.strip() for x in rest.split(",", 1)]
            params[name.strip("[]")] = regs[v] if v.startswith("%") else int(v, 0)
        elif (op == "call" or op.startswith("call.")) and "__hb_" in rest:
            parts = [x.strip() for x in re.split(r",(?![^(]*\))", rest)]
            ret = None
            if parts[0].startswith("("):
                ret = parts.pop(0).strip("()")
            name = parts[0]
            args = [params[a.strip()] for a in ",".join(parts[1:]).strip().strip("()").split(",") if a.strip()]
            made.append((name, args))
            r = calls[name](*args)
            if ret:
                params[ret] = r
        elif op.startswith("ld.param") and rest.startswith("%__hb_"):
            d, src = [x.strip() for x in rest.split(",", 1)]
            regs[d] = params[src.strip("[]")]
        elif op.startswith("ld.const") and rest.endswith("[__hb_detached]"):   # the attach switch
            regs[rest.split(",")[0].strip()] = regs.get("@detached", 0)
        elif op.startswith("ld.global") and "__hb_" in rest:
            d, src = [x.strip() for x in rest.split(",", 1)]
            regs[d] = {"[__hb_state]": regs.get("@state", 0), "[%__hb_s]": regs.get("@lo", 0),
                       "[%__hb_s+8]": regs.get("@span", 0)}[src]
        elif op.startswith("mov") and re.fullmatch(r"%__hb_\w+, [A-Za-z_$][\w$]*", rest.strip()):
            d, sym = [x.strip() for x in rest.split(",")]
            regs[d] = regs.get("@sym:" + sym, 0x100)      # a symbol's address (the table: 0x100)
        elif op.startswith("mbarrier.try_wait") or op.startswith("mbarrier.test_wait"):
            if "%__hb_" in line:
                continue                        # hbfcc's own parity capture
            regs[rest.split(",")[0].strip()] = preds[line].pop(0)
        elif "%__hb_" in line:
            run([line], regs, b"")
    return made


def layout(base: int, length: int):
    m = C.hbf_media_params()
    m.timing_source, m.read_granularity, m.fixed_read_ns, m.fixed_write_ns = C.HBF_SRC_FIXED, 64, 0, 0
    st = D.new_state(0, m, D.RunParams())
    D.fill_ranges(st, [D.DevRange(base, length, 0, 1, C.HBF_MODE_TIMING, C.HBF_PERM_ALL)], 1)
    return st, bytes(D.cdesc_for(st, 0x7F0000000000, 0))


def emitted() -> tuple[list[str], list[str]]:
    """The prologue's range lines and the first group's band / range lines of site 0."""
    out = print_module(timing_pass(parse_module(loads(2, guard=False)), group_meta())).splitlines()
    i = next(k for k, x in enumerate(out) if f"[__hb_cdesc+{abi.CDESC_R0_BASE_OFF}]" in x and "%__hb_ix" in x)
    j = next(k for k in range(len(out) - 1, i, -1) if "sub.u64 \t%__hb_gz" in out[k])
    pro = out[i:j + 1]
    s = next(k for k, x in enumerate(out) if x.strip().startswith("sub.u64 \t%__hb_b") and k > j)
    site = out[s:s + 4]          # the band, the lane's predicate, the any-lane OR, the range test
    assert "%__hb_gp0" in site[1] and "%__hb_gin" in site[3], site
    return pro, site


@pytest.mark.parametrize("base, length", [(1 << 40, 1 << 30), (1 << 20, 1 << 12), (D.HBF_DEV_GUARD_BYTES // 2, 4096)])
def test_the_group_fast_path_holds_on_the_runtimes_layout(base, length):
    st, cd = layout(base, length)
    assert st.lo != base or base <= D.HBF_DEV_GUARD_BYTES       # the band starts below the range (or at 0)
    pro, site = emitted()
    regs = run(pro, {"%__hb_lo": int(st.lo), "%__hb_span": int(st.span)}, cd)
    assert regs["%__hb_cdb"] is True
    addr_reg = re.search(r"sub\.u64 \t%__hb_b, (%[\w]+),", site[0]).group(1)

    def lane(addr: int):
        r = run(site, dict(regs, **{addr_reg: addr}), cd)
        return r["%__hb_gp0"], r["%__hb_gin"]
    assert lane(base) == (True, True) and lane(base + length - 16) == (True, True)   # in the range: inline
    assert lane(base + length) == (False, True)                                        # beyond the band: no access
    if base > int(st.lo):
        assert lane(base - 16) == (True, False)        # the guard zone: in the band, not the range -> fallback


def test_a_range_whose_end_is_not_aligned_to_the_widest_group_access_takes_the_fallback():
    """The group's loads are 16 bytes: a range of 1 MiB + 16 ends where no such access can cross it (each starts
    in the range and ends in it: no end check needed, R_CDB holds); 1 MiB + 8 may be crossed: the fallback
    (each site alone, with its own end check). Before wt/merge13b the end had to be 32-byte aligned, which a
    masked tail's tensor (n fp16, n odd) never is: its groups never ran their fast path."""
    pro, _ = emitted()
    for length, ok in (((1 << 20) + 16, True), ((1 << 20) + 8, False), ((1 << 20) + 2, False)):
        st, cd = layout(1 << 40, length)
        assert run(pro, {"%__hb_lo": int(st.lo), "%__hb_span": int(st.span)}, cd)["%__hb_cdb"] is ok, length
