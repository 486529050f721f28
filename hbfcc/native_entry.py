"""The native entry (HBFCC_NATIVE_ENTRY, docs/design.md §3.3 "The native entry"): for each instrumented
``.entry`` that has a native version, a second ``.entry`` named ``<name>__hbnat`` whose body is the ORIGINAL
kernel's PTX, untouched -- the same parameters and directives (``.maxntid``/``.reqntid``/``.minnctapersm``/
``.maxnreg``), no prologue, no helper call, no reference to the TMA completion table (so ptxas allocates it as the
plain kernel: no static shared memory of hbfcc's). The runtime launches it instead of the instrumented entry for a
host launch decided native (nothing registered, or per-launch selection: its arguments reach no registered range);
a launch on a capturing stream keeps the instrumented entry and its prologue test (a replay must be able to become
instrumented after a later registration, §3.2).

The stage runs after every pass and before the helper link, on the module the passes produced, taking the kernel
bodies from the PARSED input (before any pass). The native entries (and the module-local copies ``<f>__hbnat`` of
the functions a kernel calls, with their calls renamed) go at the END of the module: the kernels' ``.entry`` order
-- their kernel index, which the counter slots follow -- does not change, and the timing report's ``kernels``
names only the instrumented entries. Each entry's report (``meta["timing"]["functions"]``, the artifact's
``kernels``) gets ``native_entry`` (the name, or None) and, when None, ``native_entry_reason``; ``meta[STAGE]``
sums it up.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional

from .admission import SYSTEM_CALLS
from .ptx.model import Block, Function, Instruction, Module, Symbol

SUFFIX = "__hbnat"
STAGE_NAME = "native_entry"
OFF = "HBFCC_NATIVE_ENTRY=0 (off)"


def name_of(kernel: str) -> str:
    """The native entry of ``kernel`` (deterministic: the runtime reads it from the artifact)."""
    return kernel + SUFFIX


def _callees(fn: Function) -> tuple[list[str], bool]:
    """(direct callees in order, an indirect call)."""
    out: list[str] = []
    indirect = False
    for inst in fn.instructions():
        if inst.opcode != "call":
            continue
        t = inst.call_target
        if t is None:
            indirect = True
        elif t not in out:
            out.append(t)
    return out, indirect


def _reach(original: Module, kernel: Function) -> tuple[list[str], Optional[str]]:
    """The module-defined functions ``kernel`` reaches (to copy), or why none can be emitted."""
    defined = {f.name: f for f in original.functions() if f.body is not None}
    seen: list[str] = []
    todo = [kernel]
    while todo:
        f = todo.pop()
        calls, indirect = _callees(f)
        if indirect:
            return [], f"{f.name} makes an indirect call (the callee is not seen)"
        for c in calls:
            if c in SYSTEM_CALLS or c in seen:
                continue
            g = defined.get(c)
            if g is None:
                return [], (f"calls {c}, not defined in this module (-rdc: its instrumented version would run "
                            f"in the native entry)")
            if g.is_entry:
                return [], f"calls entry {c}"
            seen.append(c)
            todo.append(g)
    return [d for d in defined if d in seen], None     # module order


def _renamed_calls(body, names: set[str]):
    """``body`` with every direct call to a function of ``names`` renamed to its copy."""
    out = []
    for st in body:
        if type(st) is Block:
            out.append(replace(st, body=tuple(_renamed_calls(st.body, names))))
        elif type(st) is Instruction and st.opcode == "call" and st.call_target in names:
            ops = tuple(Symbol(name_of(o.name)) if type(o) is Symbol and o.name in names else o for o in st.operands)
            out.append(replace(st, operands=ops))
        else:
            out.append(st)
    return out


def _copy(f: Function, name: str, names: set[str], linkage: tuple[str, ...]) -> Function:
    body = tuple(_renamed_calls(f.body or (), names)) if names else f.body
    return replace(f, name=name, linkage=linkage, body=body)


def plan(original: Module, rewritten: Module, functions: list[dict], passes: tuple[str, ...],
         enabled: bool) -> dict[str, tuple[Optional[str], str]]:
    """Per instrumented entry: (its native entry's name, "") or (None, why not)."""
    out: dict[str, tuple[Optional[str], str]] = {}
    taken = {f.name for f in rewritten.functions()}
    orig = {f.name: f for f in original.functions() if f.is_entry and f.body is not None}
    other = [p for p in passes if p != "timing"]
    for rep in functions:
        if rep.get("kind") != "entry":
            continue
        n = rep["name"]
        if not enabled:
            out[n] = (None, OFF)
        elif other:
            out[n] = (None, f"HBFCC_PASSES={'+'.join(passes)}: the {'/'.join(other)} pass rewrites kernels outside "
                            "the timing pass's native version")
        elif not rep.get("native_version"):
            out[n] = (None, "no native version (the timing pass instrumented nothing in this kernel)")
        elif n not in orig:
            out[n] = (None, "the kernel is not in the input")
        elif name_of(n) in taken:
            out[n] = (None, f"the module already has a function named {name_of(n)}")
        else:
            _, why = _reach(original, orig[n])
            out[n] = (name_of(n), "") if why is None else (None, why)
    return out


def stage(original: Module, enabled: bool) -> Callable[[Module, dict], Module]:
    """The stage ``(module, meta) -> module`` (see the module's doc). ``original``: the parsed input."""

    def run(module: Module, meta: dict) -> Module:
        timing = meta.get("timing") or {}
        funcs = timing.get("functions", [])
        decided = plan(original, module, funcs, tuple(meta.get("passes", ("timing",))), enabled)
        for rep in funcs:
            if rep.get("kind") == "entry" and rep["name"] in decided:
                ne, why = decided[rep["name"]]
                rep["native_entry"] = ne
                if ne is None:
                    rep["native_entry_reason"] = why
        emitted = [n for n, (ne, _) in decided.items() if ne is not None]
        meta[STAGE_NAME] = {"enabled": enabled, "entries": {n: ne for n, (ne, _) in decided.items()},
                            "reasons": {n: why for n, (ne, why) in decided.items() if ne is None}}
        if not emitted:
            return module
        orig = {f.name: f for f in original.functions() if f.body is not None}
        copies: list[str] = []
        for n in emitted:
            for c in _reach(original, orig[n])[0]:
                if c not in copies:
                    copies.append(c)
        names = set(copies)
        taken = {f.name for f in module.functions()}
        clash = [c for c in copies if name_of(c) in taken]
        if clash:        # a function copy's name is taken: no native entry that needs it
            for n in list(emitted):
                if set(_reach(original, orig[n])[0]) & set(clash):
                    emitted.remove(n)
                    why = f"the module already has a function named {name_of(clash[0])}"
                    meta[STAGE_NAME]["entries"][n] = None
                    meta[STAGE_NAME]["reasons"][n] = why
                    for rep in funcs:
                        if rep["name"] == n and rep.get("kind") == "entry":
                            rep["native_entry"], rep["native_entry_reason"] = None, why
            copies = [c for c in copies if c not in clash]
            names = set(copies)
        # module-local copies of the callees (prototypes first: a copy may call one defined after it), then the entries
        local: tuple[str, ...] = ()   # the copies are module-local (no .visible: nothing to clash with at -rdc)
        protos = [replace(orig[c], name=name_of(c), linkage=local, body=None) for c in copies]
        defs = [_copy(orig[c], name_of(c), names, local) for c in copies]
        ents = [_copy(orig[n], name_of(n), names, tuple(x for x in orig[n].linkage if x != ".extern"))
                for n in emitted]
        meta[STAGE_NAME]["functions"] = [name_of(c) for c in copies]
        return replace(module, items=tuple(module.items) + tuple(protos + defs + ents))

    return run

