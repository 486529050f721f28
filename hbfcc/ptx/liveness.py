"""Register liveness over a function body (backward dataflow on :mod:`hbfcc.ptx.cfg`'s basic blocks).

A *variable* is a declared register: ``(scope, name)``, where ``scope`` is the path of the ``{ }`` Block that
declares it (``()``: the function body, which also holds ``.reg`` parameters and returns). A name resolves in
the innermost enclosing scope that declares it, so an inline-asm block's ``%r1`` is not the function's ``%r1``.
Names that no ``.reg`` declares (special registers such as ``%tid.x``, ``%globaltimer``) are not variables.

Transfer function of one instruction (``live_in = uses | (live_out - kills)``):

* uses: :meth:`Instruction.uses` -- the guard predicate, every source operand (address bases, tensor
  coordinates, vector elements, ``!p``), the destination too where it accumulates (wgmma); ``call``: its
  argument list, not its return list;
* kills: :meth:`Instruction.defs` (vector elements, both halves of ``p|q``, a call's return registers, sinks
  skipped) -- only when the instruction is not guarded (``@p`` keeps the old value where p is false);
* ``ret`` of a ``.func`` with ``.reg`` returns reads them.

Edges are the CFG's (``bra``/``bra.uni``, ``@p bra``'s fall-through, ``brx.idx`` tables -- an unresolved one goes
to every label --, ``ret``/``exit``/``trap`` end a path, a guarded one falls through). Sets are Python ints (one
bit per variable); the fixpoint iterates over blocks in post-order.

    lv = liveness(fn)
    lv.live_out_at(path)     # frozenset of Var live right after the instruction at ``path``
    lv.types[var]            # its declared type (".b32", ".pred", ...), lv.attrs[var] its other attributes
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from .cfg import CFG, Path, build_cfg
from .model import Address, Block, Function, Immediate, Instruction, Register, Symbol, VarDecl, walk

__all__ = ["Var", "Liveness", "liveness", "scope_types", "reexecutable", "reexecutable_values", "derived_values"]

Var = tuple[Path, str]     # (declaring scope, register name)


def scope_types(fn: Function) -> tuple[dict[Path, dict[str, str]], dict[Var, tuple[str, ...]]]:
    """Every scope's ``.reg`` declarations: scope -> {name: type}, and each variable's other attributes
    (``.v4``, ...). The function scope also holds ``.reg`` parameters and return values."""
    scopes: dict[Path, dict[str, str]] = {(): {}}
    attrs: dict[Var, tuple[str, ...]] = {}
    for p in tuple(fn.params) + tuple(fn.returns):
        if p.space == "reg":
            scopes[()][p.name] = p.type

    def visit(body, scope: Path) -> None:
        d = scopes.setdefault(scope, {})
        for i, s in enumerate(body):
            t = type(s)
            if t is VarDecl and s.space == "reg":
                for dc in s.decls:
                    for n in dc.names():
                        d[n] = s.type
                        if s.attrs:
                            attrs[(scope, n)] = s.attrs
            elif t is Block:
                visit(s.body, scope + (i,))

    visit(fn.body or (), ())
    return scopes, attrs


@dataclass
class Liveness:
    function: Function
    cfg: CFG
    vars: list[Var]                      # bit i of a set is vars[i]
    types: dict[Var, str]
    attrs: dict[Var, tuple[str, ...]]
    block_out: list[int]                 # live-out of each basic block (bitset)
    scopes: dict[Path, dict[str, str]]   # scope -> {name: type} (scope_types)
    _uses: dict[Path, int]
    _kills: dict[Path, int]

    def resolve(self, scope: Path, name: str) -> Optional[Var]:
        """The variable ``name`` designates in ``scope`` (the path of a Block, () the body); None: undeclared."""
        sc = tuple(scope)
        while True:
            d = self.scopes.get(sc)
            if d is not None and name in d:
                return (sc, name)
            if not sc:
                return None
            sc = sc[:-1]

    def bits(self, s: int) -> frozenset[Var]:
        out = []
        while s:
            low = s & -s
            out.append(self.vars[low.bit_length() - 1])
            s ^= low
        return frozenset(out)

    def live_out_bits(self, path: Path) -> int:
        """Live right after the instruction at ``path`` (bitset)."""
        path = tuple(path)
        b = self.cfg.blocks[self.cfg.block_of(path)]
        live = self.block_out[b.index]
        for p, _ in reversed(b.instrs):
            if p == path:
                return live
            live = self._uses[p] | (live & ~self._kills[p])
        raise KeyError(f"no instruction at {path}")

    def live_out_at(self, path: Path) -> frozenset[Var]:
        return self.bits(self.live_out_bits(path))

    def live_in_at(self, path: Path) -> frozenset[Var]:
        path = tuple(path)
        return self.bits(self._uses[path] | (self.live_out_bits(path) & ~self._kills[path]))


def liveness(fn: Function, cfg: Optional[CFG] = None) -> Liveness:
    """The live registers of ``fn`` (see the module doc)."""
    cfg = cfg or build_cfg(fn)
    scopes, attrs = scope_types(fn)
    index: dict[Var, int] = {}
    vars_: list[Var] = []
    types: dict[Var, str] = {}

    def bit(scope: Path, name: str) -> int:
        sc = scope
        while True:
            d = scopes.get(sc)
            if d is not None and name in d:
                v = (sc, name)
                k = index.get(v)
                if k is None:
                    k = index[v] = len(vars_)
                    vars_.append(v)
                    types[v] = d[name]
                return 1 << k
            if not sc:
                return 0
            sc = sc[:-1]

    ret_regs = tuple(p.name for p in fn.returns if p.space == "reg") if not fn.is_entry else ()
    uses: dict[Path, int] = {}
    kills: dict[Path, int] = {}
    for b in cfg.blocks:
        for p, ins in b.instrs:
            sc = p[:-1]
            u = 0
            for n in ins.uses():
                u |= bit(sc, n)
            if ins.opcode == "ret" and ret_regs:
                for n in ret_regs:
                    u |= bit((), n)
            k = 0
            if ins.guard is None:
                for n in ins.defs():
                    k |= bit(sc, n)
            uses[p], kills[p] = u, k

    nb = len(cfg.blocks)
    gen = [0] * nb
    kill = [0] * nb
    for b in cfg.blocks:
        g = k = 0
        for p, _ in reversed(b.instrs):
            g = uses[p] | (g & ~kills[p])
            k |= kills[p]
        gen[b.index], kill[b.index] = g, k
    live_in = [0] * nb
    live_out = [0] * nb
    order = list(reversed(cfg.rpo()))     # post-order: successors first
    changed = True
    while changed:
        changed = False
        for i in order:
            o = 0
            for s in cfg.blocks[i].succs:
                o |= live_in[s]
            n = gen[i] | (o & ~kill[i])
            if o != live_out[i] or n != live_in[i]:
                live_out[i], live_in[i] = o, n
                changed = True
    return Liveness(fn, cfg, vars_, types, {v: a for v, a in attrs.items() if v in index}, live_out, scopes,
                    uses, kills)



_NAC = object()     # not re-executable (two definitions meet, or one that is not re-executable)

# special registers whose value does not change during a thread's life (not %clock, %globaltimer, %pm*, %smid,
# %warpid: those change; docs of PTX ISA "Special Registers")
STABLE_SPECIAL = ("%tid", "%ntid", "%ctaid", "%nctaid", "%laneid", "%lanemask_", "%gridid", "%nsmid", "%nwarpid",
                  "%dynamic_smem_size", "%total_smem_size", "%aggr_smem_size", "%cluster", "%nclusterid",
                  "%is_explicit_cluster", "%reserved_smem")
_PURE = frozenset({"mov", "cvta", "cvt", "add", "sub", "mul", "mad", "shl", "shr", "and", "or", "xor", "not", "neg"})


def reexecutable(ins: Instruction, fn: Function) -> bool:
    """``ins`` defines one register from nothing that changes while the thread runs: a pure operation of
    immediates, symbols (addresses) and stable special registers, or the load of one of the entry's own kernel
    parameters (read-only). Running it again anywhere gives the same value."""
    ds = ins.defs()
    if len(ds) != 1 or not ins.operands:
        return False
    if ins.opcode == "ld":
        if not fn.is_entry or "param" not in ins.modifiers or len(ins.operands) != 2:
            return False
        a = ins.operands[1]
        return type(a) is Address and type(a.base) is Symbol and a.coords is None and \
            any(p.name == a.base.name for p in fn.params)
    if ins.opcode not in _PURE or type(ins.operands[0]) is not Register or "cc" in ins.modifiers:
        return False                     # (.cc writes the carry flag: running it again would change it)
    for o in ins.operands[1:]:
        t = type(o)
        if t is Register:
            if not o.name.startswith(STABLE_SPECIAL):
                return False
        elif t not in (Immediate, Symbol):
            return False
    return True


def reexecutable_values(fn: Function, at: list[Path], lv: Optional[Liveness] = None
                        ) -> dict[Path, dict[Var, Instruction]]:
    """Forward propagation of re-executable definitions (:func:`reexecutable`): for each instruction path in
    ``at``, the variables whose value right before it comes from the same re-executable instruction (the same
    text: ``mov r, 0``, ``ld.param r, [k_param_1]``, ``mov r, %tid.x``) on every path that defines them (paths where
    the variable is still undefined do not count), each with that instruction, unguarded. Any other definition
    makes the variable not re-executable where it reaches. What a restore can redo after a call instead of
    saving the value (ptxas keeps knowing it: a constant, a parameter in the constant bank, a special register)."""
    lv = lv or liveness(fn)
    cfg = lv.cfg
    want = {tuple(p) for p in at}
    inner: set[str] = set()          # names declared in nested scopes: a symbol there may not be visible elsewhere
    for path, st in walk(fn.body or ()):
        if type(st) is VarDecl and len(path) > 1:
            inner.update(n for d in st.decls for n in d.names())
    defs_of: dict[Path, list[tuple[Var, object]]] = {}
    cand: set[Var] = set()
    for b in cfg.blocks:
        for p, ins in b.instrs:
            ds = ins.defs()
            if not ds:
                continue
            sc = p[:-1]
            row = []
            key = (ins.mnemonic, tuple(str(o) for o in ins.operands[1:]), replace(ins, guard=None)) \
                if reexecutable(ins, fn) and not any(type(o) is Symbol and o.name in inner
                                                     for o in ins.operands[1:]) else None
            for n in ds:
                v = lv.resolve(sc, n)
                if v is None:
                    continue
                if key is not None:
                    cand.add(v)
                row.append((v, key if key is not None else _NAC))
            if row:
                defs_of[p] = row
    out: dict[Path, dict[Var, Instruction]] = {p: {} for p in want}
    if not cand:
        return out

    def meet(a, b):
        if a is None:
            return b
        if b is None:
            return a
        if a is _NAC or b is _NAC or a[:2] != b[:2]:
            return _NAC
        return a

    def transfer(bi: int, st: dict, record: bool) -> dict:
        st = dict(st)
        for p, ins in cfg.blocks[bi].instrs:
            if record and p in want:
                out[p] = {v: c[2] for v, c in st.items() if c is not _NAC}
            for v, c in defs_of.get(p, ()):
                if v in cand:
                    st[v] = c if ins.guard is None else meet(st.get(v), c)
        return st

    nb = len(cfg.blocks)
    ins_: list[Optional[dict]] = [None] * nb
    outs: list[Optional[dict]] = [None] * nb
    changed = True
    while changed:
        changed = False
        for i in cfg.rpo():
            st: dict = {}                      # the entry: nothing defined yet (and what its preds bring)
            for pr in cfg.blocks[i].preds:
                o = outs[pr]
                if o is None:
                    continue
                for v in set(st) | set(o):
                    st[v] = meet(st.get(v), o.get(v))
            if st != ins_[i] or outs[i] is None:
                ins_[i] = st
                o2 = transfer(i, st, False)
                if o2 != outs[i]:
                    outs[i] = o2
                    changed = True
    for i in range(nb):
        if ins_[i] is not None and any(p in want for p, _ in cfg.blocks[i].instrs):
            transfer(i, ins_[i], True)
    return out


# pure operations a derived value may be recomputed with (one register source, the rest immediates)
_DERIVE = frozenset({"mov", "cvt", "abs", "neg", "not", "setp", "add", "sub", "mul", "shl", "shr", "and", "or",
                     "xor", "min", "max", "cvta", "selp"})


def derived_values(fn: Function, at: list[Path], lv: Optional[Liveness] = None
                   ) -> dict[Path, dict[Var, tuple[Var, Instruction]]]:
    """For each instruction path in ``at``: the variables ``v`` whose value there is ``f(x)`` for one register ``x``
    that still holds the value ``f`` read -- every definition of ``v`` is the same unguarded ``v = f(x, immediates)``
    (a pure operation, :data:`_DERIVE`), and on no path from one to the point is ``x`` written (a forward dataflow:
    a write of ``x``, guarded or not, marks ``v`` stale until a definition of ``v`` runs again). Each with
    ``(x, that definition)``.
    Recomputing ``v`` after ``x`` is back gives the value ``v`` holds: what a restore can do instead of saving
    ``v`` (ptxas keeps ``|x|``, ``x < 0`` and copies as operands of ``x``, not registers of their own)."""
    lv = lv or liveness(fn)
    cfg = lv.cfg
    want = {tuple(p) for p in at}
    defs: dict[Var, list[tuple[Path, Instruction]]] = {}
    for b in cfg.blocks:
        for p, ins in b.instrs:
            for n in ins.defs():
                v = lv.resolve(p[:-1], n)
                if v is not None:
                    defs.setdefault(v, []).append((p, ins))
    cands: list[tuple[Var, Var, Instruction, list[Path]]] = []   # (v, x, the definition, where it is)
    for v, ds in defs.items():
        p, ins = ds[0]
        # every definition of v the same unguarded v = f(x, immediates) (the native copy repeats the instrumented
        # code's: the same text, the same registers)
        if ins.guard is not None or len(ins.defs()) != 1 or ins.opcode not in _DERIVE or "cc" in ins.modifiers or \
                any(str(i2) != str(ins) or i2.guard is not None or lv.resolve(p2[:-1], v[1]) != v for p2, i2 in ds):
            continue
        srcs = [o for o in ins.operands[1:] if type(o) is not Immediate]
        if len(srcs) != 1 or type(srcs[0]) is not Register:
            continue
        x = lv.resolve(p[:-1], srcs[0].name)
        if x is None or x == v or any(lv.resolve(p2[:-1], srcs[0].name) != x for p2, _ in ds):
            continue
        cands.append((v, x, ins, [p2 for p2, _ in ds]))
    out: dict[Path, dict[Var, tuple[Var, Instruction]]] = {p: {} for p in want}
    if not cands:
        return out
    # bit i: candidate i is stale (its x written since its definition ran)
    by_x: dict[Var, int] = {}
    def_bit: dict[Path, int] = {}
    for i, (v, x, ins, ps) in enumerate(cands):
        by_x[x] = by_x.get(x, 0) | (1 << i)
        for p in ps:
            def_bit[p] = def_bit.get(p, 0) | (1 << i)
    gen: dict[Path, int] = {}
    for b in cfg.blocks:
        for p, ins in b.instrs:
            g = 0
            for n in ins.defs():
                x = lv.resolve(p[:-1], n)
                if x in by_x:
                    g |= by_x[x]
            if g:
                gen[p] = g

    def step(p: Path, st: int) -> int:
        st |= gen.get(p, 0)                     # x written (also by a guarded write: may be)
        return st & ~def_bit.get(p, 0)          # v recomputed from the x it now holds

    nb = len(cfg.blocks)
    ins_ = [0] * nb
    outs: list[Optional[int]] = [None] * nb
    changed = True
    while changed:
        changed = False
        for i in cfg.rpo():
            st = 0
            for pr in cfg.blocks[i].preds:
                st |= outs[pr] or 0
            if outs[i] is None or st != ins_[i]:
                ins_[i] = st
                for p, _ in cfg.blocks[i].instrs:
                    st = step(p, st)
                if st != outs[i]:
                    outs[i] = st
                    changed = True
    for i in range(nb):
        st = ins_[i]
        for p, _ in cfg.blocks[i].instrs:
            if p in want:
                out[p] = {v: (x, replace(ins, guard=None)) for k, (v, x, ins, _) in enumerate(cands)
                          if not (st >> k) & 1}
            st = step(p, st)
    return out
