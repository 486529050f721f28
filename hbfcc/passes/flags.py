"""The flags pass (issue 7): flag loads -> the Eidola extern API; non-flag global reads counted.

Selected with ``HBFCC_PASSES=timing,flags`` (``timing,flags,mwait`` also parks spin-wait loops; see
hbfcc/knobs.py, docs/hbfcc.md §Flags pass). It runs *before* the timing pass, so the flag loads it
rewrites are never timed as HBF accesses and the spin loops it recognizes are the compiler's own.

A load is *flag-like* when it is a scalar 32/64-bit ``ld`` of global (or generic) memory with
``.volatile``, ``.acquire`` or ``.relaxed`` semantics — the loads a spin-wait on a peer's flag
compiles to (a plain weak ``ld.global`` may be hoisted out of a loop by the compiler and is never a
correct flag poll). Each one becomes::

    { .reg .b64 %__hb_fa; add.s64 %__hb_fa, base, off;
      .param .b64 __hb_p0; .param .bN __hb_rv; st.param.b64 [__hb_p0], %__hb_fa;
      call (__hb_rv), __hb_eidola_ld_flag_uN, (__hb_p0); ld.param.bN dst, [__hb_rv]; }

``__hb_eidola_ld_flag_uN`` (eidola/src/hbf_eidola.cuh, extern API) classifies the address at
run time against the registered flag ranges: in a range -> a counted flag read of that class, served
by engine (b) (the Write Tracking Table's value at this instant) or by memory (engine a / real
peers); outside -> a counted non-flag read from memory. That form (counting with atomics in the
callee) is what the standalone :func:`rewrite_text` emits; in the pipeline (``count_nonflag``) a
32-bit flag load instead calls ``__hb_eidola_ld_flag32_acct`` (eidola/src/hbf_eidola_helpers.cu:
the hand build's ``hbf_eidola_ld_flag``), which returns ``value | class << 32 | virtual << 40 |
lead << 41 | ran << 42``; the caller keeps the thread's flag class, reads, warp-instructions and
virtual loads in registers (a second class in one thread is counted at once with
``__hb_eidola_count_flag_other``) and flushes them at exit with ``__hb_eidola_flush_flag`` — no
atomics per poll (measured on the H200: a lane's poll 0.84 us instead of 1.6 us; the hand build's
register-cached poll is 0.33 us). Every ``.entry`` gets
``__hb_eidola_kernel_enter()`` first, so wakeups are relative to the kernel's own start.

Non-flag global reads (``count_nonflag``, on in the pipeline): every other ``ld``/``ldu`` of the
``.global`` space (``.nc`` and vectors included; one per warp-instruction and one per executing
lane, as the hand-instrumented workload counts them) increments two per-thread registers — lanes
executing it, and 1 in the lowest executing lane (``activemask``/``vote.ballot`` + ``%lanemask_eq``)
— and every ``ret``/``exit`` flushes them with ``__hb_eidola_flush_nonflag(thread, warp)`` (one
warp-reduced atomic pair per warp; eidola/src/hbf_eidola_helpers.cu). Generic-space loads are
not counted (their space is known only at run time), nor are atomics.

With ``mwait`` a recognized spin-wait is parked with monitor/mwait: a flag-like 32-bit load of
``rX`` followed in its basic block by ``setp.ne p, rX, K`` (or ``setp.eq`` + ``@!p``) and a
*backward* ``@p bra`` (the loop goes round while the flag differs from K; other labels and a
timeout check inside the loop are fine) waits until the flag equals K; before the load the pass
inserts ``hit = __hb_eidola_monitor(addr, 4, K); @!hit __hb_eidola_mwait(addr)``. The load and the
compare stay (Mesa-safe: the loop still checks), so each parked wait makes two flag reads (the
monitor's and the load's) where a hand-written ``monitor; mwait`` makes one.

The functions come from runtime_cuda/ptx/hbf_eidola_helpers.ptx (``make helpers-ptx``), linked by
the pipeline's ``link_eidola`` stage (:func:`hbfcc.link.link`); :func:`admit_eidola_calls` (the
pipeline stage ``flags_admission`` after the timing pass) counts them as admitted callees.

Stage: ``flags_pass(module, meta) -> module`` (DESIGN.md §6); report under ``meta["flags"]``.
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path
from typing import Optional

from hbfcommon import abi, resources
from hbfcommon.errors import RewriteError, ToolchainError

from hbfcc import link
from hbfcc.admission import admit, not_seen_by_rewrite
from hbfcc.ptx.model import (Address, ArgList, Block, Declarator, Function, Guard, Immediate, Instruction,
                             Label, LabelRef, Module, Negated, PredPair, Register, Statement, Symbol,
                             VarDecl)

PASS_NAME = "flags"
EXTERN_DEFINE = "HBF_EIDOLA_EXTERN_API"

_SEMANTICS = {"volatile", "acquire", "relaxed"}
_SIZES = {"u32": 32, "b32": 32, "s32": 32, "u64": 64, "b64": 64, "s64": 64}
_OTHER_SPACES = {"shared", "local", "const", "param", "tex"}
R_NFT, R_NFW = "%__hb_nft", "%__hb_nfw"           # per-thread non-flag counters (function scope)
R_FK, R_FT, R_FW, R_FV = "%__hb_fk", "%__hb_ft", "%__hb_fw", "%__hb_fv"   # flag class, reads, warp-insts, virtual
COUNTER_REGS = (R_NFT, R_NFW, R_FK, R_FT, R_FW, R_FV)


def flag_load_width(inst: Instruction) -> Optional[int]:
    """32 or 64 when ``inst`` is a flag-like load (see module doc), else None."""
    if inst.opcode != "ld":
        return None
    mods = set(inst.modifiers)
    if not (mods & _SEMANTICS) or (mods & _OTHER_SPACES) or any(m.startswith("v") and m[1:].isdigit() for m in mods):
        return None
    if any(m.startswith("shared::") for m in mods):
        return None
    widths = [_SIZES[m] for m in inst.modifiers if m in _SIZES]
    if len(widths) != 1 or len(inst.operands) != 2:
        return None
    dst, addr = inst.operands
    if not isinstance(dst, Register) or not isinstance(addr, Address) or addr.coords is not None:
        return None
    return widths[0]


def is_nonflag_global_read(inst: Instruction) -> bool:
    """A global-space ``ld``/``ldu`` that is not flag-like (counted as one non-flag read)."""
    if inst.opcode not in ("ld", "ldu") or flag_load_width(inst) is not None:
        return False
    return "global" in inst.modifiers


def _reg(name: str) -> Register:
    return Register(name)


def _rewrite(inst: Instruction, width: int) -> Block:
    dst, addr = inst.operands
    g = inst.guard
    body: list[Statement] = [VarDecl((), "reg", (), ".b64", (Declarator("%__hb_fa"),))]
    body += _addr_code(addr, "%__hb_fa")
    body.append(VarDecl((), "param", (), ".b64", (Declarator("__hb_p0"),)))
    body.append(VarDecl((), "param", (), f".b{width}", (Declarator("__hb_rv"),)))
    body.append(Instruction(None, "st", ("param", "b64"), (Address(Symbol("__hb_p0")), _reg("%__hb_fa"))))
    fn = f"__hb_eidola_ld_flag_u{width}"
    body.append(Instruction(g, "call", (), (ArgList((Symbol("__hb_rv"),)), Symbol(fn),
                                            ArgList((Symbol("__hb_p0"),)))))
    if g is None:
        body.append(Instruction(None, "ld", ("param", f"b{width}"), (dst, Address(Symbol("__hb_rv")))))
    else:   # ld.param cannot be predicated: load unguarded, move under the guard
        body.append(VarDecl((), "reg", (), f".b{width}", (Declarator("%__hb_fv"),)))
        body.append(Instruction(None, "ld", ("param", f"b{width}"), (_reg("%__hb_fv"), Address(Symbol("__hb_rv")))))
        body.append(Instruction(g, "mov", (f"b{width}",), (dst, _reg("%__hb_fv"))))
    return Block(tuple(body))


def _rewrite_acct(inst: Instruction) -> Block:
    """A 32-bit flag load through __hb_eidola_ld_flag32_acct, its accounting kept in registers:
    the call returns value | klass << 32 | virtual << 40 | lead << 41 | ran << 42."""
    dst, addr = inst.operands
    g = inst.guard
    R = _reg
    I = Immediate  # noqa: E741
    P = lambda n: Guard(R(n))  # noqa: E731
    body: list[Statement] = [
        VarDecl((), "reg", (), ".b64", (Declarator("%__hb_fa"), Declarator("%__hb_fr"))),
        VarDecl((), "reg", (), ".b32", tuple(Declarator(n) for n in ("%__hb_fi", "%__hb_fc", "%__hb_fx", "%__hb_fl",
                                                                     "%__hb_fo"))),
        VarDecl((), "reg", (), ".pred", tuple(Declarator(n) for n in ("%__hb_pa", "%__hb_pz", "%__hb_pf",
                                                                      "%__hb_ps", "%__hb_po")))]
    body += _addr_code(addr, "%__hb_fa")
    body += [VarDecl((), "param", (), ".b64", (Declarator("__hb_p0"), Declarator("__hb_rv"))),
             Instruction(None, "st", ("param", "b64"), (Address(Symbol("__hb_p0")), R("%__hb_fa"))),
             Instruction(g, "call", (), (ArgList((Symbol("__hb_rv"),)), Symbol("__hb_eidola_ld_flag32_acct"),
                                         ArgList((Symbol("__hb_p0"),)))),
             Instruction(None, "ld", ("param", "b64"), (R("%__hb_fr"), Address(Symbol("__hb_rv"))))]
    if g is not None:   # lanes whose guard is false did not call: nothing to count (ran bit 0)
        body.append(Instruction(Guard(g.reg, not g.negated), "mov", ("b64",), (R("%__hb_fr"), I("0"))))
    body += [Instruction(g, "cvt", ("u32", "u64"), (dst, R("%__hb_fr"))),
             Instruction(None, "shr", ("u64",), (R("%__hb_fr"), R("%__hb_fr"), I("32"))),
             Instruction(None, "cvt", ("u32", "u64"), (R("%__hb_fi"), R("%__hb_fr"))),
             Instruction(None, "and", ("b32",), (R("%__hb_fc"), R("%__hb_fi"), I("255"))),
             Instruction(None, "bfe", ("u32",), (R("%__hb_fx"), R("%__hb_fi"), I("8"), I("1"))),
             Instruction(None, "bfe", ("u32",), (R("%__hb_fl"), R("%__hb_fi"), I("9"), I("1"))),
             Instruction(None, "bfe", ("u32",), (R("%__hb_fo"), R("%__hb_fi"), I("10"), I("1"))),
             Instruction(None, "setp", ("ne", "u32"), (R("%__hb_pa"), R("%__hb_fo"), I("0"))),
             # not in a flag range: a non-flag read
             Instruction(None, "setp", ("eq", "and", "u32"), (R("%__hb_pz"), R("%__hb_fc"), I("0"), R("%__hb_pa"))),
             Instruction(P("%__hb_pz"), "add", ("u32",), (R(R_NFT), R(R_NFT), I("1"))),
             Instruction(P("%__hb_pz"), "add", ("u32",), (R(R_NFW), R(R_NFW), R("%__hb_fl"))),
             # a flag read: the thread's class is the first one it reads
             Instruction(None, "setp", ("ne", "and", "u32"), (R("%__hb_pf"), R("%__hb_fc"), I("0"), R("%__hb_pa"))),
             Instruction(None, "setp", ("eq", "and", "u32"), (R("%__hb_ps"), R(R_FK), I("0"), R("%__hb_pf"))),
             Instruction(P("%__hb_ps"), "mov", ("b32",), (R(R_FK), R("%__hb_fc"))),
             Instruction(None, "setp", ("eq", "and", "u32"), (R("%__hb_ps"), R(R_FK), R("%__hb_fc"), R("%__hb_pf"))),
             Instruction(P("%__hb_ps"), "add", ("u32",), (R(R_FT), R(R_FT), I("1"))),
             Instruction(P("%__hb_ps"), "add", ("u32",), (R(R_FW), R(R_FW), R("%__hb_fl"))),
             Instruction(P("%__hb_ps"), "add", ("u32",), (R(R_FV), R(R_FV), R("%__hb_fx"))),
             # another class in the same thread: counted at once
             Instruction(None, "setp", ("ne", "and", "u32"), (R("%__hb_po"), R(R_FK), R("%__hb_fc"), R("%__hb_pf"))),
             VarDecl((), "param", (), ".b32", (Declarator("__hb_o0"), Declarator("__hb_o1"), Declarator("__hb_o2"))),
             Instruction(None, "st", ("param", "b32"), (Address(Symbol("__hb_o0")), R("%__hb_fc"))),
             Instruction(None, "st", ("param", "b32"), (Address(Symbol("__hb_o1")), R("%__hb_fl"))),
             Instruction(None, "st", ("param", "b32"), (Address(Symbol("__hb_o2")), R("%__hb_fx"))),
             Instruction(P("%__hb_po"), "call", (), (Symbol("__hb_eidola_count_flag_other"),
                                                     ArgList((Symbol("__hb_o0"), Symbol("__hb_o1"), Symbol("__hb_o2")))))]
    return Block(tuple(body))


def _addr_code(addr: Address, reg: str) -> list[Statement]:
    out: list[Statement] = []
    base = addr.base
    if base is None:
        out.append(Instruction(None, "mov", ("b64",), (_reg(reg), Immediate(str(addr.offset)))))
        return out
    out.append(Instruction(None, "mov", ("u64" if isinstance(base, Symbol) else "b64",), (_reg(reg), base)))
    if addr.offset:
        out.append(Instruction(None, "add", ("s64",), (_reg(reg), _reg(reg), Immediate(str(addr.offset)))))
    return out


def _dst_names(inst: Instruction) -> set[str]:
    if not inst.operands or inst.opcode in ("st", "bra", "call", "red", "ret", "exit", "trap"):
        return set()
    d = inst.operands[0]
    if isinstance(d, Register):
        return {d.name}
    if isinstance(d, PredPair):
        return {x.name for x in (d.first, d.second) if isinstance(x, Register)}
    return set()


_BARRIERS = ("bra", "brx", "call", "ret", "exit", "trap", "bar", "barrier")


def _spin_loops(body: tuple[Statement, ...]) -> dict[int, tuple]:
    """Index of the flag load of each recognized spin-wait -> (address, K operand).

    The load ``rX`` (flag-like, 32-bit, unguarded) must be followed in its basic block by a
    ``setp`` comparing rX with K (``ne`` -> loop on p, ``eq`` -> loop on !p) and then by the
    conditional branch on that predicate to a label *before* the load; nothing in between may
    redefine rX, K or p, and no label, call or other branch may intervene."""
    found: dict[int, tuple] = {}
    labels = {st.name: i for i, st in enumerate(body) if isinstance(st, Label)}
    for m, ld in enumerate(body):
        if not (isinstance(ld, Instruction) and ld.guard is None and flag_load_width(ld) == 32):
            continue
        rx = ld.operands[0].name
        setp = None
        for j in range(m + 1, len(body)):
            x = body[j]
            if isinstance(x, Label) or isinstance(x, Block):
                break
            if not isinstance(x, Instruction):
                continue
            if setp is None:
                if x.opcode == "setp" and len(x.operands) >= 3 and x.guard is None and len(x.modifiers) >= 2 \
                        and x.modifiers[0] in ("ne", "eq") and x.modifiers[-1] in ("u32", "s32", "b32"):
                    a, b = x.operands[1], x.operands[2]
                    k = None
                    if isinstance(a, Register) and a.name == rx and not (isinstance(b, Register) and b.name == rx):
                        k = b
                    elif isinstance(b, Register) and b.name == rx and not (isinstance(a, Register) and a.name == rx):
                        k = a
                    d = x.operands[0]
                    p = d.first if isinstance(d, PredPair) else d
                    if k is not None and isinstance(p, Register) and len(x.operands) == 3:
                        setp = (p.name, x.modifiers[0] == "ne", k)
                        continue
                if x.opcode in _BARRIERS or rx in _dst_names(x):
                    break
                continue
            pname, loop_if_true, k = setp
            if x.opcode == "bra":
                g = x.guard
                tgt = x.operands[0] if x.operands else None
                if (g is not None and g.reg.name == pname and g.negated != loop_if_true
                        and isinstance(tgt, LabelRef) and labels.get(tgt.name, len(body)) < m):
                    found[m] = (ld.operands[1], k)
                break
            if x.opcode in _BARRIERS:
                break
            names = _dst_names(x)
            if pname in names or (isinstance(k, Register) and k.name in names):
                break
    return found


def _park(addr: Address, k) -> Block:
    body: list[Statement] = [VarDecl((), "reg", (), ".b64", (Declarator("%__hb_ma"), Declarator("%__hb_mk"))),
                             VarDecl((), "reg", (), ".b32", (Declarator("%__hb_hit"),)),
                             VarDecl((), "reg", (), ".pred", (Declarator("%__hb_q"),))]
    body += _addr_code(addr, "%__hb_ma")
    if isinstance(k, Immediate):
        body.append(Instruction(None, "mov", ("b64",), (_reg("%__hb_mk"), Immediate(str(int(k.value) & 0xFFFFFFFF)))))
    else:
        body.append(Instruction(None, "cvt", ("u64", "u32"), (_reg("%__hb_mk"), k)))
    body += [VarDecl((), "param", (), ".b64", (Declarator("__hb_m0"), Declarator("__hb_m2"))),
             VarDecl((), "param", (), ".b32", (Declarator("__hb_m1"), Declarator("__hb_mr"))),
             Instruction(None, "st", ("param", "b64"), (Address(Symbol("__hb_m0")), _reg("%__hb_ma"))),
             Instruction(None, "st", ("param", "b32"), (Address(Symbol("__hb_m1")), Immediate("4"))),
             Instruction(None, "st", ("param", "b64"), (Address(Symbol("__hb_m2")), _reg("%__hb_mk"))),
             Instruction(None, "call", (), (ArgList((Symbol("__hb_mr"),)), Symbol("__hb_eidola_monitor"),
                                            ArgList((Symbol("__hb_m0"), Symbol("__hb_m1"), Symbol("__hb_m2"))))),
             Instruction(None, "ld", ("param", "b32"), (_reg("%__hb_hit"), Address(Symbol("__hb_mr")))),
             Instruction(None, "setp", ("eq", "u32"), (_reg("%__hb_q"), _reg("%__hb_hit"), Immediate("0"))),
             Instruction(Guard(_reg("%__hb_q")), "call", (), (Symbol("__hb_eidola_mwait"), ArgList((Symbol("__hb_m0"),))))]
    return Block(tuple(body))


def _count_nonflag(g: Optional[Guard]) -> Block:
    """R_NFT += 1 in every lane that executes the load; R_NFW += 1 in the lowest such lane."""
    body: list[Statement] = [VarDecl((), "reg", (), ".b32", (Declarator("%__hb_nm"), Declarator("%__hb_nl"),
                                                              Declarator("%__hb_ne"))),
                             VarDecl((), "reg", (), ".pred", (Declarator("%__hb_np"),)),
                             Instruction(None, "activemask", ("b32",), (_reg("%__hb_nm"),)),
                             Instruction(None, "mov", ("u32",), (_reg("%__hb_ne"), _reg("%lanemask_eq")))]
    if g is not None:
        # the ballot's mask OR-ed with this lane's bit: the same lanes, but a mask ptxas cannot prove warp-uniform, so
        # it checks every lane's own mask (runtime_cuda/src/hbf_ptx.cuh HBF_GROUP_SYNC, docs/design.md §3.8)
        src = Negated(g.reg) if g.negated else g.reg
        body += [Instruction(None, "or", ("b32",), (_reg("%__hb_nm"), _reg("%__hb_nm"), _reg("%__hb_ne"))),
                 Instruction(None, "vote", ("sync", "ballot", "b32"), (_reg("%__hb_nm"), src, _reg("%__hb_nm")))]
    body += [Instruction(None, "neg", ("s32",), (_reg("%__hb_nl"), _reg("%__hb_nm"))),
             Instruction(None, "and", ("b32",), (_reg("%__hb_nl"), _reg("%__hb_nl"), _reg("%__hb_nm"))),
             Instruction(None, "setp", ("eq", "u32"), (_reg("%__hb_np"), _reg("%__hb_nl"), _reg("%__hb_ne"))),
             Instruction(g, "add", ("u32",), (_reg(R_NFT), _reg(R_NFT), Immediate("1"))),
             Instruction(Guard(_reg("%__hb_np")), "add", ("u32",), (_reg(R_NFW), _reg(R_NFW), Immediate("1")))]
    return Block(tuple(body))


def _flush_nonflag(g: Optional[Guard], flags: bool = False) -> Block:
    body: list[Statement] = [
        VarDecl((), "param", (), ".b32", (Declarator("__hb_n0"), Declarator("__hb_n1"))),
        Instruction(None, "st", ("param", "b32"), (Address(Symbol("__hb_n0")), _reg(R_NFT))),
        Instruction(None, "st", ("param", "b32"), (Address(Symbol("__hb_n1")), _reg(R_NFW))),
        Instruction(g, "call", (), (Symbol("__hb_eidola_flush_nonflag"), ArgList((Symbol("__hb_n0"), Symbol("__hb_n1")))))]
    if flags:
        names = ("__hb_g0", "__hb_g1", "__hb_g2", "__hb_g3")
        body.append(VarDecl((), "param", (), ".b32", tuple(Declarator(n) for n in names)))
        for n, r in zip(names, (R_FK, R_FT, R_FW, R_FV)):
            body.append(Instruction(None, "st", ("param", "b32"), (Address(Symbol(n)), _reg(r))))
        body.append(Instruction(g, "call", (), (Symbol("__hb_eidola_flush_flag"), ArgList(tuple(Symbol(n) for n in names)))))
    return Block(tuple(body))


def _walk(body: tuple[Statement, ...], report: dict, fname: str, fstate: dict) -> tuple[Statement, ...]:
    out: list[Statement] = []
    spins = _spin_loops(body) if report.get("mwait") else {}
    used = fstate["used"]
    for idx, st in enumerate(body):
        if isinstance(st, Block):
            out.append(Block(_walk(st.body, report, fname, fstate)))
            continue
        if idx in spins:
            addr, k = spins[idx]
            out.append(_park(addr, k))
            report["spin_loops"].append({"kernel": fname, "line": st.line})
            used.update({"__hb_eidola_monitor", "__hb_eidola_mwait"})
        if isinstance(st, Instruction):
            w = flag_load_width(st)
            if w is not None:
                report["sites"].append({"kernel": fname, "load": st.mnemonic, "width": w, "line": st.line})
                if w == 32 and report.get("count_nonflag"):   # accounting in registers
                    used.update({"__hb_eidola_ld_flag32_acct", "__hb_eidola_count_flag_other"})
                    fstate["flag_sites"] += 1
                    out.append(_rewrite_acct(st))
                else:
                    used.add(f"__hb_eidola_ld_flag_u{w}")
                    out.append(_rewrite(st, w))
                continue
            if report.get("count_nonflag") and is_nonflag_global_read(st):
                fstate["nonflag_sites"] += 1
                out.append(_count_nonflag(st.guard))
        out.append(st)
    return tuple(out)


def _insert_flushes(body: tuple[Statement, ...], flags: bool) -> tuple[Statement, ...]:
    out: list[Statement] = []
    for st in body:
        if isinstance(st, Block):
            out.append(Block(_insert_flushes(st.body, flags)))
            continue
        if isinstance(st, Instruction) and st.opcode in ("ret", "exit"):
            out.append(_flush_nonflag(st.guard, flags))
        out.append(st)
    return tuple(out)


def prototypes(names) -> list[Function]:
    """Declarations (``.weak .func``, no body) of the extern functions in ``names``, sorted."""
    return link.declarations(abi.EIDOLA_HELPERS[n] for n in sorted(names))


def flags_pass(module: Module, meta: dict, *, mwait: Optional[bool] = None,
               count_nonflag: Optional[bool] = None) -> Module:
    """``mwait``/``count_nonflag`` default to ``meta["flags_options"]`` (set by the pipeline), else off.
    The prototypes of the extern functions it calls go before the module's first function."""
    opts = meta.get("flags_options", {})
    mwait = bool(opts.get("mwait", False)) if mwait is None else mwait
    count_nonflag = bool(opts.get("count_nonflag", False)) if count_nonflag is None else count_nonflag
    if any(isinstance(it, Function) and it.name.startswith("__hb_eidola_") and it.body is not None
           for it in module.items):
        raise RewriteError("module already carries the eidola extern API (rewritten twice?)")
    report: dict = {"sites": [], "spin_loops": [], "mwait": mwait, "count_nonflag": count_nonflag}
    used_all: set[str] = set()
    calls: dict[str, list[str]] = {}
    nonflag: dict[str, int] = {}
    items = []
    entries = []
    for it in module.items:
        if isinstance(it, Function) and it.body is not None and not it.name.startswith("__hb_"):
            fstate: dict = {"used": set(), "nonflag_sites": 0, "flag_sites": 0}
            body = _walk(it.body, report, it.name, fstate)
            if fstate["nonflag_sites"] or fstate["flag_sites"]:
                flags_too = fstate["flag_sites"] > 0
                body = _insert_flushes(body, flags_too)
                decl = VarDecl((), "reg", (), ".b32", tuple(Declarator(r) for r in COUNTER_REGS))
                init = Block(tuple(Instruction(None, "mov", ("u32",), (_reg(r), Immediate("0"))) for r in COUNTER_REGS))
                body = (decl, init) + body
                fstate["used"].add("__hb_eidola_flush_nonflag")
                if flags_too:
                    fstate["used"].add("__hb_eidola_flush_flag")
                if fstate["nonflag_sites"]:
                    nonflag[it.name] = fstate["nonflag_sites"]
            if it.is_entry:
                enter = Instruction(None, "call", (), (Symbol("__hb_eidola_kernel_enter"), ArgList(())))
                body = (Block((enter,)),) + body
                entries.append(it.name)
                fstate["used"].add("__hb_eidola_kernel_enter")
            calls[it.name] = sorted(fstate["used"])
            used_all |= fstate["used"]
            it = Function(it.linkage, it.kind, it.name, it.returns, it.params, it.directives, body, it.line)
        items.append(it)
    if used_all:
        have = {it.name for it in items if isinstance(it, Function)}
        protos = [f for f in prototypes(used_all) if f.name not in have]
        first = next((i for i, it in enumerate(items) if isinstance(it, Function)), len(items))
        items = items[:first] + protos + items[first:]
    meta[PASS_NAME] = {"rewritten_loads": len(report["sites"]), "sites": report["sites"],
                       "spin_loops_parked": len(report["spin_loops"]), "spin_loops": report["spin_loops"],
                       "mwait": mwait, "count_nonflag": count_nonflag, "nonflag_sites": nonflag,
                       "entries": entries, "extern": sorted(used_all), "calls": calls}
    return Module(module.version, module.target, module.address_size, tuple(items), module.header_comments)


