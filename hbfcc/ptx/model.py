"""The PTX data model: what the parser produces, the printer consumes and passes transform.

Plain frozen dataclasses. Every node compares by value; source positions (``line``) are kept for
messages but never take part in equality, so ``parse(print(m)) == m`` is the round-trip contract.

Shape of a module::

    Module
      version      "9.0"                     (.version)
      target       ("sm_90a",)               (.target, comma list)
      address_size 64                        (.address_size)
      items        top-level items in source order:
                   VarDecl   (.global/.const/.shared/.extern .shared ... declarations)
                   Function  (.entry/.func, declaration or definition)
                   Directive (.file, .section, anything else at top level)
                   Comment

    Function
      linkage      (".visible",) / (".weak",) / (".extern",) / ()
      kind         "entry" | "func"
      name         "kern"
      returns      (Param, ...)              (.func return parameters)
      params       (Param, ...)
      directives   (Directive, ...)          (.maxntid/.reqntid/.minnctapersm/.maxnreg/.noreturn/...)
      body         tuple[Statement, ...] | None   (None = declaration `... ;`)

    Statement = Instruction | Label | VarDecl | Directive | Block | Comment
      VarDecl    .reg/.local/.shared/.param/... declarations inside bodies
      Directive  .loc, .pragma, .branchtargets, .calltargets, .callprototype, ...
      Block      `{ ... }` nested scope (what inline asm emits); labels inside are local to it

    Instruction
      guard      Guard("%p1", negated=False) or None   (@%p1 / @!%p1)
      opcode     first dotted component: "ld", "st", "cp", "mbarrier", "setp", ...
      modifiers  the remaining dotted components in source order, without the dot:
                 ld.global.nc.v4.f32 -> opcode "ld", modifiers ("global", "nc", "v4", "f32")
                 cp.async.bulk.tensor.2d.shared::cluster.global... -> ("async", "bulk", "tensor", "2d", ...)
      operands   tuple[Operand, ...]

    Operand = Register | Negated | PredPair | Immediate | Symbol | LabelRef | Address | Vector | Sink | ArgList
      Register   "%r1", "%tid.x", or a non-% register declared with .reg (e.g. `complete` in inline asm)
      Negated    `!%p` as a source operand (vote, bar.red, ...)
      PredPair   `%p|%q` destination (setp, shfl.sync, elect.sync, ...)
      Immediate  source text kept verbatim ("0f3F800000", "-16", "0x80", "1.0"); ``value`` decodes it
      Symbol     variable / function / parameter name (global_smem, kh_param_0, __hb_on_load)
      LabelRef   branch target of bra/brx (and `.branchtargets`)
      Address    `[base + offset]`, `[base]`, `[imm]`, `[tmap, {c0, c1}]`; base Register | Symbol | None
      Vector     `{a, _, c}`
      Sink       `_`
      ArgList    `(a, b)` in call
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Iterator, Optional, Union

__all__ = [
    "Register", "Negated", "PredPair", "Immediate", "Symbol", "LabelRef", "Address", "Vector", "Sink",
    "ArgList", "Operand", "Guard", "Instruction", "Label", "Directive", "Declarator", "VarDecl",
    "Block", "Comment", "Statement", "Param", "Function", "Module", "TopItem",
    "STATE_SPACES", "SPECIAL_REGISTER_PREFIXES", "iter_instructions", "walk",
]

# --------------------------------------------------------------------------------------------
# Operands
# --------------------------------------------------------------------------------------------

SPECIAL_REGISTER_PREFIXES = (
    "%tid", "%ntid", "%laneid", "%warpid", "%nwarpid", "%ctaid", "%nctaid", "%smid", "%nsmid",
    "%gridid", "%lanemask_", "%clock", "%globaltimer", "%pm", "%envreg", "%dynamic_smem_size",
    "%total_smem_size", "%aggr_smem_size", "%cluster", "%nclusterid", "%is_explicit_cluster",
    "%reserved_smem", "%current_graph_exec",
)


@dataclass(frozen=True, slots=True)
class Register:
    """A register operand. ``name`` is the full text ("%r12", "%tid.x", "complete")."""

    name: str

    @property
    def is_special(self) -> bool:
        """A read-only special register (%tid.x, %globaltimer, ...): never defined by the program."""
        return self.name.startswith(SPECIAL_REGISTER_PREFIXES)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Negated:
    """`!%p` used as a source operand."""

    reg: Register

    def __str__(self) -> str:
        return "!" + self.reg.name


@dataclass(frozen=True, slots=True)
class PredPair:
    """`%p|%q` destination pair (setp, shfl.sync, elect.sync, match.all, ...). Either may be a Sink."""

    first: Union[Register, "Sink"]
    second: Union[Register, "Sink"]

    def __str__(self) -> str:
        return f"{self.first}|{self.second}"


@dataclass(frozen=True, slots=True)
class Immediate:
    """A literal; ``text`` is kept exactly as written (sign included) so printing is lossless."""

    text: str

    @property
    def is_float(self) -> bool:
        t = self.text.lstrip("+-")
        return t[:2] in ("0f", "0F", "0d", "0D") or ("." in t) or (
            ("e" in t or "E" in t) and not t[:2] in ("0x", "0X"))

    @property
    def value(self) -> Union[int, float]:
        """Decoded value: int for integer forms (dec/hex/octal/binary, optional U suffix),
        float for hex floats (``0f`` + 8 hex digits: f32 bits, ``0d`` + 16: f64 bits) and decimal floats."""
        t = self.text
        neg = t.startswith("-")
        body = t.lstrip("+-")
        if body[:2] in ("0f", "0F"):
            v: Union[int, float] = struct.unpack(">f", bytes.fromhex(body[2:]))[0]
        elif body[:2] in ("0d", "0D"):
            v = struct.unpack(">d", bytes.fromhex(body[2:]))[0]
        elif self.is_float:
            v = float(body)
        else:
            b = body.rstrip("uU")
            if b[:2] in ("0x", "0X"):
                v = int(b[2:], 16)
            elif b[:2] in ("0b", "0B"):
                v = int(b[2:], 2)
            elif len(b) > 1 and b[0] == "0":
                v = int(b[1:], 8)
            else:
                v = int(b)
        return -v if neg else v

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class Symbol:
    """A named variable, parameter or function used as an operand (not a register)."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class LabelRef:
    """A branch target (``bra $L__BB0_1``)."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Sink:
    """`_` (discarded result)."""

    def __str__(self) -> str:
        return "_"


@dataclass(frozen=True, slots=True)
class Vector:
    """`{a, b, _, d}`: elements are Register / Immediate / Sink / Symbol."""

    elems: tuple["Operand", ...]

    def __str__(self) -> str:
        return "{" + ", ".join(str(e) for e in self.elems) + "}"


@dataclass(frozen=True, slots=True)
class Address:
    """`[base + offset]`.

    base:   Register (``[%rd2+8]``), Symbol (``[global_smem+128]``, ``[kh_param_0]``) or None (``[1024]``,
            an absolute address: then ``offset`` holds it).
    offset: signed byte offset (``[%rd+-16]`` -> -16).
    coords: the tensor coordinate vector of ``[tmap, {c0, c1}]`` (TMA / tex / surface), else None.
    """

    base: Union[Register, Symbol, None]
    offset: int = 0
    coords: Optional[Vector] = None

    def __str__(self) -> str:
        if self.base is None:
            s = str(self.offset)
        elif self.offset > 0:
            s = f"{self.base}+{self.offset}"
        elif self.offset < 0:
            s = f"{self.base}+{self.offset}"      # "+-16", accepted by ptxas
        else:
            s = str(self.base)
        if self.coords is not None:
            s += ", " + str(self.coords)
        return "[" + s + "]"


@dataclass(frozen=True, slots=True)
class ArgList:
    """`(a, b, ...)` in `call` (return list, argument list)."""

    items: tuple["Operand", ...]

    def __str__(self) -> str:
        return "(" + ", ".join(str(e) for e in self.items) + ")"


Operand = Union[Register, Negated, PredPair, Immediate, Symbol, LabelRef, Address, Vector, Sink, ArgList]


def _regs_in(op: Operand, out: list[str]) -> None:
    """Append register names read when ``op`` is a *source* operand."""
    t = type(op)
    if t is Register:
        out.append(op.name)  # type: ignore[union-attr]
    elif t is Negated:
        out.append(op.reg.name)  # type: ignore[union-attr]
    elif t is Address:
        b = op.base  # type: ignore[union-attr]
        if type(b) is Register:
            out.append(b.name)
        if op.coords is not None:  # type: ignore[union-attr]
            _regs_in(op.coords, out)  # type: ignore[union-attr]
    elif t is Vector:
        for e in op.elems:  # type: ignore[union-attr]
            _regs_in(e, out)
    elif t is ArgList:
        for e in op.items:  # type: ignore[union-attr]
            _regs_in(e, out)
    elif t is PredPair:
        for e in (op.first, op.second):  # type: ignore[union-attr]
            if type(e) is Register:
                out.append(e.name)


def _regs_def(op: Operand, out: list[str]) -> None:
    """Append register names written when ``op`` is a *destination* operand (sinks skipped)."""
    t = type(op)
    if t is Register:
        out.append(op.name)  # type: ignore[union-attr]
    elif t is Vector:
        for e in op.elems:  # type: ignore[union-attr]
            if type(e) is Register:
                out.append(e.name)
    elif t is PredPair:
        for e in (op.first, op.second):  # type: ignore[union-attr]
            if type(e) is Register:
                out.append(e.name)
    elif t is ArgList:
        for e in op.items:  # type: ignore[union-attr]
            if type(e) is Register:
                out.append(e.name)


# --------------------------------------------------------------------------------------------
# Instructions
# --------------------------------------------------------------------------------------------

STATE_SPACES = frozenset({
    "global", "shared", "shared::cta", "shared::cluster", "local", "const", "param",
    "param::entry", "param::func", "tex",
})

# Opcodes whose first operand is NOT a destination (all operands are sources).
_NO_DEF_OPCODES = frozenset({
    "st", "red", "bra", "brx", "ret", "exit", "trap", "brkpt", "cp", "membar", "fence", "prefetch",
    "prefetchu", "nanosleep", "pmevent", "setmaxnreg", "griddepcontrol", "tensormap", "sust",
    "sured", "stmatrix", "applypriority", "discard", "stackrestore", "barrier", "bar", "wmma",
    "multimem", "mbarrier", "tcgen05", "clusterlaunchcontrol",
})
# Families (opcode.first-modifier...) that DO define their first operand although the opcode is
# listed above.
_DEF_FAMILIES_OVERRIDE = (
    ("bar", "red"), ("barrier", "red"), ("wmma", "load"), ("wmma", "mma"),
    ("multimem", "ld_reduce"), ("mbarrier", "arrive"), ("mbarrier", "arrive_drop"),
    ("mbarrier", "test_wait"), ("mbarrier", "try_wait"), ("mbarrier", "pending_count"),
)
# Opcodes whose destination is also read (accumulators).
_DEF_ALSO_USE = frozenset({"wgmma"})

# Memory-touching opcodes (any state space).
_MEMORY_OPCODES = frozenset({
    "ld", "ldu", "st", "atom", "red", "prefetch", "prefetchu", "multimem", "tex", "tld4", "suld",
    "sust", "sured", "ldmatrix", "stmatrix", "mbarrier", "applypriority", "discard",
})

# Multi-component families, longest first, for `Instruction.family`.
_FAMILIES = (
    "cp.async.bulk.prefetch.tensor", "cp.reduce.async.bulk.tensor", "cp.async.bulk.tensor",
    "cp.async.bulk.commit_group", "cp.async.bulk.wait_group", "cp.async.bulk.prefetch",
    "cp.reduce.async.bulk", "cp.async.bulk", "cp.async.commit_group", "cp.async.wait_group",
    "cp.async.wait_all", "cp.async.mbarrier.arrive", "cp.async",
    "tensormap.cp_fenceproxy", "tensormap.replace", "fence.proxy", "st.async", "red.async",
    "st.bulk", "mbarrier.try_wait", "mbarrier.test_wait", "mbarrier.arrive_drop", "mbarrier.arrive",
    "mbarrier.init", "mbarrier.inval", "mbarrier.expect_tx", "mbarrier.complete_tx",
    "mbarrier.pending_count", "barrier.cluster", "elect.sync", "ld.global.nc",
)


@dataclass(frozen=True, slots=True)
class Guard:
    """Guard predicate: `@%p` (negated=False) or `@!%p` (negated=True)."""

    reg: Register
    negated: bool = False

    def __str__(self) -> str:
        return ("@!" if self.negated else "@") + self.reg.name


@dataclass(frozen=True, slots=True)
class Instruction:
    guard: Optional[Guard]
    opcode: str
    modifiers: tuple[str, ...]
    operands: tuple[Operand, ...]
    line: int = field(default=0, compare=False)

    # ---- naming ---------------------------------------------------------------------------
    @property
    def mnemonic(self) -> str:
        """Full dotted mnemonic as written: ``ld.global.nc.v4.f32``."""
        if not self.modifiers:
            return self.opcode
        return self.opcode + "." + ".".join(self.modifiers)

    @property
    def family(self) -> str:
        """The instruction family ignoring qualifiers: ``cp.async.bulk.tensor``, ``cp.async``,
        ``mbarrier.try_wait``, ``fence.proxy``; else the opcode (``ld``, ``st``, ``atom``)."""
        mn = self.mnemonic
        for f in _FAMILIES:
            if mn == f or mn.startswith(f + "."):
                if f == "ld.global.nc":
                    continue
                return f
        return self.opcode

    def has(self, *mods: str) -> bool:
        """True when every modifier in ``mods`` is present (order-insensitive)."""
        m = self.modifiers
        return all(x in m for x in mods)

    # ---- memory ---------------------------------------------------------------------------
    @property
    def is_memory_op(self) -> bool:
        """True for every instruction that reads or writes memory in any state space
        (ld/ldu/st/atom/red, cp.async*, cp.reduce.async*, multimem, tex/surface, ldmatrix/stmatrix,
        mbarrier, prefetch, tensormap.cp_fenceproxy, st.async/red.async/st.bulk)."""
        op = self.opcode
        if op in _MEMORY_OPCODES:
            return True
        if op == "cp" and self.modifiers and self.modifiers[0] in ("async", "reduce"):
            return True
        if op == "tensormap" and self.modifiers and self.modifiers[0] in ("cp_fenceproxy", "replace"):
            return True
        return False

    @property
    def state_space(self) -> Optional[str]:
        """State space of a memory op: the first state-space modifier ("global", "shared::cta",
        "param", ...), ``"generic"`` for a memory op without one (e.g. ``ld.u32 [%rd]``), None for
        non-memory instructions. For copies (cp.async*, which name two spaces) this is the
        *destination*; see :meth:`copy_spaces`."""
        if not self.is_memory_op:
            return None
        for m in self.modifiers:
            if m in STATE_SPACES:
                return m
        return "generic"

    def copy_spaces(self) -> Optional[tuple[str, str]]:
        """(destination space, source space) of a cp.async / cp.async.bulk* / cp.reduce.async*
        instruction (``cp.async.ca.shared.global`` -> ("shared", "global")); None otherwise.
        A missing space (prefetch forms) reads as "generic"."""
        if self.opcode != "cp" or not self.modifiers or self.modifiers[0] not in ("async", "reduce"):
            return None
        spaces = [m for m in self.modifiers if m in STATE_SPACES]
        while len(spaces) < 2:
            spaces.append("generic")
        return spaces[0], spaces[1]

    @property
    def vector_width(self) -> int:
        """1, or 2/4/8 for `.v2/.v4/.v8`."""
        for m in self.modifiers:
            if m in ("v2", "v4", "v8"):
                return int(m[1])
        return 1

    @property
    def address(self) -> Optional[Address]:
        """The first Address operand, if any."""
        for o in self.operands:
            if type(o) is Address:
                return o
        return None

    # ---- control --------------------------------------------------------------------------
    @property
    def is_branch(self) -> bool:
        return self.opcode == "bra"

    @property
    def branch_target(self) -> Optional[str]:
        """The label name of `bra` (None for other instructions)."""
        if self.opcode == "bra" and self.operands and type(self.operands[0]) is LabelRef:
            return self.operands[0].name  # type: ignore[union-attr]
        return None

    @property
    def call_target(self) -> Optional[str]:
        """The function a direct `call` names (its first symbol, after the return list); None for an
        indirect call (through a register) or another instruction."""
        if self.opcode != "call":
            return None
        for o in self.operands:
            if type(o) is Symbol:
                return o.name
            if type(o) is Register:
                return None
        return None

    @property
    def is_terminator(self) -> bool:
        """Ends a basic block: bra, brx.idx, ret, exit, trap."""
        return self.opcode in ("bra", "brx", "ret", "exit", "trap")

    # ---- dataflow -------------------------------------------------------------------------
    def _defines_first(self) -> bool:
        op = self.opcode
        if op == "call":
            return False
        if op in _NO_DEF_OPCODES:
            if self.modifiers:
                m0 = self.modifiers[0]
                for a, b in _DEF_FAMILIES_OVERRIDE:
                    if a == op and m0 == b:
                        return True
            return False
        return True

    def defs(self) -> tuple[str, ...]:
        """Register names this instruction writes (sinks skipped; a vector destination yields each
        element; `p|q` yields both). `call`: registers in the return ArgList. A guarded instruction
        writes them only when the guard holds -- callers decide what that means for liveness."""
        ops = self.operands
        if not ops:
            return ()
        out: list[str] = []
        if self.opcode == "call":
            if type(ops[0]) is ArgList:
                _regs_def(ops[0], out)
            return tuple(out)
        if self._defines_first():
            _regs_def(ops[0], out)
        return tuple(out)

    def uses(self) -> tuple[str, ...]:
        """Register names this instruction reads: the guard predicate, every source operand
        (address bases, tensor coordinates, vector elements, negated predicates), and the
        destination too for accumulating instructions (wgmma)."""
        out: list[str] = []
        if self.guard is not None:
            out.append(self.guard.reg.name)
        ops = self.operands
        if not ops:
            return tuple(out)
        if self.opcode == "call":
            start = 1 if type(ops[0]) is ArgList and len(ops) > 1 and type(ops[1]) is not ArgList else 0
            for o in ops[start:]:
                _regs_in(o, out)
            return tuple(out)
        if self._defines_first() and self.opcode not in _DEF_ALSO_USE:
            rest = ops[1:]
        else:
            rest = ops
        for o in rest:
            _regs_in(o, out)
        return tuple(out)

    def __str__(self) -> str:
        from .printer import format_instruction
        return format_instruction(self)


# --------------------------------------------------------------------------------------------
# Other statements
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Label:
    name: str
    line: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class Directive:
    """A directive kept as tokens: ``.loc 1 42 7`` -> Directive("loc", ("1", "42", "7")).

    ``name`` has no dot. ``args`` are the token texts (strings keep their quotes; commas are tokens).
    At top level, ``.section`` is kept as Directive("section", (name,), raw=<text between braces>).
    """

    name: str
    args: tuple[str, ...] = ()
    raw: Optional[str] = None
    line: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class Declarator:
    """One declared name: ``%r<45>`` (count=45), ``smem[1024]`` (dims=(1024,)), ``x[]`` (dims=(None,)),
    with an optional initializer kept as token text (``= {1, 2}``)."""

    name: str
    count: Optional[int] = None
    dims: tuple[Optional[int], ...] = ()
    init: Optional[tuple[str, ...]] = None

    def names(self) -> tuple[str, ...]:
        """Expanded register names (``%r<3>`` -> %r0, %r1, %r2)."""
        if self.count is None:
            return (self.name,)
        return tuple(f"{self.name}{i}" for i in range(self.count))


@dataclass(frozen=True, slots=True)
class VarDecl:
    """A variable declaration, at top level or inside a body.

    linkage:   (".extern",), (".visible",), (".weak",), (".common",) or ()
    space:     "reg", "local", "shared", "global", "const", "param", "tex", "sreg"
    attrs:     the other attributes between space and type, in source order, as strings:
               (".align 16",), (".v4",), (".attribute(.managed)",)
    type:      ".b32", ".pred", ".u64", ".b8", ...
    decls:     the declared names
    """

    linkage: tuple[str, ...]
    space: str
    attrs: tuple[str, ...]
    type: str
    decls: tuple[Declarator, ...]
    line: int = field(default=0, compare=False)

    @property
    def align(self) -> Optional[int]:
        for a in self.attrs:
            if a.startswith(".align "):
                return int(a.split()[1], 0)
        return None


@dataclass(frozen=True, slots=True)
class Comment:
    """A comment, kept verbatim including its markers (``// begin inline asm``, ``/* ... */``)."""

    text: str
    line: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class Block:
    """`{ ... }` nested scope. Labels and .reg names declared inside are local to it."""

    body: tuple["Statement", ...]
    line: int = field(default=0, compare=False)


Statement = Union[Instruction, Label, VarDecl, Directive, Block, Comment]


# --------------------------------------------------------------------------------------------
# Functions and modules
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Param:
    """A function parameter: ``.param .u64 .ptr .global .align 1 k_param_0``,
    ``.param .align 64 .b8 tm[128]``, ``.reg .b32 x``.

    space:      "param" or "reg"
    type:       ".u64", ".b8", ...
    name:       "k_param_0"
    align:      .align N (None when absent)
    dims:       array dims (``[128]`` -> (128,), ``[]`` -> (None,))
    ptr_space:  for ``.ptr``: the pointed-to space ("global", "shared", "const", "local") or "" for a
                bare ``.ptr``; None when the param is not declared ``.ptr``
    ptr_align:  ``.ptr ... .align N`` (the alignment attached to .ptr)
    """

    space: str
    type: str
    name: str
    align: Optional[int] = None
    dims: tuple[Optional[int], ...] = ()
    ptr_space: Optional[str] = None
    ptr_align: Optional[int] = None

    @property
    def size_bytes(self) -> int:
        """Bytes the parameter occupies (element size x array elements; .pred counts 1)."""
        t = self.type.lstrip(".")
        bits = 8 if t == "pred" else int("".join(ch for ch in t if ch.isdigit()) or "8")
        n = 1
        for d in self.dims:
            n *= (d or 0)
        return max(1, bits // 8) * n


@dataclass(frozen=True, slots=True)
class Function:
    linkage: tuple[str, ...]
    kind: str                                 # "entry" | "func"
    name: str
    returns: tuple[Param, ...]
    params: tuple[Param, ...]
    directives: tuple[Directive, ...]
    body: Optional[tuple[Statement, ...]]     # None for a declaration (prototype only)
    line: int = field(default=0, compare=False)
    # ``.func (...) name (...) .noreturn`` and friends are in ``directives``.

    @property
    def is_entry(self) -> bool:
        return self.kind == "entry"

    @property
    def is_declaration(self) -> bool:
        return self.body is None

    def instructions(self) -> Iterator[Instruction]:
        """Every instruction in the body, nested blocks included, in source order."""
        if self.body is not None:
            yield from iter_instructions(self.body)


TopItem = Union[VarDecl, Function, Directive, Comment]


@dataclass(frozen=True, slots=True)
class Module:
    version: str                       # "9.0"
    target: tuple[str, ...]            # ("sm_90a",) ; extra entries such as "debug" kept in order
    address_size: int                  # 64
    items: tuple[TopItem, ...]
    header_comments: tuple[Comment, ...] = ()   # comments before .version (compiler banners)

    def functions(self) -> Iterator[Function]:
        for it in self.items:
            if type(it) is Function:
                yield it

    def function(self, name: str) -> Function:
        for f in self.functions():
            if f.name == name and f.body is not None:
                return f
        for f in self.functions():
            if f.name == name:
                return f
        raise KeyError(name)

    def entries(self) -> Iterator[Function]:
        for f in self.functions():
            if f.kind == "entry" and f.body is not None:
                yield f

    def globals(self) -> Iterator[VarDecl]:
        for it in self.items:
            if type(it) is VarDecl:
                yield it


def iter_instructions(body: tuple[Statement, ...]) -> Iterator[Instruction]:
    """Instructions of a body in source order, descending into Blocks."""
    for s in body:
        t = type(s)
        if t is Instruction:
            yield s  # type: ignore[misc]
        elif t is Block:
            yield from iter_instructions(s.body)  # type: ignore[union-attr]


def walk(body: tuple[Statement, ...], path: tuple[int, ...] = ()) -> Iterator[tuple[tuple[int, ...], Statement]]:
    """Every statement with its position path (indices into nested Blocks), in source order.
    ``(3, 1)`` is statement 1 of the Block at body[3]. A Block is yielded before its contents."""
    for i, s in enumerate(body):
        p = path + (i,)
        yield p, s
        if type(s) is Block:
            yield from walk(s.body, p)  # type: ignore[union-attr]


def _fast_pickling(cls: type) -> None:
    """A frozen slotted dataclass's pickle state as a tuple in field order, restored without the per-object
    ``dataclasses.fields()`` walk of the generated ``__setstate__`` (the prepared helper module that every
    hbfcc-ptxas process loads, hbfcc/helpers.py, is ~30k nodes: that walk was most of its load time)."""
    import dataclasses
    names = tuple(f.name for f in dataclasses.fields(cls))

    def __getstate__(self):
        return tuple(getattr(self, n) for n in names)

    def __setstate__(self, state):
        for n, v in zip(names, state):
            object.__setattr__(self, n, v)

    cls.__getstate__, cls.__setstate__ = __getstate__, __setstate__


for _cls in list(globals().values()):
    if isinstance(_cls, type) and _cls.__module__ == __name__ and hasattr(_cls, "__dataclass_fields__") \
            and getattr(_cls, "__slots__", None) is not None and _cls.__dataclass_params__.frozen:
        _fast_pickling(_cls)
del _cls
