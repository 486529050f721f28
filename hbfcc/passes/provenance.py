"""Where a kernel's access addresses can come from: its parameters only, or also memory.

The runtime may run a launch's untouched native body when none of the launch's pointer arguments can
reach a registered range (docs/runtime.md, "Per-launch selection"). That decision is sound only when every
address the kernel accesses is computed from its parameters (and special registers, immediates): then an
address lies in an allocation a parameter points into. A kernel that loads a pointer (or an offset) from
memory — a pointer array, an index tensor, a descriptor in global scratch — can reach any range, so its
launches always run instrumented. This module decides which case a function is in.

The analysis is flow-insensitive and conservative: a register is *memory-derived* when any of its
definitions reads memory outside the kernel's parameter space (``ld``/``ldu`` of any space but
``.param``, ``atom``, ``shfl`` of such a value, a ``call``'s return value, ``ld.const``), or computes from a
memory-derived register or predicate, or takes the address of a module symbol; a fixpoint closes the set.
A rewritten access whose address register is memory-derived makes the function's provenance "memory".
"""
from __future__ import annotations

from typing import Iterable, Optional

from hbfcc.ptx.model import Address, ArgList, Instruction, Negated, PredPair, Register, Symbol, Vector

# opcodes whose first operand is not a destination (everything else writes its first operand; for
# mbarrier/cp/wgmma forms that do return a value the value is a token or a tile, never an address a
# later access uses, and missing it would only make the result less conservative for those forms)
_NO_DEST = frozenset({"st", "red", "bar", "barrier", "membar", "fence", "bra", "brx", "ret", "exit", "trap",
                      "prefetch", "prefetchu", "cp", "griddepcontrol", "nanosleep", "pmevent", "setmaxnreg",
                      "stmatrix", "discard", "applypriority", "multimem", "tensormap"})
# opcodes that read memory into their destination
_LOADS = frozenset({"ld", "ldu", "atom", "ldmatrix", "tex", "tld4", "suld", "mapa", "getctarank"})


def _regs(op) -> Iterable[str]:
    t = type(op)
    if t is Register:
        yield op.name
    elif t is Negated:
        yield op.reg.name
    elif t is PredPair:
        yield from _regs(op.first)
        yield from _regs(op.second)
    elif t is Address:
        if type(op.base) is Register:
            yield op.base.name
        if op.coords is not None:
            yield from _regs(op.coords)
    elif t is Vector:
        for x in op.elems:
            yield from _regs(x)
    elif t is ArgList:
        for x in op.items:
            yield from _regs(x)


def _dests(inst: Instruction) -> list[str]:
    if not inst.operands:
        return []
    op = inst.opcode
    if op == "call":   # call (ret), func, (args): the return values are unknown -> memory-derived
        first = inst.operands[0]
        return list(_regs(first)) if type(first) is ArgList else []
    if op in _NO_DEST:
        return []
    return list(_regs(inst.operands[0]))


def _reads_memory(inst: Instruction) -> bool:
    op = inst.opcode
    if op == "call":
        return True
    if op in _LOADS:
        return not (op == "ld" and inst.modifiers and inst.modifiers[0] in ("param", "param::entry",
                                                                              "param::func"))
    return False


def memory_derived(insts: Iterable[Instruction]) -> set[str]:
    """The registers whose value may come from memory (see the module docstring)."""
    nodes = []
    for inst in insts:
        d = _dests(inst)
        if not d:
            continue
        srcs: list[str] = []
        sym = False
        for i, o in enumerate(inst.operands):
            if i == 0 and inst.opcode != "call":
                # a vector/predicate destination may also appear as an address base in atom: skip dests
                if type(o) is Address:
                    srcs.extend(_regs(o))
                continue
            if inst.opcode == "call" and i == 0:
                continue
            srcs.extend(_regs(o))
            if type(o) is Symbol or (type(o) is Address and type(o.base) is Symbol):
                sym = True
        if inst.guard is not None:
            srcs.append(inst.guard.reg.name)
        # mov/cvta of a module symbol's address, or a load: a root
        root = _reads_memory(inst) or (sym and inst.opcode in ("mov", "cvta", "add") and
                                       not _is_param_symbol_use(inst))
        nodes.append((d, srcs, root))
    mem: set[str] = set()
    changed = True
    while changed:
        changed = False
        for d, srcs, root in nodes:
            if root or any(s in mem for s in srcs):
                for r in d:
                    if r not in mem:
                        mem.add(r)
                        changed = True
    return mem


def _is_param_symbol_use(inst: Instruction) -> bool:
    """``mov.b64 %rd, kernel_param_0`` (taking a parameter's address in the param space) is a param use."""
    for o in inst.operands[1:]:
        s = o.base if type(o) is Address else o
        if type(s) is Symbol and "param" in s.name:
            return True
    return False


def address_provenance(insts: list[Instruction], sites: Iterable[Optional[Address]]) -> tuple[str, list[int]]:
    """("params" | "memory", source lines of the accesses whose address may come from memory, and of
    the calls that pass a memory-derived value to a function: the callee's addresses may derive from it).
    A function that calls others is "params" only if its callees are too (the caller checks that)."""
    mem = memory_derived(insts)
    lines: list[int] = []
    for inst, a in zip(insts, sites):
        if inst.opcode == "call":
            args = [o for o in inst.operands[1:] if type(o) is ArgList]
            if any(r in mem for o in args for r in _regs(o)):
                lines.append(inst.line)
            continue
        if a is None:
            continue
        if (type(a.base) is Register and a.base.name in mem) or \
                (type(a.base) is Symbol and "param" not in a.base.name):
            lines.append(inst.line)
    return ("memory" if lines else "params"), lines
