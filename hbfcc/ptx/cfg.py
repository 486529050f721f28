"""Control-flow graph over a function body.

Basic blocks are maximal runs of instructions in *linear* source order (nested ``{ }`` blocks are
scopes, not control flow: execution flows into and out of them). Leaders: the first instruction,
every label's next instruction, and the instruction after a terminator (``bra``, ``brx``, ``ret``,
``exit``, ``trap``).

Edges:
  * ``bra L`` / ``bra.uni L``: to L only; ``@p bra L``: to L and fall-through.
  * ``ret`` / ``exit`` / ``trap``: none (an exit block); guarded: fall-through only.
  * ``brx.idx r, tbl``: every label of the ``tbl: .branchtargets ...`` list in scope (+ fall-through
    when guarded); when the table cannot be resolved the CFG records it in ``unsupported`` and
    conservatively adds an edge to every label of the function.
  * otherwise fall-through to the next block; falling off the end is an exit.

Labels are scoped: a branch resolves its target in the innermost enclosing ``{ }`` scope that
declares it, then outward, so inline-asm blocks may each declare ``waitLoop``. A label that no
instruction follows (at the very end) targets an empty exit block.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Optional

from hbfcommon.errors import PtxError

from .model import Block, Comment, Directive, Function, Instruction, Label, LabelRef, Statement, Symbol

__all__ = ["BasicBlock", "CFG", "build_cfg", "Path"]

Path = tuple[int, ...]   # position of a statement: indices into the body and nested Blocks


@dataclass
class BasicBlock:
    index: int
    instrs: list[tuple[Path, Instruction]] = field(default_factory=list)
    labels: list[tuple[Path, str]] = field(default_factory=list)   # labels that start this block
    succs: list[int] = field(default_factory=list)
    preds: list[int] = field(default_factory=list)

    @property
    def first_path(self) -> Optional[Path]:
        return self.instrs[0][0] if self.instrs else None

    @property
    def last(self) -> Optional[Instruction]:
        return self.instrs[-1][1] if self.instrs else None

    @property
    def is_exit(self) -> bool:
        """No successors: ends in an unguarded ret/exit/trap, or falls off the end of the function."""
        return not self.succs

    @property
    def may_exit(self) -> bool:
        """Control may leave the function from this block: no successors, or it ends in a guarded
        ``@p ret`` / ``@p exit`` / ``@p trap`` (which also falls through)."""
        if not self.succs:
            return True
        last = self.last
        return last is not None and last.opcode in ("ret", "exit", "trap")


@dataclass
class CFG:
    function: Function
    blocks: list[BasicBlock]
    entry: int
    unsupported: list[tuple[Path, str]]
    _block_of: dict[Path, int]
    _linear: list[tuple[Path, Statement]]

    def block_of(self, path: Path) -> int:
        """Block index of the statement at ``path``. Instructions map to their block; labels,
        directives, declarations and comments map to the block of the next instruction in linear
        order (the last block when none follows)."""
        try:
            return self._block_of[tuple(path)]
        except KeyError:
            raise KeyError(f"no statement at {path}") from None

    def successors(self, i: int) -> list[int]:
        return self.blocks[i].succs

    def predecessors(self, i: int) -> list[int]:
        return self.blocks[i].preds

    def exits(self) -> list[int]:
        """Blocks from which control may leave the function (see BasicBlock.may_exit)."""
        return [b.index for b in self.blocks if b.may_exit]

    def rpo(self) -> list[int]:
        """Reverse post-order from the entry (unreachable blocks appended in index order)."""
        if not self.blocks:
            return []
        seen = [False] * len(self.blocks)
        order: list[int] = []
        stack: list[tuple[int, Iterator[int]]] = [(self.entry, iter(self.blocks[self.entry].succs))]
        seen[self.entry] = True
        while stack:
            b, it = stack[-1]
            for s in it:
                if not seen[s]:
                    seen[s] = True
                    stack.append((s, iter(self.blocks[s].succs)))
                    break
            else:
                stack.pop()
                order.append(b)
        order.reverse()
        order.extend(i for i in range(len(self.blocks)) if not seen[i])
        return order

    def linear(self) -> list[tuple[Path, Statement]]:
        """Every non-Block statement with its path, in linear source order."""
        return self._linear

    def instruction_graph(self) -> tuple[list[tuple[Path, Instruction]], list[list[int]]]:
        """The same graph at instruction level (what an instruction-precise dataflow walks):
        every instruction with its path, in linear source order, and each one's successors as
        indices into that list. Inside a block an instruction flows to the next; the last one of
        a block to the first instruction of each successor block (the empty end block has none)."""
        nodes: list[tuple[Path, Instruction]] = []
        first: list[int] = []
        for b in self.blocks:
            first.append(len(nodes))
            nodes.extend(b.instrs)
        succ: list[list[int]] = []
        for b in self.blocks:
            if not b.instrs:
                continue
            start = len(succ)
            succ.extend([start + k + 1] for k in range(len(b.instrs) - 1))
            succ.append([first[s] for s in b.succs if self.blocks[s].instrs])
        return nodes, succ


def _linearize(body: tuple, path: Path, out: list) -> None:
    for i, s in enumerate(body):
        p = path + (i,)
        if type(s) is Block:
            _linearize(s.body, p, out)
        else:
            out.append((p, s))


def _err(msg: str, fn: Function, stmt) -> PtxError:
    line = getattr(stmt, "line", 0) or 0
    return PtxError(f"{fn.name}: {msg}", line=line, column=0, function=fn.name)


def build_cfg(fn: Function) -> CFG:  # noqa: C901
    if fn.body is None:
        raise PtxError(f"{fn.name} is a declaration, it has no body", line=fn.line, column=0)
    linear: list[tuple[Path, Statement]] = []
    _linearize(fn.body, (), linear)

    # labels per scope (scope = path of the enclosing Block; () is the function body)
    scopes: dict[Path, dict[str, int]] = {}          # scope -> label -> linear index
    branchtargets: dict[Path, dict[str, tuple[str, ...]]] = {}
    all_labels: list[int] = []
    prev_label: Optional[tuple[Path, str]] = None
    for li, (p, s) in enumerate(linear):
        t = type(s)
        if t is Label:
            sc = scopes.setdefault(p[:-1], {})
            if s.name in sc:
                raise _err(f"duplicate label {s.name!r} in one scope", fn, s)
            sc[s.name] = li
            all_labels.append(li)
            prev_label = (p[:-1], s.name)
            continue
        if t is Directive and s.name == "branchtargets" and prev_label is not None:
            branchtargets.setdefault(prev_label[0], {})[prev_label[1]] = tuple(
                a for a in s.args if a != ",")
        if t is not Comment:
            prev_label = None

    instr_idx = [li for li, (_, s) in enumerate(linear) if type(s) is Instruction]
    n_instr = len(instr_idx)
    # map linear index -> instruction ordinal of the next instruction at or after it
    next_instr = [n_instr] * (len(linear) + 1)
    k = n_instr
    pos_of = {li: j for j, li in enumerate(instr_idx)}
    for li in range(len(linear) - 1, -1, -1):
        if li in pos_of:
            k = pos_of[li]
        next_instr[li] = k

    def resolve(scope: Path, name: str, stmt) -> int:
        """Instruction ordinal that label ``name`` designates, seen from ``scope``."""
        sc = scope
        while True:
            d = scopes.get(sc)
            if d is not None and name in d:
                return next_instr[d[name]]
            if not sc:
                break
            sc = sc[:-1]
        raise _err(f"branch target {name!r} is not a label in scope", fn, stmt)

    def resolve_table(scope: Path, name: str) -> Optional[tuple[str, ...]]:
        sc = scope
        while True:
            d = branchtargets.get(sc)
            if d is not None and name in d:
                return d[name]
            if not sc:
                return None
            sc = sc[:-1]

    # leaders (instruction ordinals); n_instr means "the empty end block"
    leaders = {0} if n_instr else set()
    targets: dict[int, list[int]] = {}   # instruction ordinal -> target ordinals
    unsupported: list[tuple[Path, str]] = []
    for li in all_labels:
        leaders.add(next_instr[li])
    for j, li in enumerate(instr_idx):
        p, ins = linear[li]
        op = ins.opcode
        if op == "bra":
            tgt = ins.operands[0] if ins.operands else None
            if type(tgt) is not LabelRef:
                raise _err(f"bra without a label operand: {ins.mnemonic}", fn, ins)
            targets[j] = [resolve(p[:-1], tgt.name, ins)]
            leaders.add(j + 1)
        elif op == "brx":
            tbl = ins.operands[1] if len(ins.operands) > 1 else None
            names = None
            if type(tbl) in (LabelRef, Symbol):
                names = resolve_table(p[:-1], tbl.name)
            if names is None:
                unsupported.append((p, f"brx.idx table {tbl!s} not resolved: edges to every label"))
                targets[j] = sorted({next_instr[x] for x in all_labels})
            else:
                targets[j] = [resolve(p[:-1], nm, ins) for nm in names]
            leaders.add(j + 1)
        elif op in ("ret", "exit", "trap"):
            targets[j] = []
            leaders.add(j + 1)
    has_end_block = n_instr == 0 or any(n_instr in ts for ts in targets.values())
    leaders.discard(n_instr)
    order = sorted(leaders)
    if has_end_block:
        order.append(n_instr)
    block_start = {o: bi for bi, o in enumerate(order)}
    blocks = [BasicBlock(bi) for bi in range(len(order))]
    instr_block = [0] * n_instr
    for bi, start in enumerate(order):
        end = order[bi + 1] if bi + 1 < len(order) else n_instr
        for j in range(start, min(end, n_instr)):
            instr_block[j] = bi
            li = instr_idx[j]
            blocks[bi].instrs.append((linear[li][0], linear[li][1]))  # type: ignore[arg-type]
    for li in all_labels:
        p, s = linear[li]
        bi = block_start.get(next_instr[li])
        if bi is not None:
            blocks[bi].labels.append((p, s.name))  # type: ignore[union-attr]

    def add_edge(a: int, b: int) -> None:
        if b not in blocks[a].succs:
            blocks[a].succs.append(b)
            blocks[b].preds.append(a)

    for bi, blk in enumerate(blocks):
        if not blk.instrs:
            continue  # the empty end block: an exit
        last_j = order[bi] + len(blk.instrs) - 1
        ins = blk.instrs[-1][1]
        fall = bi + 1 if bi + 1 < len(blocks) else None
        if last_j in targets:
            for t in targets[last_j]:
                add_edge(bi, block_start[t])
            if ins.guard is not None and fall is not None:
                add_edge(bi, fall)
        elif fall is not None:
            add_edge(bi, fall)

    block_of: dict[Path, int] = {}
    last_block = len(blocks) - 1
    for li, (p, s) in enumerate(linear):
        j = next_instr[li]
        if j < n_instr:
            block_of[p] = instr_block[j]
        else:
            block_of[p] = max(last_block, 0)
    # Block statements themselves map to the block of their first inner statement
    for p, s in _walk_blocks(fn.body, ()):
        block_of[p] = _first_inner_block(s, p, block_of, last_block)
    return CFG(fn, blocks, 0, unsupported, block_of, linear)


def _walk_blocks(body: tuple, path: Path):
    for i, s in enumerate(body):
        if type(s) is Block:
            yield path + (i,), s
            yield from _walk_blocks(s.body, path + (i,))


def _first_inner_block(b: Block, p: Path, block_of: dict, last_block: int) -> int:
    for i, s in enumerate(b.body):
        q = p + (i,)
        if q in block_of and type(s) is not Block:
            return block_of[q]
        if type(s) is Block:
            return _first_inner_block(s, q, block_of, last_block)
    return max(last_block, 0)
