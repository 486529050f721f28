"""Cold-call register isolation (HBFCC_CALL_ISOLATION): around every call of a timing helper on the cold paths,
the registers live across the call go to a per-thread ``.local`` buffer before it and come back after it.

Why: ptxas assembles the helpers with every module (whole-program mode) and does not caller-save around a call:
a value live across ``call __hb_issue`` keeps its own register, the callee's registers are allocated beside it,
and the kernel's count becomes about (values live across the call) + (the callee's own), although the calls sit on
branches that nearly no request takes (the inline path serves them; docs/design.md §3.3). Stored before the call
and reloaded after it, those values are dead across it, and the call costs the kernel the callee's registers plus
the few it passes (docs/RESULTS.md "wt/csave").

What it emits, per wrapped call (inside the call's ``{ }`` block, after the ``st.param`` of its arguments, before
the ``ld.param`` of its return value)::

    mov.u64 %__hb_sva, __hb_sv;  cvta.local.u64 %__hb_sva, %__hb_sva;     // a generic address: see below
    st.volatile.b64 [%__hb_sva+0], %rd7;  ...  selp.u32 %__hb_svt, 1, 0, %p3;  st.volatile.u32 [...], %__hb_svt;
    call ...;
    mov.u64 %__hb_sva, __hb_sv;  cvta.local.u64 %__hb_sva, %__hb_sva;
    ld.volatile.b64 %rd7, [%__hb_sva+0];  ...  ld.volatile.u32 %__hb_svt, [...];  setp.ne.u32 %p3, %__hb_svt, 0;

* The set: the call's live-out registers (:mod:`hbfcc.ptx.liveness`: a real dataflow on the AST; the call's
  return register is not in it, being written after the call), less two kinds that are not saved but rebuilt
  after the restores: a register whose value comes, on every path, from the same re-executable instruction (a
  constant or symbol move, ``mov r, %tid.x``, the ``ld.param`` of a kernel parameter:
  :func:`~hbfcc.ptx.liveness.reexecutable_values`) gets that instruction again; a register ``v = f(x)`` (every
  definition the same pure one-register operation: ``abs``, ``neg``, ``cvt``, ``setp`` against an immediate, a copy;
  :func:`~hbfcc.ptx.liveness.derived_values`) whose ``x`` is live across the call and not written since ``v`` was
  computed is computed again from ``x`` (after ``x`` itself, which the call cannot change). Saving those instead
  costs registers: ptxas no longer sees the constant, the parameter in the constant bank, ``|x|`` as an operand
  modifier of ``x``. Each call lays its registers out from offset 0 (64-, then 32-bit and predicates, then
  16-bit); the buffer ``__hb_sv`` is the largest layout. Registers of other widths (8- or 128-bit, ``.v2``/``.v4``
  registers) stay in registers.
* ``st.volatile``/``ld.volatile`` through a generic address: ptxas forwards a plain ``st.local``/``ld.local`` pair
  (the value then lives in a register across the call again, and worse: 168 registers instead of 122 on
  custom_reduce); volatile accesses are neither forwarded nor removed.
* A guarded call (``@p call``) becomes ``@!p bra`` around the saves, the unguarded call and the restores: the skip
  path keeps the values in registers, but none of them is live across a call there.
* Semantics hold by construction: each restore writes back the value its thread saved, in private memory, and
  nothing between reads the buffer; a redone instruction reads nothing that changes while the thread runs; a
  recomputed ``f(x)`` reads the ``x`` it was computed from (the dataflow proves ``x`` unwritten since). A liveness
  that missed a register only leaves it in a register (costs registers); one that added a dead one only costs a
  store and a load on the cold path.
* Functions without such calls -- and the native copy of code versioning (passes/timing.py), which calls no
  helper -- are left untouched; so is everything else when the knob is off.

Which helpers: :data:`ISOLATED` -- the per-request ones (issue, groups, waits, joins, until asks, the TMA hooks);
the once-per-thread ones (kernel enter/exit/flush, TMA table enter/exit) too, as the registers live across them
count the same. Not the capacity pass's ``__hb_cap_*`` (hot: on every access) nor the eidola helpers.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

from hbfcommon import abi

from hbfcc.ptx.liveness import derived_values, liveness, reexecutable_values
from hbfcc.ptx.model import (Address, Block, Declarator, Function, Guard, Immediate, Instruction, Label, LabelRef,
                             Module, Register, Statement, Symbol, VarDecl, walk)

PASS_NAME = "call_isolation"

ISOLATED = frozenset(abi.HELPERS)     # every timing helper (hbf_abi.h)

BUF = "__hb_sv"                       # .local .align 8 .b8 [max layout]
R_SVA, R_SVT = "%__hb_sva", "%__hb_svt"   # .b64 the buffer's generic address, .b32 a predicate as 0/1
LABEL = "$__hb_cs"                    # + n: the skip label of a guarded call

_WIDTH = {"b16": 16, "u16": 16, "s16": 16, "f16": 16, "bf16": 16,
          "b32": 32, "u32": 32, "s32": 32, "f32": 32, "f16x2": 32, "bf16x2": 32,
          "b64": 64, "u64": 64, "s64": 64, "f64": 64, "pred": 1}


@dataclass
class FunctionIsolation:
    calls: int = 0                   # helper calls wrapped
    skipped: int = 0                 # helper calls with nothing live across them (left as they are)
    saved: int = 0                   # registers saved, summed over the wrapped calls
    saved_max: int = 0               # the most saved around one call
    redone: int = 0                  # re-executable definitions redone after a call instead of a save (summed)
    recomputed: int = 0              # derived values f(x) recomputed after x instead of a save (summed)
    not_saved: int = 0               # live registers of a width this stage does not save (summed)
    buffer_bytes: int = 0
    by_helper: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"calls": self.calls, "skipped": self.skipped, "saved": self.saved, "saved_max": self.saved_max,
                "redone": self.redone, "recomputed": self.recomputed,
                "not_saved": self.not_saved, "buffer_bytes": self.buffer_bytes, "by_helper": self.by_helper}


def _width(ty: str, attrs: tuple[str, ...]) -> Optional[int]:
    if any(a in (".v2", ".v4", ".v8") for a in attrs):
        return None
    return _WIDTH.get(ty.lstrip("."))


def _ins(op: str, mods: tuple[str, ...], ops: tuple, guard: Optional[Guard] = None) -> Instruction:
    return Instruction(guard, op, mods, ops)


def _addr() -> list[Statement]:
    return [_ins("mov", ("u64",), (Register(R_SVA), Symbol(BUF))),
            _ins("cvta", ("local", "u64"), (Register(R_SVA), Register(R_SVA)))]


def _layout(regs: list[tuple[str, int]]) -> tuple[list[tuple[str, int, int]], int]:
    """(name, width, offset) for each register, 64-bit first; the bytes used (a multiple of 8)."""
    order = sorted(regs, key=lambda r: ({64: 0, 32: 1, 1: 1, 16: 2}[r[1]], r[0]))
    out, off = [], 0
    for name, w in order:
        nb = 8 if w == 64 else 2 if w == 16 else 4
        off = (off + nb - 1) // nb * nb
        out.append((name, w, off))
        off += nb
    return out, (off + 7) // 8 * 8


def _save(name: str, w: int, off: int) -> list[Statement]:
    a = Address(Register(R_SVA), off)
    if w == 1:
        return [_ins("selp", ("u32",), (Register(R_SVT), Immediate("1"), Immediate("0"), Register(name))),
                _ins("st", ("volatile", "u32"), (a, Register(R_SVT)))]
    return [_ins("st", ("volatile", f"b{w}"), (a, Register(name)))]


def _restore(name: str, w: int, off: int) -> list[Statement]:
    a = Address(Register(R_SVA), off)
    if w == 1:
        return [_ins("ld", ("volatile", "u32"), (Register(R_SVT), a)),
                _ins("setp", ("ne", "u32"), (Register(name), Register(R_SVT), Immediate("0")))]
    return [_ins("ld", ("volatile", f"b{w}"), (Register(name), a))]


def isolate_function(fn: Function, helpers: frozenset[str] = ISOLATED) -> tuple[Function, FunctionIsolation]:
    """``fn`` with every call of ``helpers`` wrapped (module doc); unchanged (the same object) when none is."""
    rep = FunctionIsolation()
    if fn.body is None:
        return fn, rep
    sites = [(p, s) for p, s in walk(fn.body) if type(s) is Instruction and s.call_target in helpers]
    if not sites:
        return fn, rep
    lv = liveness(fn)
    at = [p for p, _ in sites]
    consts = reexecutable_values(fn, at, lv)
    derived = derived_values(fn, at, lv)
    repl: dict[tuple[int, ...], list[Statement]] = {}
    size = 0
    for p, ins in sites:
        name = ins.call_target
        live = sorted(lv.live_out_at(p))
        regs: list[tuple[str, int]] = []
        redo: list[Statement] = []
        depth = _derivable(p, live, consts[p], derived[p], lv)
        for v in live:
            w = _width(lv.types[v], lv.attrs.get(v, ()))
            if lv.resolve(p[:-1], v[1]) != v:       # shadowed where the call is
                rep.not_saved += 1
            elif v in consts[p]:                    # the same re-executable definition on every path: redone
                redo.append(consts[p][v])
            elif v in depth:                        # f(x) of a live x that still holds f's input: recomputed
                continue
            elif w is None:                         # a width this stage does not save
                rep.not_saved += 1
            else:
                regs.append((v[1], w))
        again = [derived[p][v][1] for v in sorted(depth, key=lambda v: (depth[v], v))]   # x before f(x)
        if not regs and not redo and not again:
            rep.skipped += 1
            continue
        lay, nbytes = _layout(regs) if regs else ([], 0)
        size = max(size, nbytes)
        call = ins
        out: list[Statement] = []
        skip = None
        if ins.guard is not None:
            skip = f"{LABEL}{rep.calls}"
            out.append(_ins("bra", (), (LabelRef(skip),), Guard(ins.guard.reg, not ins.guard.negated)))
            call = replace(ins, guard=None)
        if lay:
            out += _addr()
            for r in lay:
                out += _save(*r)
        out.append(call)
        if lay:
            out += _addr()
            for r in lay:
                out += _restore(*r)
        out += redo + again
        if skip is not None:
            out.append(Label(skip))
        repl[p] = out
        rep.calls += 1
        rep.saved += len(lay)
        rep.redone += len(redo)
        rep.recomputed += len(again)
        rep.saved_max = max(rep.saved_max, len(lay))
        rep.by_helper[name] = rep.by_helper.get(name, 0) + 1
    if not repl:
        return fn, rep
    rep.buffer_bytes = size
    body = _rebuild(fn.body, (), repl)
    decls: list[Statement] = [
        VarDecl((), "local", (".align 8",), ".b8", (Declarator(BUF, dims=(size,)),)),
        VarDecl((), "reg", (), ".b64", (Declarator(R_SVA),)),
        VarDecl((), "reg", (), ".b32", (Declarator(R_SVT),))] if size else []
    j = 0
    while j < len(body) and type(body[j]) is VarDecl:
        j += 1
    return replace(fn, body=tuple(body[:j] + decls + body[j:])), rep


def _derivable(p, live, consts: dict, der: dict, lv) -> dict:
    """The live variables recomputed after the call as f(x) (:func:`hbfcc.ptx.liveness.derived_values`), each with
    its depth: x is live and visible at the call and is itself saved, redone, or recomputed first (a chain ends in
    a saved or redone value; x's value never changes across the call, so f(x) is what v held)."""
    live_set = set(live)
    out: dict = {}
    state: dict = {}

    def ok(v) -> int:                  # -1: not recomputed; else the depth
        if v in state:
            return state[v]
        state[v] = -1                  # a cycle stays -1
        d = der.get(v)
        if d is None or v in consts or d[0] not in live_set or lv.resolve(p[:-1], d[0][1]) != d[0] \
                or lv.resolve(p[:-1], v[1]) != v:
            return -1
        x = d[0]
        dx = ok(x) if x in der and x not in consts else -1
        state[v] = dx + 1 if dx >= 0 else 0
        return state[v]

    for v in live:
        k = ok(v)
        if k >= 0:
            out[v] = k
    return out


def _rebuild(body: tuple[Statement, ...], prefix: tuple[int, ...], repl: dict) -> list[Statement]:
    out: list[Statement] = []
    for i, s in enumerate(body):
        p = prefix + (i,)
        r = repl.get(p)
        if r is not None:
            out.extend(r)
        elif type(s) is Block:
            out.append(replace(s, body=tuple(_rebuild(s.body, p, repl))))
        else:
            out.append(s)
    return out


def call_isolation(module: Module, meta: dict) -> Module:
    """The stage ``(module, metadata) -> module``: every defined function that is not a helper; adds
    ``meta["call_isolation"]`` ({function: FunctionIsolation dict}) and, per function, the same under the timing
    report's ``call_isolation`` (the artifact's kernels carry it)."""
    reports: dict[str, dict] = {}
    items = []
    for it in module.items:
        if type(it) is Function and it.body is not None and not it.name.startswith(abi.HELPER_PREFIX):
            new, rep = isolate_function(it)
            items.append(new)
            if rep.calls or rep.skipped:
                reports[it.name] = rep.to_dict()
        else:
            items.append(it)
    meta[PASS_NAME] = reports
    for f in (meta.get("timing") or {}).get("functions", []):
        if f.get("name") in reports:
            f[PASS_NAME] = reports[f["name"]]
    return replace(module, items=tuple(items))