def admit_eidola_calls(module: Module, meta: dict) -> Module:
    """Pipeline stage after the timing pass: the eidola helper functions the flags pass calls are
    linked into the module (the ``link_eidola`` stage), so they are admitted callees. The timing
    pass saw them as external calls; admission through calls is recomputed here with them counted
    as seen (:func:`hbfcc.admission.admit`, the same fixpoint). Returns ``module``."""
    fl = meta.get(PASS_NAME)
    tm = meta.get("timing")
    if fl is None or tm is None:
        return module
    linked = set(abi.EIDOLA_HELPERS)
    reports = {f["name"]: f for f in tm["functions"]}
    for name, r in reports.items():
        r["calls"] = list(dict.fromkeys(list(r.get("calls", [])) + fl["calls"].get(name, [])))
        r["external_calls"] = [c for c in r.get("external_calls", []) if c not in linked]
        r["eidola_calls"] = [c for c in r["calls"] if c in linked]
        r["not_admitted_reasons"] = [x for x in r["not_admitted_reasons"] if not x.startswith("calls ")
                                     and not x.startswith("indirect call")]
    base_ok = {n: not r["refused"] and not r["not_admitted_reasons"] for n, r in reports.items()}
    why = admit(base_ok, {n: r["calls"] for n, r in reports.items()},
                lambda c: None if c in linked else not_seen_by_rewrite(c))
    for name, r in reports.items():
        if name in why:
            r["not_admitted_reasons"].append(why[name])
        r["admitted"] = base_ok[name] and name not in why
    return module


