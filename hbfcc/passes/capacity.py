"""The capacity rewrite (docs/design.md §3.6, issue 16): every load, store and atomic that may reach a capacity
range accesses the frame its page is mapped to instead, through the page table, with the frame pinned for the
access. NOT GPU-VERIFIED (checked on the CPU: the rewritten PTX assembles with ptxas for sm_90a).

Each access site the timing pass would rewrite (:func:`hbfcc.passes.timing.classify`: ``ld``/``st``/``atom``/
``red`` on global or generic addresses held in a register) becomes, under the instruction's own guard::

    add.s64 %__hbc_a, <base>, <offset>                         (the effective address, a copy)
    x = __hb_cap_xlate(%__hbc_a, op, site)                      (the frame's byte, pinned; or the address itself)
    <the instruction, its address replaced by [%__hbc_x]>       (the native semantics, on the frame's bytes)
    setp.ne.and.u64 %__hbc_p, %__hbc_x, %__hbc_a, <guard>
    @%__hbc_p __hb_cap_release(%__hbc_a, %__hbc_x)              (unpin, release at system scope)

``__hb_cap_xlate`` returns the address unchanged when it is not in a capacity range (the helper's band check and
range search, runtime_cuda/src/hbf_cap_helpers.cuh), so accesses elsewhere keep their address and cost one call. A
hit never leaves the GPU; a miss posts ``HBF_REQ_CAP_MISS`` on the ring and waits for the mapping and the
modeled media time (runtime_cuda/src/hbf_capacity.cuh). Accesses are naturally aligned (<= 16 bytes), so none
crosses a page. The pass runs before the timing pass, which then sees the translated access (a frame address:
in no timing range, so native there).

A translated ``ld.global.nc`` or ``ldu`` becomes a plain ``ld`` (the non-coherent path is only for data nobody
writes during the kernel; a frame is refilled mid-kernel).

``cp.async`` from global memory is translated the same way and made synchronous: ``cp.async.commit_group;
cp.async.wait_group 0`` right after it, then the release (the frame stays pinned until the copy has landed).
That completes the program's outstanding copies early (its later waits are only stronger) and loses the
copy pipelining; lanes whose copy reads nothing (src-size 0, ignore-src) are not translated.

Refused (the function is not capacity-admitted; the runtime must not launch it against a capacity range):
every class the timing pass refuses (TMA, texture, cp.async tracked by an mbarrier, ...), which it reports
itself (``capacity_admission`` makes a function that is not timing-admitted not capacity-admitted). Accesses through a
symbol (``[global_var]``) or an absolute address are left alone: a capacity range is a reserved span that no
variable lives in.

Report ``meta["capacity"]``: per function, sites rewritten, refusals (line, instruction, reason), and
``capacity_admitted``. After the timing pass the ``capacity_admission`` stage recomputes the timing report's
admission with the capacity helpers counted as linked callees (the timing pass saw them as external calls).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

from hbfcommon import abi
from hbfcommon.capacity import CAPACITY_HELPERS
from hbfcommon.errors import RewriteError

from hbfcc import link
from hbfcc.admission import admit, not_seen_by_rewrite
from hbfcc.passes.timing import _32BIT_TYPES, _Ctx, _call, classify
from hbfcc.ptx.model import (Address, Block, Comment, Declarator, Function, Guard, Immediate, Instruction, Module,
                             Negated, Register, Statement, VarDecl)

PASS_NAME = "capacity"
R_A, R_X, R_P, R_Q, R_T = "%__hbc_a", "%__hbc_x", "%__hbc_p", "%__hbc_q", "%__hbc_t"
XLATE, RELEASE = "__hb_cap_xlate", "__hb_cap_release"
_OP = {"load": abi.HBF_OP_LOAD, "store": abi.HBF_OP_STORE, "atomic": abi.HBF_OP_ATOMIC, "red": abi.HBF_OP_ATOMIC,
       "cpasync": abi.HBF_OP_CPASYNC}


@dataclass
class CapacityReport:
    name: str
    sites: int = 0
    cpasync_sites: int = 0            # cp.async sites made synchronous (their pipelining lost)
    refused: list[dict] = field(default_factory=list)

    @property
    def capacity_admitted(self) -> bool:
        return not self.refused

    def to_dict(self) -> dict:
        return {"name": self.name, "sites": self.sites, "cpasync_sites": self.cpasync_sites, "refused": self.refused,
                "capacity_admitted": self.capacity_admitted}


def _ins(op: str, mods: tuple[str, ...], ops: tuple, guard: Optional[Guard] = None) -> Instruction:
    return Instruction(guard, op, mods, ops)


class _Rewriter:
    def __init__(self, module: Module, fn: Function, index: int) -> None:
        self.ctx = _Ctx(module, fn)
        self.fn = fn
        self.index = index
        self.report = CapacityReport(fn.name)

    def _site(self) -> int:
        s = self.report.sites
        if s >= 0xFFFF:
            raise RewriteError("too many capacity access sites in one function", function=self.fn.name)
        return (self.index << 16) | s

    def _site_code(self, inst: Instruction, kind: str, addr: Address) -> list[Statement]:
        g = inst.guard
        out: list[Statement] = []
        base = addr.base
        if self.ctx.reg_type(base.name) in _32BIT_TYPES:
            out.append(_ins("cvt", ("u64", "u32"), (Register(R_A), base), g))
            if addr.offset:
                out.append(_ins("add", ("s64",), (Register(R_A), Register(R_A), Immediate(str(addr.offset))), g))
        elif addr.offset:
            out.append(_ins("add", ("s64",), (Register(R_A), base, Immediate(str(addr.offset))), g))
        else:
            out.append(_ins("mov", ("u64",), (Register(R_A), base), g))
        out.append(_call(XLATE, (("b64", Register(R_A)), ("b32", Immediate(str(_OP[kind]))),
                                 ("b32", Immediate(str(self._site())))), ret=R_X, guard=g))
        new_addr = Address(Register(R_X), 0, addr.coords)
        acc = replace(inst, operands=tuple(new_addr if o is addr else o for o in inst.operands))
        if acc.opcode == "ldu" or "nc" in acc.modifiers:
            # the non-coherent (read-only) data path only for data that no one writes while the kernel runs: a
            # frame is refilled with another page mid-kernel, so the translated load takes the coherent path
            # (same value; the pin's fence.sc.sys orders it after the fill)
            acc = replace(acc, opcode="ld", modifiers=tuple(m for m in acc.modifiers if m != "nc"))
        out.append(acc)
        pred = Register(g.reg.name) if g is not None else None
        if pred is None:
            out.append(_ins("setp", ("ne", "u64"), (Register(R_P), Register(R_X), Register(R_A))))
        else:
            last = Negated(pred) if g.negated else pred
            out.append(_ins("setp", ("ne", "and", "u64"), (Register(R_P), Register(R_X), Register(R_A), last)))
        out.append(_call(RELEASE, (("b64", Register(R_A)), ("b64", Register(R_X))), guard=Guard(Register(R_P))))
        self.report.sites += 1
        return out

    def _cpasync_code(self, inst: Instruction, addr: Address) -> list[Statement]:
        """A cp.async from a capacity range: translated like a load, made synchronous (``commit_group;
        wait_group 0`` right after it: the frame's pin is released once the copy has landed). Completing every
        outstanding copy early only strengthens the program's later waits (a copy the program's wait_group N
        leaves pending is complete already); the pipelining is lost. Lanes that read nothing (src-size 0, or
        ignore-src) are not translated: their address may be anywhere."""
        g = inst.guard
        ops = inst.operands
        rest = list(ops[3:])
        if "L2::cache_hint" in inst.modifiers and rest:
            rest = rest[:-1]                                # the cache policy operand
        out: list[Statement] = []
        act: list[Statement] = []                           # R_Q: this lane really reads its source
        if g is None:
            act.append(_ins("setp", ("eq", "u64"), (Register(R_Q), Register(R_A), Register(R_A))))
        elif g.negated:
            act.append(_ins("not", ("pred",), (Register(R_Q), g.reg)))
        else:
            act.append(_ins("and", ("pred",), (Register(R_Q), g.reg, g.reg)))
        for o in rest:
            if type(o) is Immediate:
                if int(o.value) == 0:
                    return [inst]                           # reads nothing, ever: untouched
            elif type(o) is Negated:                        # ignore-src = !s: active where s
                act.append(_ins("and", ("pred",), (Register(R_Q), Register(R_Q), o.reg)))
            elif type(o) is Register and self.ctx.reg_type(o.name) == ".pred":
                act.append(_ins("not", ("pred",), (Register(R_T), o)))
                act.append(_ins("and", ("pred",), (Register(R_Q), Register(R_Q), Register(R_T))))
            elif type(o) is Register:                       # src-size
                act.append(_ins("setp", ("ne", "and", "u32"), (Register(R_Q), o, Immediate("0"), Register(R_Q))))
        base = addr.base
        if self.ctx.reg_type(base.name) in _32BIT_TYPES:
            out.append(_ins("cvt", ("u64", "u32"), (Register(R_A), base)))
            if addr.offset:
                out.append(_ins("add", ("s64",), (Register(R_A), Register(R_A), Immediate(str(addr.offset)))))
        elif addr.offset:
            out.append(_ins("add", ("s64",), (Register(R_A), base, Immediate(str(addr.offset)))))
        else:
            out.append(_ins("mov", ("u64",), (Register(R_A), base)))
        out += act
        out.append(_call(XLATE, (("b64", Register(R_A)), ("b32", Immediate(str(_OP["cpasync"]))),
                                 ("b32", Immediate(str(self._site())))), ret=R_X, guard=Guard(Register(R_Q))))
        # the call block's ld.param of the result is not guarded: a lane that did not call keeps its address
        out.append(_ins("mov", ("u64",), (Register(R_X), Register(R_A)), Guard(Register(R_Q), True)))
        out.append(replace(inst, operands=tuple(Address(Register(R_X), 0, o.coords) if o is addr else o
                                                for o in inst.operands)))
        out.append(_ins("cp", ("async", "commit_group"), ()))
        out.append(_ins("cp", ("async", "wait_group"), (Immediate("0"),)))
        out.append(_ins("setp", ("ne", "and", "u64"), (Register(R_P), Register(R_X), Register(R_A), Register(R_Q))))
        out.append(_call(RELEASE, (("b64", Register(R_A)), ("b64", Register(R_X))), guard=Guard(Register(R_P))))
        self.report.sites += 1
        self.report.cpasync_sites += 1
        return out

    def _body(self, body: tuple[Statement, ...]) -> tuple[Statement, ...]:
        out: list[Statement] = []
        for s in body:
            t = type(s)
            if t is Block:
                out.append(replace(s, body=self._body(s.body)))
                continue
            if t is not Instruction:
                out.append(s)
                continue
            d = classify(s, self.ctx)
            if d is None or d.action != "rewritten":
                out.append(s)
                continue
            a = d.addr
            if a is None or type(a.base) is not Register or d.generic_symbol_global:
                out.append(s)                       # a variable or an absolute address: never a capacity range
                continue
            out.extend(self._cpasync_code(s, a) if d.kind == "cpasync" else self._site_code(s, d.kind, a))
        return tuple(out)

    def run(self) -> Function:
        body = self._body(self.fn.body or ())
        if self.report.sites == 0:
            return self.fn
        decl = (VarDecl((), "reg", (), ".b64", (Declarator(R_A), Declarator(R_X))),
                VarDecl((), "reg", (), ".pred", (Declarator(R_P), Declarator(R_Q), Declarator(R_T))))
        return replace(self.fn, body=decl + body)


def _instrumented(module: Module) -> bool:
    return any(f.name in CAPACITY_HELPERS for f in module.functions())


def capacity_pass(module: Module, meta: dict) -> Module:
    """The capacity rewrite ``(module, metadata) -> module``; report under ``meta["capacity"]``."""
    if _instrumented(module):
        raise RewriteError("module is already capacity-instrumented (declares the capacity helpers)")
    reports: list[CapacityReport] = []
    items = []
    # sites carry the function's kernel index as the timing pass numbers them (entries first, then the other
    # functions): the device helpers count a site's requests in that kernel's counter slot (site >> 16)
    entries = [f.name for f in module.items if type(f) is Function and f.is_entry and f.body is not None]
    funcs = [f.name for f in module.items if type(f) is Function and not f.is_entry and f.body is not None]
    kidx = {n: i for i, n in enumerate(entries + funcs)}
    for it in module.items:
        if type(it) is Function and it.body is not None:
            rw = _Rewriter(module, it, kidx[it.name])
            items.append(rw.run())
            reports.append(rw.report)
        else:
            items.append(it)
    if any(r.sites for r in reports):
        first = next((i for i, it in enumerate(items) if type(it) is Function), len(items))
        protos = [Comment("// hbfcc: capacity helper prototypes (runtime_cuda/include/hbf_capacity.h)")] + \
            link.declarations(CAPACITY_HELPERS.values())
        items = items[:first] + protos + items[first:]
    meta[PASS_NAME] = {"functions": [r.to_dict() for r in reports],
                       "calls": {r.name: [XLATE, RELEASE] for r in reports if r.sites}}
    return replace(module, items=tuple(items))


def capacity_admission(module: Module, meta: dict) -> Module:
    """After the timing pass: its admission recomputed with the capacity helpers as linked callees (it saw them as
    external calls), and each timing function report given ``capacity_admitted`` (its own refusals and those of
    everything it calls). Returns ``module``."""
    cp, tm = meta.get(PASS_NAME), meta.get("timing")
    if cp is None or tm is None:
        return module
    linked = set(CAPACITY_HELPERS)
    reports = {f["name"]: f for f in tm["functions"]}
    for r in reports.values():
        r["external_calls"] = [c for c in r.get("external_calls", []) if c not in linked]
        r["not_admitted_reasons"] = [x for x in r["not_admitted_reasons"] if not any(c in x for c in linked)]
    base_ok = {n: not r["refused"] and not r["not_admitted_reasons"] for n, r in reports.items()}
    outside = lambda c: None if c in linked else not_seen_by_rewrite(c)   # noqa: E731
    why = admit(base_ok, {n: r["calls"] for n, r in reports.items()}, outside)
    for name, r in reports.items():
        if name in why:
            r["not_admitted_reasons"].append(why[name])
        r["admitted"] = base_ok[name] and name not in why
    own = {f["name"]: f["capacity_admitted"] and reports.get(f["name"], {}).get("admitted", False)
           for f in cp["functions"]}
    cwhy = admit(own, {n: [c for c in reports[n]["calls"] if c not in linked] for n in own if n in reports},
                 outside)
    for f in cp["functions"]:
        f["capacity_admitted"] = own[f["name"]] and f["name"] not in cwhy
        if f["name"] in reports:
            reports[f["name"]]["capacity_admitted"] = f["capacity_admitted"]
    return module
