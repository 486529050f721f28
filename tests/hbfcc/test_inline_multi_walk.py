"""The multi-range re-check (helper ABI 6) as a loop over the descriptor's table (wt/regs, stop 45): run the emitted
PTX of a site's and a group's re-check, lane by lane, on a host interpreter of the few instructions it uses, against
the rule it implements (docs/design.md §3.3 "Several ranges inline"): the lane votes yes when its until is in force,
its lanes ascend, and every access it makes starts in one of the inl_nranges entries (rel < len); inl_nranges == 0
goes to the helper at once. The registers this form wins back are pinned by tests/hbfcc/test_rewrite_inline.py
(no fixed table offset in the kernel) and measured by bench/helper_registers.py."""
from __future__ import annotations

import random
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_rewrite_inline import STREAM, group_meta, loads, rewrite  # noqa: E402

from hbfcommon import abi  # noqa: E402
from hbfcc.passes.timing import timing_pass  # noqa: E402
from hbfcc.ptx import parse_module  # noqa: E402
from hbfcc.ptx.printer import print_module  # noqa: E402

M64 = (1 << 64) - 1
_LINE = re.compile(r"^(?:@(!?)(%[\w$]+) )?([\w.]+) \t?(.*);$")


def _block(out: str, start_label: str) -> list[str]:
    """The statements from ``start_label`` to its warp vote (included)."""
    i = out.index(f"\n{start_label}:\n") + 1
    j = out.index("vote.sync.all.pred", i)
    return [ln.strip() for ln in out[i:out.index("\n", j)].split("\n") if ln.strip()]


def _s64(v: int) -> int:
    return v - (1 << 64) if v >> 63 else v


def operand(r: dict, o: str):
    """An operand's value in a lane's registers ``r``: a register, a negated predicate, an integer."""
    if o.startswith("!"):
        return not r[o[1:]]
    if o.startswith("%"):
        return r[o]
    return int(o, 0)


def cload(r: dict, addr_op: str, size: int, cmem: bytes) -> int:
    """ld.const of ``size`` bytes at [__hb_cdesc+off] or [%reg+off] (an offset into ``cmem``)."""
    m = re.fullmatch(r"\[(__hb_cdesc|%[\w]+)(?:\+(\d+))?\]", addr_op)
    base = 0 if m.group(1) == "__hb_cdesc" else r[m.group(1)]
    a = base + int(m.group(2) or 0)
    assert 0 <= a and a + size <= len(cmem), a
    return int.from_bytes(cmem[a:a + size], "little")


def setp(r: dict, parts: list[str], ops: list[str]) -> bool:
    """setp.cmp[.{and,or}].type d, a, b[, c]: the predicate it writes."""
    cmp, ty = parts[1], parts[-1]
    a, b = operand(r, ops[1]), operand(r, ops[2])
    if ty == "s64":
        a, b = _s64(a), _s64(b)
    elif ty == "s32":
        a, b = (a - (1 << 32) if a >> 31 else a), (b - (1 << 32) if b >> 31 else b)
    t = {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "ge": a >= b, "gt": a > b}[cmp]
    if len(parts) == 4:          # setp.cmp.{and,or}.type d, a, b, c
        c = operand(r, ops[3])
        t = (t and c) if parts[2] == "and" else (t or c)
    return t


def decode(ln: str):
    """A line of a block: None for a label, else (negated guard, guard register or None, opcode parts, operands)."""
    if ln.endswith(":"):
        return None
    m = _LINE.match(ln)
    assert m, ln
    neg, g, op, rest = m.groups()
    return neg, g, op.split("."), [x.strip() for x in rest.split(",")] if rest else []