def build_extern_ptx(out_dir: str | Path, *, nvcc: Optional[str] = None, arch: str = "compute_90a") -> Path:
    """Compile the extern API (eidola/src/hbf_eidola_helpers.cu: hbf_eidola.cuh with
    HBF_EIDOLA_EXTERN_API, plus __hb_eidola_flush_nonflag) to an -rdc PTX module. The build tree's
    ``make helpers-ptx`` output (runtime_cuda/ptx/hbf_eidola_helpers.ptx) is the same module. The sources
    are package data of eidola and runtime_cuda (found through hbfcommon.resources, not imported)."""
    nvcc = nvcc or shutil.which("nvcc")
    if not nvcc:
        raise ToolchainError("nvcc not found", argv=["nvcc"])
    src_dir = resources.data_path("eidola", "src")
    ptx_dir = resources.data_path("runtime_cuda", "src")
    inc_dir = resources.data_path("runtime_cuda", "include")
    srcs = [src_dir / "hbf_eidola_helpers.cu", src_dir / "hbf_eidola.cuh", ptx_dir / "hbf_ptx.cuh"]
    tag = hashlib.sha256(b"".join(p.read_bytes() for p in srcs if p.is_file()) + arch.encode()).hexdigest()[:12]
    out = Path(out_dir) / f"hbf_eidola_extern-{tag}.ptx"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = [nvcc, "-std=c++17", "-O3", f"-arch={arch}", "-rdc=true", "-ptx", f"-I{src_dir}", f"-I{ptx_dir}",
            f"-I{inc_dir}", str(srcs[0]), "-o", str(out)]
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise ToolchainError("nvcc failed building the eidola extern module", argv=argv,
                             returncode=r.returncode, stderr=r.stderr)
    return out


def rewrite_text(ptx: str, extern_ptx: str, meta: Optional[dict] = None, *, mwait: bool = False,
                 count_nonflag: bool = False) -> str:
    """The flags pass alone (no timing pass): parse, run it, link the extern module ``extern_ptx``
    (the same linker as the pipeline's ``link_eidola`` stage), print."""
    from hbfcc.helpers import eidola_helper_from_text
    from hbfcc.ptx.parser import parse_module
    from hbfcc.ptx.printer import print_module
    meta = {} if meta is None else meta
    mod = flags_pass(parse_module(ptx), meta, mwait=mwait, count_nonflag=count_nonflag)
    if not any(isinstance(it, Function) for it in mod.items):
        raise RewriteError("module has no function to instrument")
    return print_module(link.link(mod, eidola_helper_from_text(extern_ptx)))
