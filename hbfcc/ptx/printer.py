"""Printer: :class:`hbfcc.ptx.model.Module` -> PTX text that ptxas accepts.

Canonical layout (one statement a line, tab-indented bodies, nested blocks indented further);
``parse_module(print_module(m)) == m`` for every module the parser produces.
"""
from __future__ import annotations

from typing import Iterable

from .model import (
    Address, ArgList, Block, Comment, Declarator, Directive, Function, Guard, Immediate, Instruction,
    Label, LabelRef, Module, Negated, Param, PredPair, Register, Sink, Statement, Symbol, VarDecl,
    Vector,
)

__all__ = ["print_module", "print_function", "print_body", "format_instruction", "format_operand",
           "format_param", "format_decl", "format_directive", "remember"]

# Top-level items printed into many modules (the prepared helper modules, hbfcc.link): id -> (item, text).
# Nodes are immutable, so a remembered text cannot go stale; the entry keeps its item alive.
_remembered: dict[int, tuple[object, str]] = {}
_REMEMBER_MAX = 4096


def format_operand(op) -> str:
    t = type(op)
    if t is Register:
        return op.name
    if t is Address:
        b = op.base
        if b is None:
            s = str(op.offset)
        elif op.offset:
            s = f"{b.name}+{op.offset}"
        else:
            s = b.name
        if op.coords is not None:
            s += ", " + format_operand(op.coords)
        return "[" + s + "]"
    if t is Vector:
        return "{" + ", ".join([format_operand(e) for e in op.elems]) + "}"
    if t is ArgList:
        return "(" + ", ".join([format_operand(e) for e in op.items]) + ")"
    if t is Sink:
        return "_"
    if t is Negated:
        return "!" + op.reg.name
    if t is PredPair:
        return f"{format_operand(op.first)}|{format_operand(op.second)}"
    return str(op)  # Immediate, Symbol, LabelRef


_mn_cache: dict = {}


def format_instruction(ins: Instruction) -> str:
    """One instruction, without indentation, with the trailing ';'."""
    g = ins.guard
    key = (ins.opcode, ins.modifiers)
    mn = _mn_cache.get(key)
    if mn is None:
        mn = ins.opcode if not ins.modifiers else ins.opcode + "." + ".".join(ins.modifiers)
        if len(_mn_cache) < 20000:
            _mn_cache[key] = mn
    if g is not None:
        mn = ("@!" if g.negated else "@") + g.reg.name + " " + mn
    ops = ins.operands
    if not ops:
        return mn + ";"
    parts = []
    for o in ops:
        t = type(o)
        if t is Register:
            parts.append(o.name)
        elif t is Immediate or t is Symbol or t is LabelRef:
            parts.append(o.text if t is Immediate else o.name)
        elif t is Address and o.coords is None and type(o.base) is Register:
            parts.append("[" + o.base.name + "]" if not o.offset else f"[{o.base.name}+{o.offset}]")
        else:
            parts.append(format_operand(o))
    return mn + " \t" + ", ".join(parts) + ";"


def _join_tokens(toks: Iterable[str]) -> str:
    out = []
    prev = ""
    for t in toks:
        if out and t not in (",", ")", "]", ">") and prev not in ("(", "[", "<"):
            out.append(" ")
        out.append(t)
        prev = t
    return "".join(out)


def format_directive(d: Directive) -> str:
    if d.name == "loc" and len(d.args) == 3:
        return ".loc " + " ".join(d.args)
    s = "." + d.name
    if d.args:
        s += " " + _join_tokens(d.args)
    return s


def format_param(p: Param) -> str:
    parts = ["." + p.space]
    if p.align is not None:
        parts.append(f".align {p.align}")
    parts.append(p.type)
    if p.ptr_space is not None:
        parts.append(".ptr")
        if p.ptr_space:
            parts.append("." + p.ptr_space)
        if p.ptr_align is not None:
            parts.append(f".align {p.ptr_align}")
    name = p.name + "".join("[]" if d is None else f"[{d}]" for d in p.dims)
    parts.append(name)
    return " ".join(parts)


def _format_declarator(d: Declarator) -> str:
    s = d.name
    if d.count is not None:
        s += f"<{d.count}>"
    s += "".join("[]" if x is None else f"[{x}]" for x in d.dims)
    if d.init is not None:
        s += " = " + _join_tokens(d.init)
    return s


def format_decl(v: VarDecl) -> str:
    parts = list(v.linkage)
    parts.append("." + v.space)
    parts.extend(v.attrs)
    parts.append(v.type)
    return " ".join(parts) + " \t" + ", ".join(_format_declarator(d) for d in v.decls) + ";"


def _emit_body(body: Iterable[Statement], out: list[str], indent: str) -> None:
    for s in body:
        t = type(s)
        if t is Instruction:
            out.append(indent + format_instruction(s))
        elif t is Label:
            out.append(s.name + ":")
        elif t is Comment:
            out.append(indent + s.text)
        elif t is VarDecl:
            out.append(indent + format_decl(s))
        elif t is Directive:
            if s.name in ("loc", "file"):
                out.append(indent + format_directive(s))
            else:
                out.append(indent + format_directive(s) + ";")
        elif t is Block:
            out.append(indent + "{")
            _emit_body(s.body, out, indent + "\t")
            out.append(indent + "}")
        else:
            raise TypeError(f"not a statement: {s!r}")


def print_body(body: Iterable[Statement], indent: str = "\t") -> str:
    out: list[str] = []
    _emit_body(body, out, indent)
    return "\n".join(out) + "\n"


def _func_header(f: Function) -> str:
    s = " ".join(list(f.linkage) + ["." + f.kind])
    if f.returns:
        s += " (" + ", ".join(format_param(p) for p in f.returns) + ")"
    s += " " + f.name
    if f.params:
        s += "(\n" + ",\n".join("\t" + format_param(p) for p in f.params) + "\n)"
    else:
        s += "()"
    for d in f.directives:
        s += "\n" + format_directive(d)
    return s


def print_function(f: Function) -> str:
    out = [_func_header(f)]
    if f.body is None:
        out[-1] += ";"
        return "\n".join(out) + "\n"
    out.append("{")
    _emit_body(f.body, out, "\t")
    out.append("}")
    return "\n".join(out) + "\n"


def remember(items: Iterable) -> None:
    """Print these top-level functions once; :func:`print_module` reuses the text whenever the same
    objects are printed again (a linked helper is printed into every rewritten module)."""
    if len(_remembered) > _REMEMBER_MAX:
        _remembered.clear()
    for it in items:
        if type(it) is Function:
            _remembered[id(it)] = (it, print_function(it))


def print_module(m: Module) -> str:
    out: list[str] = [c.text for c in m.header_comments]
    if out:
        out.append("")
    out.append(f".version {m.version}")
    out.append(".target " + ", ".join(m.target))
    out.append(f".address_size {m.address_size}")
    out.append("")
    for it in m.items:
        t = type(it)
        if t is Function:
            hit = _remembered.get(id(it))
            out.append(hit[1] if hit is not None and hit[0] is it else print_function(it))
        elif t is VarDecl:
            out.append(format_decl(it))
        elif t is Comment:
            out.append(it.text)
        elif t is Directive:
            if it.name == "section":
                out.append(format_directive(it))
                out.append("{")
                if it.raw:
                    out.extend("\t" + ln for ln in it.raw.split("\n"))
                out.append("}")
            elif it.name in ("file", "loc"):
                out.append(format_directive(it))
            else:
                out.append(format_directive(it) + ";")
        else:
            raise TypeError(f"not a top-level item: {it!r}")
    return "\n".join(out) + "\n"