def run_block(lines: list[str], regs: dict, cmem: bytes, slow: str) -> object:
    """One lane through the block: the value it votes with (R_IPA), or "slow" where it branches to ``slow``."""
    labels = {ln[:-1]: i for i, ln in enumerate(lines) if ln.endswith(":")}
    r = dict(regs)

    def val(o: str):
        return operand(r, o)

    def ld(addr_op: str, size: int) -> int:
        return cload(r, addr_op, size, cmem)

    pc, steps = 0, 0
    while True:
        steps += 1
        assert steps < 10_000
        ln = lines[pc]
        pc += 1
        dec = decode(ln)
        if dec is None:
            continue
        neg, g, parts, ops = dec
        if g is not None and (not r[g]) != bool(neg):
            continue
        name = parts[0]
        if name == "vote":
            return r[ops[1]]
        if name == "bra":
            if ops[0] == slow:
                return "slow"
            pc = labels[ops[0]]
            continue
        if name == "ld":
            r[ops[0]] = ld(ops[1], 4 if parts[-1] == "u32" else 8)
        elif name == "mov":
            r[ops[0]] = 0 if ops[1] == "__hb_cdesc" else val(ops[1])
        elif name in ("add", "sub", "min"):
            a, b = val(ops[1]), val(ops[2])
            w = M64 if parts[-1].endswith("64") else 0xFFFFFFFF
            r[ops[0]] = (a + b if name == "add" else a - b if name == "sub" else min(a, b)) & w
        elif name in ("or", "and") and parts[1] == "b32":
            a, b = val(ops[1]), val(ops[2])
            r[ops[0]] = a | b if name == "or" else a & b
        elif name in ("or", "and") and parts[1] == "pred":
            a, b = val(ops[1]), val(ops[2])
            r[ops[0]] = (a or b) if name == "or" else (a and b)
        elif name == "not":
            r[ops[0]] = not val(ops[1])
        elif name == "setp":
            r[ops[0]] = setp(r, parts, ops)
        else:
            raise AssertionError(f"instruction not modeled: {ln}")


def cdesc(bases: list[int], lens: list[int], nranges: int, read_delay: int = 0) -> bytes:
    b = bytearray(abi.CDESC_BYTES)
    b[abi.CDESC_INL_READ_DELAY_OFF:abi.CDESC_INL_READ_DELAY_OFF + 8] = read_delay.to_bytes(8, "little")
    b[abi.CDESC_INL_NRANGES_OFF:abi.CDESC_INL_NRANGES_OFF + 4] = nranges.to_bytes(4, "little")
    for k in range(abi.INL_MAX_RANGES):
        o = abi.CDESC_INL_BASE_OFF + 8 * k
        b[o:o + 8] = (bases[k] if k < len(bases) else 0).to_bytes(8, "little")
        o = abi.CDESC_INL_LEN_OFF + 8 * k
        b[o:o + 8] = (lens[k] if k < len(lens) else 0).to_bytes(8, "little")
    return bytes(b)


def _table(rng: random.Random, n: int):
    """n disjoint 32-byte aligned ranges (the runtime's table), the unused entries empty."""
    bases, lens, at = [], [], 1 << 40
    for _ in range(n):
        at += rng.randrange(0, 1 << 20) * 32
        ln = rng.randrange(1, 1 << 12) * 32
        bases.append(at)
        lens.append(ln)
        at += ln
    return bases, lens


def _addr(rng: random.Random, bases, lens) -> int:
    k = rng.randrange(len(bases))
    pick = rng.random()
    if pick < 0.5:
        return bases[k] + rng.randrange(0, lens[k] // 16) * 16                 # inside
    if pick < 0.7:
        return bases[k] + lens[k]                                              # just past the end
    if pick < 0.8:
        return (bases[k] - 16) & M64                                           # just below
    return rng.randrange(0, 1 << 48) & ~15


def _in_table(a: int, bases, lens, n) -> bool:
    return any(((a - bases[k]) & M64) < lens[k] for k in range(min(n, abi.INL_MAX_RANGES)))


def _site_block(out: str, n: int):
    """The n-th site's re-check: its label, its address register, its until register, the helper's label."""
    i = -1
    for _ in range(n + 1):
        i = out.index(f"ld.const.u32 \t%__hb_ih, [__hb_cdesc+{abi.CDESC_INL_NRANGES_OFF}];", i + 1)
    start = out.rindex("\n$__hb_L", 0, i) + 1
    label = out[start:out.index(":", start)]
    lines = _block(out, label)
    slow = re.search(r"@%__hb_ipa bra \t(\$__hb_L\d+);", "\n".join(lines)).group(1)
    addr = re.search(r"sub\.u64 \t%__hb_ix, (%[\w]+), %__hb_iy;", "\n".join(lines)).group(1)
    until = re.search(r"setp\.lt\.and\.s64 \t%__hb_ipa, %__hb_it, (%[\w]+), %__hb_ipb;", "\n".join(lines)).group(1)
    return lines, slow, addr, until


def test_a_site_votes_yes_exactly_when_its_access_is_in_some_entry():
    out = rewrite(STREAM)
    rng = random.Random(45)
    for n in (0, 1):                               # the load site, the store site
        lines, slow, addr, until = _site_block(out, n)
        for trial in range(400):
            nr = rng.choice((2, 3, 4, 4, 5))       # 5: more than the table holds (read as 4)
            bases, lens = _table(rng, min(nr, abi.INL_MAX_RANGES))
            mem = cdesc(bases, lens, nr)
            a = _addr(rng, bases, lens)
            it = rng.randrange(1, 1 << 40)
            u = it + rng.choice((-5, 1, 1000))
            order = rng.random() < 0.9
            got = run_block(lines, {addr: a, "%__hb_it": it, until: u, "%__hb_ipb": order}, mem, slow)
            want = _s64(it) < _s64(u) and order and _in_table(a, bases, lens, nr)
            assert got == want, (trial, hex(a), bases, lens, nr, it, u, order)
        # no table: the helper at once
        assert run_block(lines, {addr: 1 << 40, "%__hb_it": 1, until: 2, "%__hb_ipb": True},
                         cdesc([1 << 40], [4096], 0), slow) == "slow"


def test_only_the_first_inl_nranges_entries_count():
    """An entry past inl_nranges is not looked at (the runtime leaves it empty; the walk stops before it)."""
    out = rewrite(STREAM)
    lines, slow, addr, until = _site_block(out, 0)
    bases, lens = [1 << 40, 2 << 40, 3 << 40], [4096, 4096, 4096]
    regs = {addr: (3 << 40) + 64, "%__hb_it": 1, until: 2, "%__hb_ipb": True}
    assert run_block(lines, regs, cdesc(bases, lens, 3), slow) is True
    assert run_block(lines, regs, cdesc(bases, lens, 2), slow) is False


def test_a_group_votes_yes_exactly_when_every_access_of_the_lane_is_in_some_entry():
    rng = random.Random(17)
    for nsites in (1, 2, 4):
        meta = group_meta()
        out = print_module(timing_pass(parse_module(loads(nsites)), meta))
        i = out.index("and.pred \t%__hb_ipa, %__hb_gok, %__hb_gin;")
        m = re.search(r"@!%__hb_ipa bra \t(\$__hb_L\d+);", out[i:])
        lines = _block(out, m.group(1))
        text = "\n".join(lines)
        slow = re.search(r"@%__hb_ipa bra \t(\$__hb_L\d+);", text).group(1)
        addrs = re.findall(r"sub\.u64 \t%__hb_ix, (%[\w]+), %__hb_iy;", text)[1:]   # the first: the clock
        assert len(addrs) == nsites
        for trial in range(300):
            nr = rng.choice((2, 3, 4))
            bases, lens = _table(rng, nr)
            delay = rng.randrange(0, 5000)
            mem = cdesc(bases, lens, nr, delay)
            P = [rng.random() < 0.8 for _ in range(nsites)]
            A = [_addr(rng, bases, lens) for _ in range(nsites)]
            clock = rng.randrange(1, 1 << 40)
            u = clock + rng.choice((-5, 1, 1000))
            gok = rng.random() < 0.9
            regs = {"%__hb_it": clock + delay, "%__hb_iur": u, "%__hb_gany": any(P), "%__hb_gok": gok}
            regs.update({f"%__hb_gp{j}": P[j] for j in range(nsites)})
            regs.update({addrs[j]: A[j] for j in range(nsites)})
            got = run_block(lines, regs, mem, slow)
            want = ((_s64(clock) < _s64(u)) or not any(P)) and gok and \
                all(_in_table(A[j], bases, lens, nr) for j in range(nsites) if P[j])
            assert got == want, (nsites, trial, P, [hex(a) for a in A], bases, lens, nr)
        assert run_block(lines, {**regs, "%__hb_gp0": True}, cdesc(bases, lens, 0), slow) == "slow"
