"""The timing rewrite: every memory operation that can reach global memory is classified and either
rewritten to call the runtime_cuda helpers (hbf_abi.h) or refused with a reason.

Issue is not consumption (DESIGN.md §3.3):

* At each rewritten access site the effective address is computed into a temporary and checked
  inline against the fast-reject band (``addr - lo < span``; ``{lo, span}`` are the first 16 bytes
  of the device state block, read once at kernel entry; span is 0 when the module is detached or
  nothing is registered). Lanes in band call ``__hb_issue(addr, bytes, flags, site)``
  (``HBF_F_ACTIVE`` computed from the guard with ``selp``); lanes out of band keep future 0 — the
  native path never calls a helper. The original instruction follows, unchanged, with its guard.
* Loads: the returned future goes into a per-site register ``%__hb_f<k>``. A may-pending forward
  dataflow over the instruction-level CFG (state: register -> set of sites whose future may still
  be pending for it) places ``__hb_wait(%__hb_f<k>)`` before every instruction that may read a
  destination register while its future may be pending (fixpoint over loops). A wait carries the
  guard of the reading instruction; a *guarded* wait does not clear the may-pending state (the
  lanes where the guard was false still have it pending: the predicated-use counterexample).
  An unguarded wait clears the future (``%__hb_f<k> = 0``, so later waits on it are free).
* Overwrite rule: an unguarded write of a register ends its may-pending state without a wait (the
  loaded value is gone; nothing can consume it); a guarded write keeps it (the old value may
  survive). A guarded load site updates its future register only where the guard holds
  (``@g mov``), so a register that keeps its old value keeps its old future.
* ``.volatile``/``.acquire``/``.mmio`` loads and ``atom`` wait at once (``HBF_F_WAIT_NOW``).
* Merged requests (HBFCC_MERGE_LOADS, ``_merge_sets``): adjacent plain global loads of one issue group whose
  addresses are one register plus constants within one read granule are booked as ONE inline request of their
  span (one request, the span's granules, every member's bytes; each member's future the group's deadline), as the
  L1 serves them; a span or a candidate address not proven is checked per lane, and a failed check is the group's
  per-site fallback.
* Stores (and ``red``) are posted: their futures are joined (``__hb_future_join``) into a per-thread
  drain register, waited at fences (membar/fence; not a shared-memory proxy fence), ``.release``/``.acq_rel`` operations, atomics,
  ``ret`` and ``exit``.
* ``cp.async``: each copy's future is joined into the open group; ``commit_group`` shifts the open
  group into a window of K group registers (newest first; the oldest register accumulates every
  older group); ``wait_group N`` waits for every register holding groups older than the N newest;
  ``wait_all`` waits for all. K = max(HBFCC_CPASYNC_WINDOW, largest N + 1), so the window is exact.
* TMA and the bulk async copies (``cp.async.bulk*``, ``cp.reduce.async.bulk*``, bulk prefetch,
  ``cp.async.mbarrier.arrive``, global ``tensormap`` writes): :mod:`hbfcc.passes.tma` classifies them; an
  admitted copy calls ``__hb_tma`` before the native copy, mbarrier-tracked completions are enforced at
  the program's ``mbarrier.try_wait``/``test_wait`` (``__hb_mbar_wait``, a per-CTA table), bulk stores and
  reductions wait at ``cp.async.bulk.wait_group`` (a window like cp.async's) and at every exit.
* multimem and texture/surface accesses are refused with a precise reason; the kernel is then not admitted.
* ``__hb_kernel_enter(k)`` at the top of each ``.entry``, ``__hb_kernel_exit(k)`` before its
  ``ret``/``exit``.
* Code versioning: every function with access sites keeps an untouched copy of its original body
  (labels renamed ``*_hbn``, its own declarations shared) after the instrumented one; right after the
  prologue, a launch with nothing registered (span == 0, which includes a detached module) branches
  to it uniformly. The native path therefore runs the plain instruction stream; only the register
  count (one per kernel) is shared, which hbfcc-ptxas's occupancy guard (hbfcc/occupancy.py) bounds.
"""
from __future__ import annotations

import functools
import logging
import re
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Optional

from hbfcommon import abi
from hbfcommon.errors import RewriteError

from hbfcc import link
from hbfcc.admission import SYSTEM_CALLS, admit, not_seen_by_rewrite
from hbfcc.ptx.cfg import build_cfg
from hbfcc.passes import tma as T
from hbfcc.passes.provenance import address_provenance
from hbfcc.ptx.model import (Address, ArgList, Block, Comment, Declarator, Directive, Function,
                             Guard, Immediate, Instruction, Label, LabelRef, Module, Negated, Register, Statement,
                             Symbol, VarDecl, Vector, walk)

log = logging.getLogger(__name__)

PASS_NAME = "timing"

_TYPE_BYTES = {
    "b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2,
    "b32": 4, "u32": 4, "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "tf32": 4,
    "b64": 8, "u64": 8, "s64": 8, "f64": 8, "b128": 16, "e4m3x2": 2, "e5m2x2": 2,
}
_32BIT_TYPES = frozenset({".b32", ".u32", ".s32", ".f32"})
NATIVE_SPACES = ("shared", "shared::cta", "shared::cluster", "local", "param", "param::entry",
                 "param::func", "const")

# scratch registers (function scope); every name starts with %__hb_
R_ADDR, R_TMP, R_DRAIN, R_FLAGS, R_PRED, R_NOW = "%__hb_a", "%__hb_t", "%__hb_d", "%__hb_fl", "%__hb_q", "%__hb_w"
R_FUT, R_GRP = "%__hb_f", "%__hb_g"
R_STATE, R_OFF, R_ZERO = "%__hb_s", "%__hb_off", "%__hb_z"
R_LO, R_SPAN, R_BAND, R_OUT, R_NONE = "%__hb_lo", "%__hb_span", "%__hb_b", "%__hb_o", "%__hb_n"
# the inline issue path (entries only, hbf_abi.h "Inline issue"): per-op until, the thread's counters, temps
R_IUR, R_IUW = "%__hb_iur", "%__hb_iuw"                                   # .b64 until (loads, stores)
R_ICR, R_IGR, R_ICW, R_IRW = "%__hb_icr", "%__hb_igr", "%__hb_icw", "%__hb_irw"   # .b32 counters
R_IBR, R_IBW, R_ISL = "%__hb_ibr", "%__hb_ibw", "%__hb_isl"               # .b64 counters
R_IT, R_IX, R_IY = "%__hb_it", "%__hb_ix", "%__hb_iy"                    # .b64 temps
R_IR = "%__hb_rp"                         # .b64 the multi-range table walk's pointer (_table_walk)
R_IM, R_IL, R_IK, R_IP, R_IQ, R_IH = ("%__hb_im", "%__hb_il", "%__hb_ik", "%__hb_ip", "%__hb_iq",
                                      "%__hb_ih")                          # .b32 temps
R_IPA, R_IPB, R_IPL = "%__hb_ipa", "%__hb_ipb", "%__hb_ipl"               # .pred temps
R_IFW = "%__hb_ifw"                       # .pred the whole warp is in the path's group (HBFCC_FULL_WARP)
FULL_MASK = "0xffffffff"                  # a collective's membermask where the whole warp takes part
R_INS = "%__hb_ins"                       # .b64 the inline path's own time (HBFCC_INLINE_TIME; the leader lane's)
R_LMLT = "%__hb_lmlt"                     # .b32 %lanemask_lt, read once at entry (S2R is slow)
INLINE_BYTES = frozenset((1, 2, 4, 8, 16, 32))   # access sizes an inline site serves (one granule >= 32 B)
# issue groups (HBFCC_GROUP_ISSUES, _group_code): adjacent inline load issues served together
R_GA, R_GP = "%__hb_ga", "%__hb_gp"                                       # per slot: .b64 address, .pred lane accesses
R_GANY, R_GOK, R_CDB, R_GIN = "%__hb_gany", "%__hb_gok", "%__hb_cdb", "%__hb_gin"   # .pred
R_GZ = "%__hb_gz"                                                          # .b64 the band's guard zone
R_GW = "%__hb_gw"               # .pred a lane of the warp accesses the group (HBFCC_LOADS_FIRST: across the loads)
GAL = "__hb_gal"                        # .local .b8 [8 x GROUP_MAX]: a group's addresses for __hb_issue_group
R_GC, R_GG, R_GB = "%__hb_gc", "%__hb_gg", "%__hb_gbn"                    # .b32 the group's counts
GROUP_MAX = 8      # sites per group (bounds the per-slot predicates live across it)
# HBFCC_LOADS_FIRST=1 and HBFCC_FULL_WARP=1 act on issue groups of at most this many sites: in a larger group the
# loads' registers (loads first: live across the group's timing code and its helper calls) and the full-mask
# collectives (full warp: without the per-lane check's branches ptxas schedules the sites' work together) cost
# registers -- on the devpath kernels (ptxas 13, sm_90a) groups of 8 sites (the unrolled reduce, the Little kernels)
# went 128 -> 166-168 / 168 -> 214-234 registers and ran slower (H100, stop 53: sreduce x1.75 -> x2.06-2.26); at
# <= 4 sites no kernel's count moved
SMALL_GROUP_SITES = 4


def group_scope(v) -> int:
    """HBFCC_LOADS_FIRST / HBFCC_FULL_WARP as the pass takes them (meta): the largest issue group they act on --
    0 (off: "0", False), SMALL_GROUP_SITES ("1"), GROUP_MAX ("all", True: every group). The defaults: HBFCC_FULL_WARP
    "1", HBFCC_LOADS_FIRST "0" (hbfcc/knobs.py)."""
    if v is True or v == "all":
        return GROUP_MAX
    if v in (False, "0", 0):
        return 0
    if v in ("1", 1, "auto"):        # auto (HBFCC_FULL_WARP): 1 here; hbfcc/cli.py's second build names the kernels
        return SMALL_GROUP_SITES     # that get `all` (meta full_warp_all)
    raise RewriteError(f"group scope must be 0, 1 or all (HBFCC_FULL_WARP also auto), not {v!r}")


# TMA (hbfcc/passes/tma.py): the completion table's address, temps, the bulk-group window, the thread's
# cp.async copies since its last cp.async.mbarrier.arrive, the token-form waits' phase parities
R_TBL, R_MB, R_TM, R_TA = "%__hb_tbl", "%__hb_mb", "%__hb_tm", "%__hb_ta"   # .b32, .b32, .b32, .b64
R_BG, R_CPALL, R_TK, R_TQ = "%__hb_bg", "%__hb_cpall", "%__hb_tk", "%__hb_tq"   # .b64 [K], .b64, .b32 [n], .pred


# --------------------------------------------------------------------------------------------
# Classification
# --------------------------------------------------------------------------------------------

@dataclass
class Decision:
    cls: str                         # memory-operation class: "ld.global", "st.generic", "cp.async", ...
    action: str                      # "rewritten" | "native" | "refused"
    reason: str = ""
    kind: Optional[str] = None       # site kind: load | store | atomic | red | cpasync
    flags: int = 0
    nbytes: int = 0
    addr: Optional[Address] = None
    generic_symbol_global: bool = False
    tma: Optional[T.TmaForm] = None  # kind "tma" (a __hb_tma site), "mbwait", "cpa_arrive"


_FAM_OPS = frozenset({"cp", "tensormap", "fence", "st", "red", "mbarrier", "barrier", "elect"})


def _family(inst: Instruction) -> str:
    """``inst.family`` without its cost for the common opcodes (it only differs for these)."""
    op = inst.opcode
    if op not in _FAM_OPS:
        return op
    if op in ("st", "red") and not (inst.modifiers and inst.modifiers[0] in ("async", "bulk")):
        return op
    return inst.family


def _type_bytes(inst: Instruction) -> Optional[int]:
    for m in reversed(inst.modifiers):
        if m in _TYPE_BYTES:
            return _TYPE_BYTES[m]
    return None




class _Ctx:
    """Per-function facts the classifier needs."""

    def __init__(self, module: Module, fn: Function):
        self.sym_space: dict[str, str] = {}
        for it in module.items:
            if type(it) is VarDecl:
                for d in it.decls:
                    self.sym_space[d.name] = it.space
        for p in fn.params + fn.returns:
            self.sym_space[p.name] = "param" if p.space == "param" else "reg"
        self.reg_exact: dict[str, str] = {}
        self.reg_family: dict[str, str] = {}
        self.has_cp_async_mbarrier = False
        self.has_cp_async_commit = False
        self.max_wait_group = 0
        self.max_bulk_wait_group = 0
        self.has_bulk_group = False       # a bulk store / reduction into global memory (bulk_group)
        self.tracks = False               # the module has mbarrier-tracked copies: waits are hooked
        self.reg_def_fams: dict[str, set[str]] = {}   # register -> families of the instructions writing it
        for _, s in walk(fn.body or ()):
            t = type(s)
            if t is VarDecl:
                if s.space == "reg":
                    for d in s.decls:
                        if d.count is not None:
                            self.reg_family[d.name] = s.type
                        else:
                            self.reg_exact[d.name] = s.type
                else:
                    for d in s.decls:
                        self.sym_space[d.name] = s.space
            elif t is Instruction:
                fam = _family(s)
                if fam == "cp.async.mbarrier.arrive":
                    self.has_cp_async_mbarrier = True
                elif fam in ("cp.async.commit_group", "cp.async.wait_all"):
                    self.has_cp_async_commit = True
                elif fam == "cp.async.wait_group" and s.operands and type(s.operands[0]) is Immediate:
                    self.max_wait_group = max(self.max_wait_group, int(s.operands[0].value))
                elif fam == "cp.async.bulk.wait_group" and s.operands and type(s.operands[0]) is Immediate:
                    self.max_bulk_wait_group = max(self.max_bulk_wait_group, int(s.operands[0].value))
                elif fam in ("cp.async.bulk", "cp.async.bulk.tensor", "cp.reduce.async.bulk",
                             "cp.reduce.async.bulk.tensor") and "bulk_group" in s.modifiers:
                    self.has_bulk_group = True
                for r in s.defs():
                    self.reg_def_fams.setdefault(r, set()).add(fam)

    def reg_type(self, name: str) -> Optional[str]:
        t = self.reg_exact.get(name)
        if t is not None:
            return t
        m = re.match(r"^(.*?)(\d+)$", name)
        if m:
            return self.reg_family.get(m.group(1))
        return None


def classify(inst: Instruction, ctx: _Ctx) -> Optional[Decision]:
    """The memory-operation class of ``inst`` and what the pass does with it; None when ``inst`` is
    not a memory operation."""
    op = inst.opcode
    mods = inst.modifiers
    fam = _family(inst)
    if op in _TMA_OPS:
        d = _classify_tma(inst, ctx)
        if d is not False:
            return d
    if op in ("ld", "ldu", "st"):
        space = inst.state_space or "generic"
        if fam in ("st.async", "st.bulk"):
            if fam == "st.bulk":
                return Decision(f"{fam}", "refused", reason="st.bulk (bulk zero-fill) is not modeled")
            return Decision(f"{fam}.{space}", "native", reason="shared::cluster (DSMEM) store, not global")
        nc = "nc" in mods or op == "ldu"
        cls = f"{op}.{space}" + (".nc" if nc and op == "ld" else "")
        if space in NATIVE_SPACES:
            return Decision(cls, "native", reason=f".{space} is not global memory")
        addr = inst.address
        if addr is None:
            raise RewriteError("memory instruction without an address operand", line=inst.line,
                               instruction=inst.mnemonic)
        sym_global = False
        if space == "generic" and type(addr.base) is Symbol:
            sp = ctx.sym_space.get(addr.base.name)
            if sp is not None and sp != "global":
                return Decision(cls, "native", reason=f"generic access to .{sp} variable {addr.base.name}")
            sym_global = sp == "global"
        tb = _type_bytes(inst)
        if tb is None:
            return Decision(cls, "refused", reason=f"no data type in {inst.mnemonic}")
        nbytes = tb * inst.vector_width
        if op == "st":
            flags = abi.HBF_OP_STORE
            if "release" in mods:
                flags |= abi.HBF_F_RELEASE
            kind = "store"
        else:
            flags = abi.HBF_OP_LOAD
            if nc:
                flags |= abi.HBF_F_NC
            kind = "load"
            if "volatile" in mods or "acquire" in mods or "mmio" in mods:
                flags |= abi.HBF_F_WAIT_NOW
        if space == "generic" and not sym_global:
            flags |= abi.HBF_F_GENERIC
        return Decision(cls, "rewritten", kind=kind, flags=flags, nbytes=nbytes, addr=addr,
                        generic_symbol_global=sym_global)
    if op in ("atom", "red"):
        if fam == "red.async":
            return Decision("red.async", "native", reason="shared::cluster (DSMEM) reduction, not global")
        space = inst.state_space or "generic"
        cls = f"{op}.{space}"
        if space in NATIVE_SPACES:
            return Decision(cls, "native", reason=f".{space} is not global memory")
        addr = inst.address
        if addr is None:
            raise RewriteError("atomic without an address operand", line=inst.line, instruction=inst.mnemonic)
        if space == "generic" and type(addr.base) is Symbol:
            sp = ctx.sym_space.get(addr.base.name)
            if sp is not None and sp != "global":
                return Decision(cls, "native", reason=f"generic atomic on .{sp} variable {addr.base.name}")
        tb = _type_bytes(inst)
        if tb is None:
            return Decision(cls, "refused", reason=f"no data type in {inst.mnemonic}")
        flags = abi.HBF_OP_ATOMIC
        if op == "atom":
            flags |= abi.HBF_F_WAIT_NOW
        if "release" in mods or "acq_rel" in mods:
            flags |= abi.HBF_F_RELEASE
        if space == "generic":
            flags |= abi.HBF_F_GENERIC
        return Decision(cls, "rewritten", kind="atomic" if op == "atom" else "red", flags=flags,
                        nbytes=tb * inst.vector_width, addr=addr)
    if op == "cp":
        if fam in ("cp.async.commit_group", "cp.async.wait_group", "cp.async.wait_all"):
            return None  # group accounting, handled by the pass (not a memory access itself)
        if fam == "cp.async":
            dst, src = inst.copy_spaces() or ("generic", "generic")
            cls = f"cp.async.{dst.split('::')[0]}.{src}"
            if src != "global":
                return Decision(cls, "refused", reason=f"cp.async from .{src} is not a known form")
            if not ctx.has_cp_async_commit and not ctx.has_cp_async_mbarrier:
                return Decision(cls, "refused", reason="cp.async whose group is never committed in this "
                                "function (commit/wait in another function): group accounting is "
                                "per function, not modeled")
            addrs = [o for o in inst.operands if type(o) is Address]
            if len(addrs) != 2 or len(inst.operands) < 3 or type(inst.operands[2]) is not Immediate:
                return Decision(cls, "refused", reason="cp.async operands not understood")
            return Decision(cls, "rewritten", kind="cpasync", flags=abi.HBF_OP_CPASYNC,
                            nbytes=int(inst.operands[2].value), addr=addrs[1])
        return Decision(fam, "refused", reason=f"unknown copy instruction {inst.mnemonic}")
    if op == "multimem":
        return Decision(f"multimem.{mods[0] if mods else ''}", "refused",
                        reason="multimem (NVLink SHARP multicast object) access is not modeled")
    if op in ("tex", "tld4", "suld", "sust", "sured", "txq", "suq"):
        if op in ("txq", "suq"):
            return None
        return Decision(op, "refused", reason="texture/surface access reads or writes global memory "
                        "through the texture path: not modeled")
    if op in ("prefetch", "prefetchu"):
        space = inst.state_space or "generic"
        return Decision(f"{op}.{space}", "native", reason="prefetch carries no data to the program; not timed")
    if op in ("discard", "applypriority"):
        return Decision(f"{op}.{inst.state_space}", "refused",
                        reason=f"{op} changes the state of global memory lines: not modeled")
    if op in ("ldmatrix", "stmatrix"):
        return Decision(op, "native", reason="shared memory matrix access")
    if inst.is_memory_op:
        space = inst.state_space or "generic"
        if space in NATIVE_SPACES:
            return Decision(f"{op}.{space}", "native", reason=f".{space} is not global memory")
        return Decision(f"{op}.{space}", "refused", reason=f"memory instruction {inst.mnemonic} is not modeled")
    return None


_TMA_OPS = frozenset(("cp", "mbarrier", "fence", "tensormap", "prefetch", "prefetchu"))


def _classify_tma(inst: Instruction, ctx: _Ctx):
    """The TMA family's decision (hbfcc/passes/tma.py) as the pass's Decision; False when ``inst`` is not
    of the family (the classifier goes on), None for group bookkeeping the pass does itself."""
    f = T.classify(inst)
    if f is None:
        return False
    if f.role in ("commit", "wait_group"):
        return None
    if f.action != "rewritten":
        return Decision(f.cls, f.action, reason=f.reason, tma=f)
    if f.role == "copy":
        return Decision(f.cls, "rewritten", kind="tma", tma=f)
    if f.role == "descstore":       # a 128-byte descriptor written into global memory: a posted store
        flags = abi.HBF_OP_STORE | (abi.HBF_F_GENERIC if (inst.state_space or "generic") == "generic" else 0)
        return Decision(f.cls, "rewritten", kind="store", flags=flags, nbytes=128, addr=f.gaddr, tma=f)
    if f.role == "wait":
        if not ctx.tracks:
            return Decision(f.cls, "native", reason="no mbarrier-tracked copy in this module", tma=f)
        if "parity" not in inst.modifiers:
            st = inst.operands[2]
            if type(st) is not Register or not ctx.reg_def_fams.get(st.name) or \
                    ctx.reg_def_fams[st.name] - {"mbarrier.arrive", "mbarrier.arrive_drop"}:
                return Decision(f.cls, "refused", reason=f"{inst.mnemonic}: token-form mbarrier wait whose state "
                                f"({st}) is not written only by mbarrier.arrive in this function: the phase it "
                                "waits for is unknown, so the modeled completion cannot be enforced", tma=f)
        return Decision(f.cls, "rewritten", kind="mbwait", tma=f)
    if f.role == "cpasync_arrive":
        return Decision(f.cls, "rewritten", kind="cpa_arrive", tma=f)
    raise RewriteError("internal: unknown TMA role", role=f.role, instruction=inst.mnemonic)


def _drains(inst: Instruction) -> bool:
    """Posted stores drain before this instruction."""
    op = inst.opcode
    if op == "fence" and _family(inst) == "fence.proxy" and \
            any(m in ("shared::cta", "shared::cluster") for m in inst.modifiers):
        return False        # a proxy fence for shared memory only (before a TMA store reads it): no global order
    if op in ("membar", "fence", "atom", "red", "ret", "exit"):
        return True
    if "release" in inst.modifiers or "acq_rel" in inst.modifiers:
        return True
    if _family(inst) == "barrier.cluster" and "arrive" in inst.modifiers and "relaxed" not in inst.modifiers:
        return True
    return False


# --------------------------------------------------------------------------------------------
# Emission helpers
# --------------------------------------------------------------------------------------------

def _ins(op: str, mods: tuple[str, ...], ops: tuple, guard: Optional[Guard] = None) -> Instruction:
    return Instruction(guard, op, mods, ops)


def _R(n: str) -> Register:
    return Register(n)


def _I(v: int) -> Immediate:
    return Immediate(str(v))


def _pdecl(name: str, ty: str) -> VarDecl:
    return VarDecl((), "param", (), ty, (Declarator(name),))


def _stp(name: str, ty: str, val) -> Instruction:
    return _ins("st", ("param", ty), (Address(Symbol(name)), val))


def _call(fn: str, args, ret: Optional[str] = None, guard: Optional[Guard] = None) -> Block:
    """``{ .param ...; st.param ...; call (rv), fn, (p...); ld.param out, [rv]; }``"""
    return _call_cached(fn, tuple(args), ret, guard)


@functools.lru_cache(maxsize=8192)
def _call_cached(fn: str, args: tuple, ret: Optional[str], guard: Optional[Guard]) -> Block:
    body: list[Statement] = []
    names = []
    for i, (ty, val) in enumerate(args):
        nm = f"__hb_p{i}"
        body.append(_pdecl(nm, "." + ty))
        names.append(nm)
    if ret is not None:
        body.append(_pdecl("__hb_rv", ".b64"))
    for (ty, val), nm in zip(args, names):
        body.append(_stp(nm, ty, val))
    argl = ArgList(tuple(Symbol(n) for n in names))
    if ret is not None:
        body.append(_ins("call", (), (ArgList((Symbol("__hb_rv"),)), Symbol(fn), argl), guard))
        body.append(_ins("ld", ("param", "b64"), (_R(ret), Address(Symbol("__hb_rv")))))
    else:
        body.append(_ins("call", (), (Symbol(fn), argl), guard))
    return Block(tuple(body))


# --------------------------------------------------------------------------------------------
# The pass
# --------------------------------------------------------------------------------------------

@dataclass
class FunctionReport:
    name: str
    kind: str
    kernel_index: int
    classes: dict[str, dict[str, int]] = field(default_factory=dict)
    refused: list[dict] = field(default_factory=list)
    native_reasons: dict[str, str] = field(default_factory=dict)
    sites: int = 0
    waits: int = 0
    drains: int = 0
    cp_async_window: int = 0
    calls: list[str] = field(default_factory=list)
    external_calls: list[str] = field(default_factory=list)
    admitted: bool = True
    not_admitted_reasons: list[str] = field(default_factory=list)
    native_version: bool = False     # an untouched copy runs when nothing is registered
    # where the rewritten accesses' addresses come from (hbfcc/passes/provenance.py): "params" (the
    # runtime may run a launch natively when its pointer arguments reach no range) or "memory"
    address_source: str = "params"
    memory_address_lines: list[int] = field(default_factory=list)
    hoisted_issues: int = 0          # load issues placed before earlier instructions (_hoist_target)
    issue_groups: int = 0            # groups of adjacent inline load issues (_group_code)
    multi_checks: int = 0            # multi-range re-checks (ABI 6: _multi_range_check), per site and per group
    live_flushes: int = 0            # until points that flush the thread's inline counters (HBFCC_INLINE_LIVE)
    shared_untils: int = 0           # until asks whose answer serves the other op too (HBFCC_SHARE_UNTIL)
    loads_first: int = 0             # group sites whose load was placed before the group's timing code (HBFCC_LOADS_FIRST)
    full_warp_paths: int = 0         # inline paths with a constant-mask copy for a whole warp (HBFCC_FULL_WARP)
    max_group_sites: int = 0         # the largest issue group's sites (HBFCC_FULL_WARP=auto: > 4 makes a candidate)
    full_warp_scope: int = 0         # the largest group that got the full-warp copy (0, SMALL_GROUP_SITES, GROUP_MAX)
    timed_paths: int = 0             # served inline paths timed into inline_ns (HBFCC_INLINE_TIME; sites, groups, waits)
    grouped_issues: int = 0          # load issues in those groups
    moved_loads: int = 0             # loads moved with their hoisted issue (HBFCC_HOIST_LOADS, _movable_load)
    next_prefetches: int = 0         # L2 prefetches of a loop's next-iteration loads (HBFCC_PREFETCH_NEXT)
    group_prefetches: int = 0        # L2 prefetches of an issue group's own loads before its code (HBFCC_PREFETCH_GROUP)
    group_calls: int = 0             # groups with a __hb_issue_group call (HBFCC_FAST_GROUPS)
    merged_requests: int = 0         # merged requests of two or more adjacent loads (HBFCC_MERGE_LOADS, _merge_sets)
    merged_sites: int = 0            # load issues served by those merged requests
    tma: dict[str, int] = field(default_factory=dict)   # TMA-family instructions by class (hbfcc/passes/tma.py)
    tma_hooks: int = 0               # __hb_tma calls, mbarrier wait hooks, cp.async arrive notes emitted
    bulk_window: int = 0             # the bulk-group window (0: no bulk store / reduction)

    def count(self, d: Decision) -> None:
        c = self.classes.setdefault(d.cls, {"count": 0, "rewritten": 0, "native": 0, "refused": 0})
        c["count"] += 1
        c[d.action] += 1
        if d.action == "native" and d.reason:
            self.native_reasons.setdefault(d.cls, d.reason)

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "kernel_index": self.kernel_index,
                "admitted": self.admitted, "not_admitted_reasons": self.not_admitted_reasons,
                "classes": self.classes, "refused": self.refused, "native_reasons": self.native_reasons,
                "sites": self.sites, "waits": self.waits, "drains": self.drains,
                "cp_async_window": self.cp_async_window, "calls": self.calls,
                "external_calls": self.external_calls, "native_version": self.native_version,
                "address_source": self.address_source, "memory_address_lines": self.memory_address_lines,
                "hoisted_issues": self.hoisted_issues, "issue_groups": self.issue_groups,
                "grouped_issues": self.grouped_issues, "multi_checks": self.multi_checks,
                "live_flushes": self.live_flushes, "shared_untils": self.shared_untils,
                "loads_first": self.loads_first,
                "full_warp_paths": self.full_warp_paths, "max_group_sites": self.max_group_sites,
                "full_warp_scope": self.full_warp_scope,
                "timed_paths": self.timed_paths,
                "moved_loads": self.moved_loads, "next_prefetches": self.next_prefetches,
                "group_prefetches": self.group_prefetches,
                "group_calls": self.group_calls, "merged_requests": self.merged_requests,
                "merged_sites": self.merged_sites, "tma": self.tma, "tma_hooks": self.tma_hooks,
                "bulk_window": self.bulk_window}


# Issue hoisting: what a load's issue may be moved above. Plain computation and plain (weak) memory
# accesses only: no control flow, labels, calls, barriers, fences, atomics, strong or volatile accesses,
# asynchronous copies, and no read of a clock (a program that stamps time around its own loads must see
# the issue where it put the load).
_HOIST_PAST = frozenset((
    "add", "sub", "mul", "mad", "mul24", "mad24", "fma", "div", "rem", "abs", "neg", "min", "max", "and",
    "or", "xor", "not", "cnot", "shl", "shr", "lop3", "shf", "prmt", "bfe", "bfi", "brev", "clz", "popc",
    "bfind", "mov", "cvt", "cvta", "setp", "selp", "set", "slct", "rcp", "sqrt", "rsqrt", "ex2", "lg2",
    "sin", "cos", "tanh", "copysign", "testp", "addc", "subc", "madc", "sad", "dp4a", "dp2a", "isspacep",
    "ld", "st"))
_STRONG_MODS = frozenset(("volatile", "acquire", "release", "relaxed", "mmio", "weak_sys"))
_CLOCK_PREFIXES = ("%globaltimer", "%clock", "%pm")
HOIST_WINDOW = 256   # instructions an issue may move up (bounds the rewrite's cost)
MERGE_HOIST_WINDOW = 1024   # HBFCC_MERGE_LOADS: how far a load's issue may follow the previous load's (_hoist_target)
MERGE_SPAN = 32      # bytes a merged request's span may cover: the inline path's largest access (INLINE_BYTES)
MERGE_SPAN_CHECKED = 16   # a span wider than its members' alignment proves: at most this, checked per lane (_merge_sets)
HOIST_CHAIN = 16     # computations copied for one hoisted issue
# what a hoisted issue may copy: pure single-destination computations
_CLONEABLE = frozenset(("add", "sub", "mul", "mad", "mul24", "mad24", "shl", "shr", "and", "or", "xor", "not",
                        "cvt", "cvta", "setp", "selp", "mov", "min", "max", "neg", "abs", "lop3", "shf", "prmt",
                        "bfe", "bfi"))


def _cloneable(inst: Instruction) -> bool:
    if inst.opcode not in _CLONEABLE or inst.guard is not None or len(inst.defs()) != 1:
        return False
    ops = inst.operands
    if not ops or type(ops[0]) is not Register:
        return False
    for o in ops[1:]:
        if type(o) is Negated:
            o = o.reg
        if type(o) is Register:
            if o.name.startswith(_CLOCK_PREFIXES):
                return False
        elif type(o) is not Immediate:
            return False
    return True


def _rename_reg(o, ren: dict[str, str]):
    if type(o) is Register and o.name in ren:
        return Register(ren[o.name])
    if type(o) is Negated and o.reg.name in ren:
        return Negated(Register(ren[o.reg.name]))
    if type(o) is Address and type(o.base) is Register and o.base.name in ren:
        return replace(o, base=Register(ren[o.base.name]))
    return o


@dataclass
class _HoistFacts:
    uses: list[frozenset]
    defs: list[frozenset]
    sib: list[bool]          # node j is the previous sibling of node j + 1 (only notes between)
    passable: list[bool]
    clone_ok: list[bool]
    pending: list[frozenset]  # registers with a pending future before node j


def _hoistable_past(inst: Instruction) -> bool:
    if inst.opcode not in _HOIST_PAST:
        return False
    if inst.opcode in ("ld", "st") and _STRONG_MODS.intersection(inst.modifiers):
        return False
    return not any(type(o) is Register and o.name.startswith(_CLOCK_PREFIXES) for o in inst.operands)


@dataclass(frozen=True)
class _GSite:
    """An inline load issue held back until its neighbours are known (_FunctionRewriter._lower_groups);
    never reaches the printer."""
    inst: Instruction
    d: Decision
    k: int          # its future register: R_FUT<k>
    node: int


@dataclass(frozen=True)
class _MergeReq:
    """One request of a group (HBFCC_MERGE_LOADS, _FunctionRewriter._merge_sets): its member sites (slots of
    the group, in order), the member whose address starts the span, the span's bytes and whether the span must
    be checked per lane to be in one granule (its members' alignment does not prove it). One member: the site's
    own request (span and check unused). ``verify``: (member, distance from the span's start) for members whose
    address is a candidate only (_merge_copy): each lane accessing it checks it at run time."""
    members: tuple[int, ...]
    lead: int
    span: int
    check: bool
    verify: tuple[tuple[int, int], ...] = ()


def _merge_copy(st: Instruction, val: dict) -> None:
    """A hoisting copy of a run (_is_copy: its one destination a fresh register, written once) into ``val``:
    register -> (R, c, exact), the register holds R + c. ``add.{s64,u64} d, x, imm`` adds to x's entry, exactly.
    Candidates only, checked per lane at run time (_group_code): ``or.b32`` / ``add.{s32,u32}`` of an immediate
    (x | c is x + c only where x has no bit of c; a 32-bit add may wrap), and ``mad.wide.{s32,u32} d, i, imm, B``
    / ``mul.wide`` of such an index i = x + c: d = (x, scale, B) + scale * c (Triton computes each scalar of a masked
    tail's later chunks as ``mad.wide.s32 %rd, %r, 2, %base`` of ``%r = %r71 | 7168..7175``). Anything else: d is
    its own root."""
    (d,) = st.defs()
    ops = st.operands
    op, mods = st.opcode, st.modifiers
    if op in ("add", "or") and len(ops) == 3 and mods in (("s64",), ("u64",), ("s32",), ("u32",), ("b32",)) \
            and (op == "add") == (mods != ("b32",)):
        x, y = ops[1], ops[2]
        if type(x) is Immediate:
            x, y = y, x
        if type(x) is Register and type(y) is Immediate and not y.is_float:
            r, c, exact = val.get(x.name, (x.name, 0, True))
            val[d] = (r, c + int(y.value), exact and op == "add" and mods[0].endswith("64"))
            return
    if op in ("mad", "mul") and len(mods) == 2 and mods[0] == "wide" and mods[1] in ("s32", "u32") \
            and len(ops) == (4 if op == "mad" else 3):
        i, k = ops[1], ops[2]
        if type(i) is Register and type(k) is Immediate and not k.is_float and i.name in val:
            r, c, _ = val[i.name]
            sc = int(k.value)
            b = ops[3] if op == "mad" else None
            if b is None or type(b) is Register:
                val[d] = ((op, mods[1], r, sc, b.name if b is not None else None), sc * c, False)
                return
    val.pop(d, None)


_MERGE_TYPE_MODS = frozenset(_TYPE_BYTES) | {"v2", "v4", "v8"}


def _merge_key(s: "_GSite") -> Optional[tuple]:
    """What two loads must share to merge: a plain ``ld`` whose decision is a global load (``.global``, ``.nc``
    or not; not a generic load: its space is only known at run time) and the same modifiers apart from the
    type and vector width (state space, cache operators, eviction priority, prefetch size); None for a load that
    never merges (strong: volatile / acquire / relaxed / mmio)."""
    inst, d = s.inst, s.d
    if inst.opcode != "ld" or d.kind != "load" or d.flags & (abi.HBF_F_GENERIC | abi.HBF_F_WAIT_NOW):
        return None
    mods = tuple(m for m in inst.modifiers if m not in _MERGE_TYPE_MODS)
    if _STRONG_MODS.intersection(mods) or "global" not in mods:
        return None
    return d.flags, mods


def _merge_span(members: list[tuple[int, int]]) -> Optional[tuple[int, int, bool]]:
    """(start, bytes, check) of the span of members (offset, width), or None. The merged request is counted with
    one granule key per lane, so its span must be in one granule (read granules are >= 32 bytes): each member is
    naturally aligned (PTX), so the span's start is aligned to A = the largest min(width, lowest set bit of its
    distance from the start) over the members; a span of at most A bytes is in one A-aligned block (A <= 32), in
    one granule: proven; a wider span of at most MERGE_SPAN_CHECKED bytes is checked per lane at run time
    (_group_code: a failed check fails the group's vote, and each site runs alone: Triton's 16 bytes per thread of
    a masked tail start 16-aligned when the tensor does); wider: no merge (two 16-byte vectors at +0 and +16 of a
    16-byte aligned base cross a 64-byte granule in a quarter of the lanes: the warp's vote would fail always)."""
    lo = min(c for c, _ in members)
    L = max(c + w for c, w in members) - lo
    if L > MERGE_SPAN:
        return None
    A = 1
    for c, w in members:
        dj = c - lo
        wa = w & -w
        A = max(A, wa if dj == 0 else min(wa, dj & -dj))
    if L <= min(A, MERGE_SPAN):
        return lo, L, False
    if L <= MERGE_SPAN_CHECKED:
        return lo, L, True
    return None


def _is_copy(st) -> bool:
    """A hoisting copy (_hoisted_site): an unguarded pure instruction writing a fresh hbfcc register."""
    if type(st) is not Instruction or st.guard is not None or st.opcode not in _CLONEABLE:
        return False
    ds = st.defs()
    return bool(ds) and all(r.startswith("%__hb_x_") for r in ds)


class _FunctionRewriter:
    def __init__(self, module: Module, fn: Function, kidx: int, window: int, hoist: bool = True,
                 inline: bool = True, group: bool = True, move_loads: bool = True, fast_groups: bool = True,
                 tracks: bool = False, cluster: bool = False, multi: bool = True, live: bool = True,
                 itime: bool = False, native_scope: bool = False, merge: bool = False, share_until: bool = True,
                 loads_first: int = 0, full_warp: int = 0, early_clock: bool = False, prefetch_next: int = 0,
                 prefetch_group: bool = False):
        self.hoist = hoist
        # HBFCC_PREFETCH_GROUP: an issue group's loads prefetched into L2 before its timing code
        self.prefetch_group = bool(prefetch_group) and inline
        # HBFCC_PREFETCH_NEXT: how many iterations ahead a loop's loads are prefetched into L2 (0: none)
        self.prefetch_next = int(prefetch_next) if inline else 0
        self.early_clock = early_clock            # HBFCC_EARLY_CLOCK: a group's clock read before its setup
        # HBFCC_FULL_WARP: constant-mask collectives where the warp is whole, in groups of at most this many sites
        # (0: off; single inline sites whenever it is not 0)
        self.full_warp = full_warp if inline else 0
        self.loads_first = loads_first            # HBFCC_LOADS_FIRST: the same for a group's moved loads first
        self.share_until = share_until            # HBFCC_SHARE_UNTIL: an until asked for one op serves the other too
        self.native_scope = native_scope        # HBFCC_NATIVE_SCOPE: the native copy's registers its own (below)
        self.multi = multi and inline           # HBFCC_INLINE_MULTI: the multi-range re-check (ABI 6)
        self.move_loads = move_loads and hoist
        self.moved: dict[tuple[int, ...], list[Statement]] = {}   # hoist point -> loads moved there
        self.drop: set[tuple[int, ...]] = set()                   # statements moved away
        self.inline = inline and fn.is_entry      # the thread's counters are flushed at the entry's exits
        self.group = group and self.inline
        self.live = live and self.inline          # HBFCC_INLINE_LIVE: the counters flushed at every until point too
        self.itime = itime and self.inline        # HBFCC_INLINE_TIME: the served paths' own time into R_INS
        self.fast_groups = fast_groups and self.group
        self.merge = merge and self.group and hoist   # HBFCC_MERGE_LOADS: adjacent loads of a group as one request
        self._last_h: dict[tuple[int, ...], int] = {}   # sibling list -> the hoist point of its last load (merge)
        self._nodes: list = []
        self._moved_after: dict[int, list[Statement]] = {}   # id(_GSite) -> its moved load (merge: after its group)
        self.group_slots = 0                      # the largest group emitted (per-slot registers)
        self.group_wmax = 0                       # the widest access of a group site (R_CDB's end alignment)
        self.group_lf = False                     # a group with its loads inside (HBFCC_LOADS_FIRST): R_GW declared
        self.hoisted: dict[tuple[int, ...], list[Statement]] = {}
        self.clones: dict[str, int] = {}            # type -> registers copied for hoisted issues
        self.clone_at: dict[tuple[int, int], str] = {}   # (hoist node, copied node) -> its copy
        self._hfacts: Optional[_HoistFacts] = None
        self.fn = fn
        self.kidx = kidx
        self.ctx = _Ctx(module, fn)
        self.ctx.tracks = tracks
        self.cluster = cluster
        self.K = max(window, self.ctx.max_wait_group + 1)
        self.KB = max(window, self.ctx.max_bulk_wait_group + 1) if self.ctx.has_bulk_group else 0
        self.post: dict[tuple[int, ...], list[Statement]] = {}   # code right after a statement (wait hooks)
        self.tok: dict[str, int] = {}            # token-form wait state register -> its parity register
        self.tma_regs = False                    # the TMA scratch registers are declared
        self.report = FunctionReport(fn.name, fn.kind, kidx, cp_async_window=self.K, bulk_window=self.KB)
        self.report.full_warp_scope = self.full_warp
        self.site_count = 0
        self.pre: dict[tuple[int, ...], list[Statement]] = {}
        self.node_site: dict[int, int] = {}       # node index -> site id
        self.fut_site: dict[int, int] = {}        # future register index -> site id
        self._node = -1
        self.nlabels = 0

    def site_id(self) -> int:
        s = self.site_count
        self.site_count += 1
        if s >= 0xFFF0:   # 0xFFFE / 0xFFFF name the cp.async-group and drain waits
            raise RewriteError("too many access sites in one function", function=self.fn.name)
        return (self.kidx << 16) | s

    # ---- address / flags code ---------------------------------------------------------------
    def _addr_code(self, d: Decision, out: list[Statement]):
        a = d.addr
        assert a is not None
        base = a.base
        if type(base) is Register:
            rt = self.ctx.reg_type(base.name)
            if rt in _32BIT_TYPES:
                out.append(_ins("cvt", ("u64", "u32"), (_R(R_ADDR), base)))
                if a.offset:
                    out.append(_ins("add", ("s64",), (_R(R_ADDR), _R(R_ADDR), _I(a.offset))))
                return _R(R_ADDR)
            if a.offset:
                out.append(_ins("add", ("s64",), (_R(R_ADDR), base, _I(a.offset))))
                return _R(R_ADDR)
            return base
        if type(base) is Symbol:
            sp = self.ctx.sym_space.get(base.name)
            if sp == "global":
                out.append(_ins("cvta", ("global", "u64"), (_R(R_ADDR), base)))
            else:
                out.append(_ins("mov", ("u64",), (_R(R_ADDR), base)))
            if a.offset:
                out.append(_ins("add", ("s64",), (_R(R_ADDR), _R(R_ADDR), _I(a.offset))))
            return _R(R_ADDR)
        out.append(_ins("mov", ("u64",), (_R(R_ADDR), _I(a.offset))))
        return _R(R_ADDR)

    def _flags_code(self, inst: Instruction, flags: int, out: list[Statement], extra_inactive=None):
        g = inst.guard
        act = flags | abi.HBF_F_ACTIVE
        if g is None and extra_inactive is None:
            return _I(act)
        if g is None:
            out.append(_ins("mov", ("b32",), (_R(R_FLAGS), _I(act))))
        elif g.negated:
            out.append(_ins("selp", ("b32",), (_R(R_FLAGS), _I(flags), _I(act), g.reg)))
        else:
            out.append(_ins("selp", ("b32",), (_R(R_FLAGS), _I(act), _I(flags), g.reg)))
        if extra_inactive is not None:
            out.extend(extra_inactive)
        return _R(R_FLAGS)

    def _label(self) -> str:
        self.nlabels += 1
        return f"$__hb_L{self.nlabels}"

    def _wait(self, fut: str, site: int, guard: Optional[Guard], clear: bool = True) -> list[Statement]:
        """Wait for ``fut`` (then zero it unless ``clear`` is False); a zero future skips the call inline
        (the helper would return at once: nothing to wait for). In an entry with the inline path, a
        deadline already due is counted inline as a ready wait (the lowest lane's count and slack, in the
        thread's registers) and only a pending one calls ``__hb_wait``."""
        L = self._label()
        out = [_ins("setp", ("eq", "u64"), (_R(R_ZERO), _R(fut), _I(0))),
               _ins("bra", (), (LabelRef(L),), Guard(_R(R_ZERO)))]
        if not self.inline:
            out.append(_call("__hb_wait", [("b64", _R(fut)), ("b32", _I(site))], guard=guard))
            if clear:
                out.append(_ins("mov", ("b64",), (_R(fut), _I(0)), guard))
            out.append(Label(L))
            return out
        if guard is not None:                     # lanes whose reading instruction does not run keep it
            out.append(_ins("bra", (), (LabelRef(L),), Guard(guard.reg, not guard.negated)))
        Lslow = self._label()
        out += [_ins("mov", ("u64",), (_R(R_IT), _R("%globaltimer"))),
                _ins("setp", ("lt", "u64"), (_R(R_IPA), _R(R_IT), _R(fut))),   # a ticket (bit 63) is never due
                _ins("bra", (), (LabelRef(Lslow),), Guard(_R(R_IPA)))]
        out += self._leader()
        out += [_ins("add", ("u32",), (_R(R_IRW), _R(R_IRW), _I(1)), Guard(_R(R_IPL))),
                _ins("sub", ("u64",), (_R(R_IX), _R(R_IT), _R(fut))),
                _ins("add", ("u64",), (_R(R_ISL), _R(R_ISL), _R(R_IX)), Guard(_R(R_IPL)))]
        out += self._time_served(_R(R_IT))
        if clear:
            out.append(_ins("mov", ("b64",), (_R(fut), _I(0))))
        out += [_ins("bra", ("uni",), (LabelRef(L),)),
                Label(Lslow),
                _call("__hb_wait", [("b64", _R(fut)), ("b32", _I(site))])]
        if clear:
            out.append(_ins("mov", ("b64",), (_R(fut), _I(0))))
        out.append(Label(L))
        return out

    @staticmethod
    def _group_mask() -> list[Statement]:
        """R_IM = the active lanes, as every collective of the inline path takes them: OR-ed with this lane's own bit
        (%lanemask_eq, here R_LMLT + 1; R_IL is free at both uses). The same value, but one ptxas cannot prove
        warp-uniform, so it compiles each collective with every lane's own mask checked instead of one lane's mask
        (runtime_cuda/src/hbf_ptx.cuh HBF_GROUP_SYNC, docs/design.md §3.8 "The group's mask": two groups of one warp
        at one collective made the unchecked form count and read across them)."""
        return [_ins("activemask", ("b32",), (_R(R_IM),)),
                _ins("add", ("u32",), (_R(R_IL), _R(R_LMLT), _I(1))),
                _ins("or", ("b32",), (_R(R_IM), _R(R_IM), _R(R_IL)))]

    def _leader(self) -> list[Statement]:
        """R_IM = the active lanes (_group_mask), R_IL = those below this lane, R_IPL = this is the lowest one."""
        return [*self._group_mask(),
                _ins("and", ("b32",), (_R(R_IL), _R(R_LMLT), _R(R_IM))),
                _ins("setp", ("eq", "u32"), (_R(R_IPL), _R(R_IL), _I(0)))]

    def _inline_ok(self, d: Decision) -> bool:
        """The site may be served inline: an entry's plain load whose future waits at its use, or a
        posted store, of at most 32 naturally aligned bytes."""
        if not self.inline or d.nbytes not in INLINE_BYTES:
            return False
        return (d.kind == "load" and self._node in self._fut_of) or d.kind == "store"

    def _join_into(self, dst: str, other: str) -> list[Statement]:
        """dst = __hb_future_join(dst, other). Inline where the helper's answer is known without it: a
        zero ``other`` changes nothing, and two deadline futures (neither has the ticket bit, bit 63:
        ``dst | other`` not negative as s64) join to their maximum (``max.u64``, which also covers a
        zero ``dst``), exactly what the helper returns for them. Only a ticket calls the helper."""
        L, Lcall = self._label(), self._label()
        return [_ins("setp", ("eq", "u64"), (_R(R_ZERO), _R(other), _I(0))),
                _ins("bra", (), (LabelRef(L),), Guard(_R(R_ZERO))),
                _ins("or", ("b64",), (_R(R_NOW), _R(dst), _R(other))),
                _ins("setp", ("lt", "s64"), (_R(R_PRED), _R(R_NOW), _I(0))),
                _ins("bra", (), (LabelRef(Lcall),), Guard(_R(R_PRED))),
                _ins("max", ("u64",), (_R(dst), _R(dst), _R(other))),
                _ins("bra", (), (LabelRef(L),), Guard(_R(R_PRED), True)),   # always taken here
                Label(Lcall),
                _call("__hb_future_join", [("b64", _R(dst)), ("b64", _R(other))], ret=dst),
                Label(L)]

    def _exit_calls(self, g: Optional[Guard]) -> list[Statement]:
        """At an exit of an entry: the thread's inline counters into the kernel's, then the exit's bookkeeping."""
        out: list[Statement] = []
        if self.inline:
            out.append(_call("__hb_kernel_flush", [
                ("b32", _I(self.kidx)), ("b32", _R(R_ICR)), ("b32", _R(R_IGR)), ("b64", _R(R_IBR)),
                ("b32", _R(R_ICW)), ("b64", _R(R_IBW)), ("b32", _R(R_IRW)), ("b64", _R(R_ISL)),
                ("b64", self._inline_ns())], guard=g))
        if self.ctx.tracks and self.fn.is_entry:
            out.append(_call("__hb_tma_exit", [("b32", _R(R_TBL)), ("b32", _I(self.kidx))], guard=g))
        out.append(_call("__hb_kernel_exit", [("b32", _I(self.kidx))], guard=g))
        return out

    def _ask_until(self, op: int, until: str) -> list[Statement]:
        """A lane whose until has passed asks for the next one. With HBFCC_INLINE_LIVE (default; helper ABI 7) it
        passes its inline counters along: ``__hb_inline_until_live`` adds them to the kernel's shards (the exit's
        ``__hb_kernel_flush``: warp sums over the lanes asking together, one atomic per counter per warp; nothing
        when the warp counted nothing) before it answers, and the lane zeroes them -- so hbfd's live activity
        (design §3.1) sees a long-lived thread's inline requests at most one until period late (about one activity
        period under a validity horizon, half a snapshot age without; issue 17 item 2), and the exit flush adds only
        what came after the last until point (nothing counted twice, nothing lost). The same one call as before at
        the already rare point: no per-access cost, no new call site, the counters dead across it."""
        if not self.live:
            return [_call("__hb_inline_until", [("b32", _I(op))], ret=until)] + self._share_until(until)
        self.report.live_flushes += 1
        return [_call("__hb_inline_until_live", [
                    ("b32", _I(op)), ("b32", _I(self.kidx)), ("b32", _R(R_ICR)), ("b32", _R(R_IGR)),
                    ("b64", _R(R_IBR)), ("b32", _R(R_ICW)), ("b64", _R(R_IBW)), ("b32", _R(R_IRW)),
                    ("b64", _R(R_ISL)), ("b64", self._inline_ns())], ret=until)] + \
            [_ins("mov", ("b64",), (_R(r), _I(0))) for r in (R_IBR, R_IBW, R_ISL) + ((R_INS,) if self.itime else ())] + \
            [_ins("mov", ("b32",), (_R(r), _I(0))) for r in (R_ICR, R_IGR, R_ICW, R_IRW)] + \
            self._share_until(until)

    def _share_until(self, until: str) -> list[Statement]:
        """HBFCC_SHARE_UNTIL (default 1): the until just asked for one op (loads R_IUR, stores R_IUW) becomes the
        other op's too when the descriptor serves both inline (hbf_cdesc.inl_flags has HBF_CDI_READ and
        HBF_CDI_WRITE). ``__hb_inline_until`` answers the same for either op but for that one flag (the thermal
        snapshot's expiry or refresh point, a negative ask-again time, or never), so the copy changes no answer --
        it only saves the other op's own ask: a kernel that loads and stores asked twice per thread (each until starts
        at 0), a full call each (on an H100, stop 52: 2.25 asks per warp in the stream reduce, whose one store per
        program asked for an until of its own; the asks and their flushes 26 % of the kernel's instructions). Its
        time on the card (stop 52, A/B): reduce unchanged, copy -2 %, Little unchanged -- fewer instructions, the
        same load-bound kernel.
        Runs where the ask ran (the rare path); R_IH and R_IPB are free there (both set again before their next
        read on every path that follows an ask)."""
        if not self.share_until:
            return []
        other = R_IUW if until == R_IUR else R_IUR
        both = abi.HBF_CDI_READ | abi.HBF_CDI_WRITE
        self.report.shared_untils += 1
        return [_ins("ld", ("const", "u32"), (_R(R_IH), Address(Symbol(abi.CDESC_GLOBAL), abi.CDESC_INL_FLAGS_OFF))),
                _ins("and", ("b32",), (_R(R_IH), _R(R_IH), _I(both))),
                _ins("setp", ("eq", "u32"), (_R(R_IPB), _R(R_IH), _I(both))),
                _ins("mov", ("b64",), (_R(other), _R(until)), Guard(_R(R_IPB)))]

    def _inline_ns(self):
        """What the flushes pass as inline_ns (helper ABI 8): the thread's R_INS with HBFCC_INLINE_TIME, else 0."""
        return _R(R_INS) if self.itime else _I(0)

    def _time_served(self, start) -> list[Statement]:
        """HBFCC_INLINE_TIME: at the end of a served inline path (after its counters), the time since ``start`` (the
        path's own first ``%globaltimer`` read) into R_INS, on the leader lane only (R_IPL, as the request counts):
        the warp's sum over its lanes, which the flushes take (helper ABI 8: ``inline_ns``), is the leader's. R_IX
        is free here on every served path. Nothing without the knob."""
        if not self.itime:
            return []
        self.report.timed_paths += 1
        return [_ins("mov", ("u64",), (_R(R_IX), _R("%globaltimer"))),
                _ins("sub", ("u64",), (_R(R_IX), _R(R_IX), start)),
                _ins("add", ("u64",), (_R(R_INS), _R(R_INS), _R(R_IX)), Guard(_R(R_IPL)))]

    def _unless_detached(self, body: list[Statement]) -> list[Statement]:
        """Skip ``body`` when the module is detached (__hb_state == 0, read once at entry): the
        helpers would take their native path and return 0 anyway. Uniform branch."""
        L = self._label()
        return [_ins("bra", ("uni",), (LabelRef(L),), Guard(_R(R_OFF)))] + body + [Label(L)]

    def _issue(self, inst: Instruction, d: Decision, out_reg: str, out: list[Statement],
               tail: Optional[list[Statement]] = None) -> int:
        """future = 0; the fast reject inline (hbf_abi.h): the lane calls ``__hb_issue`` only when
        ``addr - lo < span`` (lo/span read once at entry), then runs ``tail`` (the join / wait of its
        future) in the same in-band block."""
        out.append(_ins("mov", ("b64",), (_R(out_reg), _I(0))))
        site = self.node_site[self._node]
        addr = self._addr_code(d, out)
        L = self._label()
        out.append(_ins("sub", ("u64",), (_R(R_BAND), addr, _R(R_LO))))
        out.append(_ins("setp", ("ge", "u64"), (_R(R_OUT), _R(R_BAND), _R(R_SPAN))))
        out.append(_ins("bra", (), (LabelRef(L),), Guard(_R(R_OUT))))
        if self._inline_ok(d):
            self._inline_issue(inst, d, addr, out_reg, site, out, L)
        else:
            self._issue_call(inst, d, addr, out_reg, site, out)
        if tail:
            out.extend(tail)
        out.append(Label(L))
        return site

    def _inline_issue(self, inst: Instruction, d: Decision, addr, out_reg: str, site: int,
                      out: list[Statement], L: str) -> None:
        """The inline issue (hbf_abi.h "Inline issue"): the lanes whose guard holds (the others skip to
        ``L``: future 0, as the helper gives an inactive lane) serve the access without a call when the
        thread's until has not passed (a lane whose until has passed asks ``__hb_inline_until`` first; a
        negative until: only once its ask-again time -until has come), the address is inside the
        descriptor's range, and every active lane agrees with lanes in ascending address order; else they
        call ``__hb_issue``."""
        g = inst.guard
        if g is not None:
            out.append(_ins("bra", (), (LabelRef(L),), Guard(g.reg, not g.negated)))
        load = d.kind == "load"
        until = R_IUR if load else R_IUW
        nb = d.nbytes
        cd = abi.CDESC_GLOBAL
        Lslow, Ldone, Lgo = self._label(), self._label(), self._label()
        # until passed (or a negative until whose ask-again time has come): ask __hb_inline_until first
        out += [_ins("mov", ("u64",), (_R(R_IT), _R("%globaltimer"))),
                _ins("setp", ("lt", "s64"), (_R(R_IPA), _R(R_IT), _R(until))),
                _ins("bra", (), (LabelRef(Lgo),), Guard(_R(R_IPA))),
                _ins("neg", ("s64",), (_R(R_IX), _R(until))),
                _ins("setp", ("lt", "s64"), (_R(R_IPB), _R(R_IT), _R(R_IX))),
                _ins("bra", (), (LabelRef(Lgo),), Guard(_R(R_IPB)))]
        out += self._ask_until(abi.HBF_OP_LOAD if load else abi.HBF_OP_STORE, until)
        out += [_ins("setp", ("lt", "s64"), (_R(R_IPA), _R(R_IT), _R(until))),
                Label(Lgo),
                _ins("ld", ("const", "u64"), (_R(R_IX), Address(Symbol(cd), abi.CDESC_R0_BASE_OFF))),
                _ins("sub", ("u64",), (_R(R_IX), addr, _R(R_IX))),
                _ins("ld", ("const", "u64"), (_R(R_IY), Address(Symbol(cd), abi.CDESC_R0_LEN_OFF))),
                _ins("setp", ("lt", "and", "u64"), (_R(R_IPA), _R(R_IX), _R(R_IY), _R(R_IPA))),
                _ins("add", ("u64",), (_R(R_IX), _R(R_IX), _I(nb))),
                _ins("setp", ("le", "and", "u64"), (_R(R_IPA), _R(R_IX), _R(R_IY), _R(R_IPA)))]
        out += self._leader()
        # the nearest active lane below (none: this lane itself; its value is then not used)
        out += [_ins("clz", ("b32",), (_R(R_IP), _R(R_IL))),
                _ins("sub", ("u32",), (_R(R_IP), _I(31), _R(R_IP)))]

        def votes(mask, _first: bool) -> list[Statement]:
            if load:   # granule keys: 32 bits of addr >> read_gshift (exact in a range of <= 2^37 B)
                v = [_ins("ld", ("const", "u8"), (_R(R_IH), Address(Symbol(cd), abi.CDESC_READ_GSHIFT_OFF))),
                     _ins("shr", ("b64",), (_R(R_IX), addr, _R(R_IH))),
                     _ins("cvt", ("u32", "u64"), (_R(R_IK), _R(R_IX))),
                     _ins("shfl", ("sync", "idx", "b32"), (_R(R_IQ), _R(R_IK), _R(R_IP), _I(31), mask)),
                     _ins("setp", ("le", "or", "u32"), (_R(R_IPB), _R(R_IQ), _R(R_IK), _R(R_IPL)))]
            else:      # stores: the lane below ends at or before this lane's first byte
                v = [_ins("add", ("u64",), (_R(R_IX), addr, _I(nb))),
                     _ins("mov", ("b64",), (Vector((_R(R_IK), _R(R_IH))), _R(R_IX))),
                     _ins("shfl", ("sync", "idx", "b32"), (_R(R_IQ), _R(R_IK), _R(R_IP), _I(31), mask)),
                     _ins("shfl", ("sync", "idx", "b32"), (_R(R_IH), _R(R_IH), _R(R_IP), _I(31), mask)),
                     _ins("mov", ("b64",), (_R(R_IY), Vector((_R(R_IQ), _R(R_IH))))),
                     _ins("setp", ("le", "or", "u64"), (_R(R_IPB), _R(R_IY), addr, _R(R_IPL)))]
            return v + [_ins("and", ("pred",), (_R(R_IPA), _R(R_IPA), _R(R_IPB))),
                        _ins("vote", ("sync", "all", "pred"), (_R(R_IPA), _R(R_IPA), mask))]
        Lmulti, Lserve = self._label(), self._label()
        out += self._by_mask(votes, Lmulti, Lserve)
        out += [Label(Lserve),
                _ins("ld", ("const", "u64"), (_R(R_IY), Address(Symbol(cd), abi.CDESC_INL_READ_DELAY_OFF if load
                                                               else abi.CDESC_INL_WRITE_DELAY_OFF))),
                _ins("add", ("u64",), (_R(out_reg), _R(R_IT), _R(R_IY)))]
        if load:
            out += [_ins("add", ("u32",), (_R(R_ICR), _R(R_ICR), _I(1)), Guard(_R(R_IPL))),
                    _ins("setp", ("ne", "or", "u32"), (_R(R_IPB), _R(R_IQ), _R(R_IK), _R(R_IPL))),
                    _ins("add", ("u32",), (_R(R_IGR), _R(R_IGR), _I(1)), Guard(_R(R_IPB))),
                    _ins("add", ("u64",), (_R(R_IBR), _R(R_IBR), _I(nb)))]
        else:
            out += [_ins("add", ("u32",), (_R(R_ICW), _R(R_ICW), _I(1)), Guard(_R(R_IPL))),
                    _ins("add", ("u64",), (_R(R_IBW), _R(R_IBW), _I(nb)))]
        out += self._time_served(_R(R_IT))          # R_IT: the site's read (before its ask, if it asked)
        out += [_ins("bra", ("uni",), (LabelRef(Ldone),)), Label(Lmulti)]
        if self.multi:
            out += self._multi_range_check(addr, until, Lserve, Lslow)
        out.append(Label(Lslow))
        out.append(_call("__hb_issue", [("b64", addr), ("b32", _I(nb)), ("b32", _I(d.flags | abi.HBF_F_ACTIVE)),
                                        ("b32", _I(site))], ret=out_reg))
        out.append(Label(Ldone))
        self.report.sites += 1

    def _multi_range_check(self, addr, until: str, Lserve: str, Lslow: str) -> list[Statement]:
        """Where the warp's vote on r0 failed (ABI 6, hbf_abi.h "Inline issue"): with a multi-range
        descriptor (inl_nranges != 0; else straight to ``Lslow``, a uniform branch) the site checks again over
        the table's inl_nranges entries (``_table_walk``: an entry is 32-byte aligned, so an aligned access of
        at most 32 B that starts in it ends in it), with the until (``R_IT < until``: what R_IPA held before
        the range check) and the order (R_IPB, kept from the first pass), and a second warp vote: all in a
        range, in order, the until in force -> ``Lserve`` (the counts and the future of the first pass's
        leader and keys), else ``Lslow``. A warp whose lanes all hit r0 never comes here: the single-range
        case runs exactly the code it ran before ABI 6."""
        cd = abi.CDESC_GLOBAL
        out = [_ins("ld", ("const", "u32"), (_R(R_IH), Address(Symbol(cd), abi.CDESC_INL_NRANGES_OFF))),
               _ins("setp", ("eq", "u32"), (_R(R_IPA), _R(R_IH), _I(0))),
               _ins("bra", (), (LabelRef(Lslow),), Guard(_R(R_IPA))),
               _ins("setp", ("lt", "and", "s64"), (_R(R_IPA), _R(R_IT), _R(until), _R(R_IPB))),
               _ins("setp", ("eq", "u32"), (_R(R_IPB), _R(R_IH), _I(0)))]        # false (ih != 0): no entry yet
        out += self._table_walk([(addr, lambda: [_ins("setp", ("lt", "or", "u64"),
                                                      (_R(R_IPB), _R(R_IX), _R(R_IY), _R(R_IPB)))])])
        out += [_ins("and", ("pred",), (_R(R_IPA), _R(R_IPA), _R(R_IPB))),
                _ins("vote", ("sync", "all", "pred"), (_R(R_IPA), _R(R_IPA), _R(R_IM))),
                _ins("bra", (), (LabelRef(Lslow),), Guard(_R(R_IPA), True)),
                _ins("bra", ("uni",), (LabelRef(Lserve),))]
        self.report.multi_checks += 1
        return out

    def _table_walk(self, checks: list) -> list[Statement]:
        """A uniform loop over the descriptor's inl_nranges (in R_IH, not 0; at most INL_MAX_RANGES) table
        entries: per entry and per (addr, emit) of ``checks``, R_IX = addr - inl_base[k] and R_IY =
        inl_len[k], then ``emit()`` (its test ``R_IX < R_IY``). The entries are read through a pointer that
        moves with the loop (R_IR), not at fixed offsets: ptxas hoists loads of fixed constant addresses out
        of the kernel's loops, and the unrolled table (8 x 64 bits) then sat in uniform registers for the
        whole kernel, live across every helper call (helper ABI 6 cost the stream kernel 104 -> 128
        registers, layernorm 128 -> 160 / 168 -> 208; docs/RESULTS.md stop 45, wt/regs). R_IH is consumed."""
        cd = abi.CDESC_GLOBAL
        Lloop = self._label()
        out: list[Statement] = [
            _ins("min", ("u32",), (_R(R_IH), _R(R_IH), _I(abi.INL_MAX_RANGES))),
            _ins("mov", ("u64",), (_R(R_IR), Symbol(cd))),
            Label(Lloop)]
        for addr, emit in checks:
            out += [_ins("ld", ("const", "u64"), (_R(R_IY), Address(_R(R_IR), abi.CDESC_INL_BASE_OFF))),
                    _ins("sub", ("u64",), (_R(R_IX), addr, _R(R_IY))),
                    _ins("ld", ("const", "u64"), (_R(R_IY), Address(_R(R_IR), abi.CDESC_INL_LEN_OFF)))]
            out += emit()
        out += [_ins("add", ("u64",), (_R(R_IR), _R(R_IR), _I(8))),
                _ins("sub", ("u32",), (_R(R_IH), _R(R_IH), _I(1))),
                _ins("setp", ("ne", "u32"), (_R(R_OUT), _R(R_IH), _I(0))),
                _ins("bra", ("uni",), (LabelRef(Lloop),), Guard(_R(R_OUT)))]
        return out

    def _issue_call(self, inst: Instruction, d: Decision, addr, out_reg: str, site: int,
                    out: list[Statement]) -> None:
        nbytes: object = _I(d.nbytes)
        extra = None
        if d.kind == "cpasync":
            extra = self._cpasync_masks(inst, out)
            if extra and extra[0] is not None:
                nbytes = extra[0]
            extra = extra[1] if extra else None
        flags = self._flags_code(inst, d.flags, out, extra)
        out.append(_call("__hb_issue", [("b64", addr), ("b32", nbytes), ("b32", flags), ("b32", _I(site))],
                         ret=out_reg))
        self.report.sites += 1

    # ---- issue groups (HBFCC_GROUP_ISSUES) ------------------------------------------------------
    def _lower_groups(self, code: list) -> list[Statement]:
        """Every run of adjacent inline load issues (_GSite, with the hoisting copies between them:
        pure writes of fresh hbfcc registers, moved ahead of the run) becomes one group (_group_code),
        at most GROUP_MAX sites each. With HBFCC_MERGE_LOADS the run's sites are first cut into merge
        sets (_merge_sets: adjacent loads of one span, one request each) and the groups take whole sets."""
        out: list[Statement] = []
        i, n = 0, len(code)
        while i < n:
            if type(code[i]) is not _GSite:
                out.append(code[i])
                i += 1
                continue
            sites: list[_GSite] = []
            moved: list[Statement] = []
            pending: list[Statement] = []
            j = i
            while j < n:
                st = code[j]
                if type(st) is _GSite:
                    moved += pending
                    pending = []
                    sites.append(st)
                elif _is_copy(st):
                    pending.append(st)
                else:
                    break
                j += 1
            if not self.merge:
                out += moved
                for c in range(0, len(sites), GROUP_MAX):
                    out += self._group_code(sites[c:c + GROUP_MAX])
                out += pending
            else:
                k = i                       # the copies right before the run (the first site's): resolved too
                while k > 0 and _is_copy(code[k - 1]):
                    k -= 1
                out += self._merged_run(code[i:j], sites, code[k:i])
            i = j
        return out

    def _merged_run(self, run: list, sites: list["_GSite"], before: list) -> list[Statement]:
        """HBFCC_MERGE_LOADS: a run's groups of merge sets (_merge_sets, _merge_groups), each group right after
        the copies its sites need and right before the loads moved with its sites (HBFCC_HOIST_LOADS): a copy
        then lives from its group to its load, not across the whole run (a run of 64 hoisted scalar loads made
        ptxas spill 1.3 KB with every copy ahead of the run). The copies write fresh registers and the loads
        keep their order; only timing code moves between them. ``before``: the copies right before the run (already
        placed), which its addresses may read."""
        out: list[Statement] = []
        pos = {id(st): p for p, st in enumerate(run)}
        done = 0
        for chunk, reqs in self._merge_groups(sites, self._merge_sets(sites, before + run)):
            last = pos[id(chunk[-1])]
            out += [st for st in run[done:last] if type(st) is not _GSite]
            done = last + 1
            loads = [ld for st in chunk for ld in self._moved_after.pop(id(st), [])]
            if len(chunk) <= self.loads_first and self._loads_first_ok(loads, chunk):
                # HBFCC_LOADS_FIRST: the group's loads in flight while its timing code runs (the code's dependent
                # chain, ~190 instructions a group on the stream reduce, then overlaps the loads' latency) -- all of
                # it but the band check, the clock and the until check: _group_code puts the loads after those, so
                # a thread's ask (a helper call, which waits for every load in flight) never waits for them
                out += self._group_code(chunk, reqs, loads)
                self.report.loads_first += len(chunk)
            else:
                out += self._group_code(chunk, reqs) + loads
        out += run[done:]
        return out

    @staticmethod
    def _loads_first_ok(loads: list, chunk: list["_GSite"]) -> bool:
        """HBFCC_LOADS_FIRST may put a group's moved loads before its timing code: every site of the group has its
        load moved with it (else a load stays where it was and the group's order is kept), and no load writes a
        register the group's code reads -- the sites' addresses and guards are hbfcc's own copies (%__hb_x_*), which
        no program load writes; checked, not assumed. The timing code touches no program memory, so a weak load may
        pass it: the value is the same, and its modeled time is still enforced where it is used (the wait)."""
        if not loads or not chunk:
            return False
        n_loads = sum(1 for st in loads if type(st) is Instruction and st.opcode == "ld")
        if n_loads != len(chunk):
            return False
        written = set().union(*(st.defs() for st in loads if type(st) is Instruction))
        return not any(r.startswith("%__hb_") for r in written)

    # ---- merged requests (HBFCC_MERGE_LOADS) ---------------------------------------------------
    def _merge_sets(self, sites: list["_GSite"], run: list) -> list["_MergeReq"]:
        """The run's sites cut into merge sets, in order: a site joins the set before it when both are plain
        loads of one kind (_merge_key: ld of the global space, .nc or not, the same cache modifiers; no
        generic, volatile, acquire, relaxed or mmio load), their addresses are one register R plus constants
        (_merge_addr: R the same register at the group point, where every address of the group is computed),
        the set's span -- [min c, max c + width) over its members -- stays in one granule (_merge_span: proven,
        or at most 16 bytes checked per lane),
        the set has fewer than GROUP_MAX members, and between the first and the last member's load in the
        program there is only straight-line plain computation and weak loads (_merge_between: no store,
        atomic, reduction, fence, barrier, call, strong access, branch or label). Each set becomes one request
        (_MergeReq); a set of one is the site's own request, exactly as without merging."""
        val: dict = {}
        where: list = []
        for st in run:
            if type(st) is _GSite:
                where.append(self._merge_addr(st, val))
            else:
                _merge_copy(st, val)
        keys = [_merge_key(s) for s in sites]
        sets: list[list[int]] = []
        for x in range(len(sites)):
            cur = sets[-1] if sets else None
            r, k = where[x], keys[x]
            if cur is not None and r is not None and k is not None and len(cur) < GROUP_MAX \
                    and where[cur[0]] is not None and where[cur[0]][0] == r[0] and keys[cur[0]] == k:
                mem = cur + [x]
                span = _merge_span([(where[y][1], sites[y].d.nbytes) for y in mem])
                nds = [sites[y].node for y in mem]
                if span is not None and self._merge_between(min(nds), max(nds)):
                    cur.append(x)
                    continue
            sets.append([x])
        out = []
        for m in sets:
            if len(m) == 1:
                out.append(_MergeReq((m[0],), m[0], 0, False))
                continue
            lo, L, check = _merge_span([(where[y][1], sites[y].d.nbytes) for y in m])
            lead = min(m, key=lambda y: (where[y][1], y))
            verify = () if all(where[y][2] for y in m) else \
                tuple((y, where[y][1] - lo) for y in m if y != lead)
            out.append(_MergeReq(tuple(m), lead, L, check, verify))
        return out

    def _merge_addr(self, s: "_GSite", val: dict) -> Optional[tuple]:
        """(R, c, exact): the site's address is R plus c bytes at the group point (R a 64-bit register, or a
        candidate root of _merge_copy; the run's copies resolved through ``val``); exact: proven, else to be
        checked per lane. None when it is not of that form."""
        a = s.d.addr
        if a is None or type(a.base) is not Register or self.ctx.reg_type(a.base.name) in _32BIT_TYPES:
            return None
        r, c, exact = val.get(a.base.name, (a.base.name, 0, True))
        return r, c + a.offset, exact

    def _merge_between(self, a: int, b: int) -> bool:
        """Program nodes a .. b (the first and the last member's loads) are one straight-line run of plain
        computation and weak loads: nothing a merged request may not span."""
        F = self._hfacts
        if F is None:
            return False
        for t in range(a, b):
            if not F.sib[t] or not F.passable[t] or self._nodes[t][1].opcode == "st":
                return False
        return True

    def _merge_groups(self, sites: list["_GSite"], reqs: list["_MergeReq"]):
        """Whole requests packed into groups of at most GROUP_MAX sites, in order: (the group's sites, its
        requests with their members renumbered to the group's slots)."""
        groups: list[list[_MergeReq]] = [[]]
        n = 0
        for q in reqs:
            if groups[-1] and n + len(q.members) > GROUP_MAX:
                groups.append([])
                n = 0
            groups[-1].append(q)
            n += len(q.members)
        for g in groups:
            first = g[0].members[0]
            chunk = sites[first:first + sum(len(q.members) for q in g)]
            yield chunk, [replace(q, members=tuple(m - first for m in q.members), lead=q.lead - first,
                                  verify=tuple((m - first, dv) for m, dv in q.verify)) for q in g]

    def _site_alone(self, s: "_GSite", out: list[Statement]) -> None:
        """The site's code without a group (what HBFCC_GROUP_ISSUES=0 emits for it)."""
        self._node = s.node
        fut = f"{R_FUT}{s.k}"
        g = s.inst.guard
        if g is None:
            self._issue(s.inst, s.d, fut, out)
        else:
            self._issue(s.inst, s.d, R_TMP, out)
            out.append(_ins("mov", ("b64",), (_R(fut), _R(R_TMP)), g))

    def _group_prefetches(self, sites: list["_GSite"], addrs: list, reqs: Optional[list["_MergeReq"]]) -> list[Statement]:
        """HBFCC_PREFETCH_GROUP: before a group's timing code (its band checks, votes, clock, until check and
        counts, ~190 dependent instructions on the stream reduce), one L2 prefetch per request of the group at the
        address its load reads (the request's lead member for a merged request: its span is in one granule), so the
        lines come from DRAM while that code runs and the loads after it find them in L2. Without it the group's
        loads start only after its code: the unrolled stream reduce (two groups of 8 vector loads per thread) has
        each warp's next 4 KiB requested only once its group's code has run.

        Not HBFCC_LOADS_FIRST (the loads themselves first, stop 53-54): a prefetch has no destination, so it holds
        no register across the code and no call waits for it (ptxas makes a call wait for every load in flight).
        The same values: a prefetch is not a program access and is not timed (hbfcc leaves a program's prefetches
        native and untimed, docs/design.md §3.3). Guard: the load's own predicate (every member's, where a merged
        request's members share one), else none: a prefetch of an address no allocation holds does not fault on the
        cards measured (bench/probes/prefetch_probe.cu, as for HBFCC_PREFETCH_NEXT)."""
        out: list[Statement] = []
        for q in reqs if reqs is not None else [_MergeReq((j,), j, 0, False) for j in range(len(sites))]:
            lead = sites[q.lead]
            guards = {(m.inst.guard.reg.name, m.inst.guard.negated) if m.inst.guard is not None else None
                      for m in (sites[y] for y in q.members)}
            g = lead.inst.guard if len(guards) == 1 else None
            space = ("global",) if lead.inst.state_space == "global" else ()
            out.append(_ins("prefetch", space + ("L2",), (Address(addrs[q.lead], 0),), g))
        self.report.group_prefetches += len(out)
        return out

    def _group_code(self, sites: list["_GSite"], reqs: Optional[list["_MergeReq"]] = None,
                    loads: Optional[list[Statement]] = None) -> list[Statement]:
        """Adjacent inline load issues served as one group: the per-site work of the inline path
        (_inline_issue) without divergence, and what it does once per warp-request done once per group.

        Per site j, a predicate P_j: this lane accesses (its guard holds and addr - lo < span, the fast
        reject of _issue). No lane of the warp accesses at any site: every future 0, as each site alone
        gives (a uniform branch). Else one %globaltimer read and one until check for the group (a lane
        that accesses somewhere and whose until has passed asks __hb_inline_until first, as alone), and
        per site, with the lanes that access only: the nearest accessing lane below (a ballot), its
        granule key (a shfl), ascending order, the counts of _inline_issue (the lowest accessing lane one
        request, each lane whose granule differs from its predecessor's one granule, every accessing lane
        its bytes) into group counts, and the future (issue time + the descriptor's inline delay for an
        accessing lane, 0 for the others). One warp vote decides: every lane accessing somewhere has an
        until in force, R_CDB holds (the band ends with the descriptor's one range, which starts 32-byte
        aligned and whose length is a multiple of the function's widest group access, so an access that
        starts in the range ends in it: accesses are naturally aligned and at most 32 bytes), every
        accessing lane is in the range (not in the guard zone of R_GZ bytes below it that the band also
        covers), and at every site its lanes ascend. Then the group counts go into the thread's
        counters; else each site runs alone, exactly as without groups (it overwrites the futures).

        ``reqs`` (HBFCC_MERGE_LOADS, _merge_sets): the group's requests; None: every site its own. A merged
        request of sites J is counted as one access of its span: its lanes are those accessing at any member (P =
        OR of the P_j, in R_IPA), its ballot, predecessor, granule key (of the span's start, the lead member's
        address) and order once; one request, one granule where the key differs; the bytes stay per member
        (each P_j lane adds its member's width: program bytes exact) and so do the futures (selp on P_j, the
        group's one deadline). A span its members' alignment does not prove to be in one 32-byte block is checked
        per lane to be in one granule ((start ^ (start + span - 1)) >> read_gshift == 0, into R_GOK: the one key
        counts its granules exactly; each member's range check is its own, as before); a candidate member
        (_merge_copy) is checked to be at its distance from the start. A lane where a check fails fails the group's
        vote: each site runs alone, its own request.

        ``loads`` (HBFCC_LOADS_FIRST): the group's program loads, placed after the band check, the warp's any-vote,
        the clock read and the until check (with its rare ask) and before the rest: the loads are in flight while
        the rest runs, and the ask -- a call, which ptxas makes wait for every load in flight (bench/sass_ctrl.py:
        its wait mask holds the loads' scoreboard) -- comes before them. A warp none of whose lanes accesses skips
        the until check as without loads, runs the loads, then takes the group's zero path (R_GW carries the
        any-vote across them)."""
        cd = abi.CDESC_GLOBAL
        self.group_slots = max(self.group_slots, len(sites))
        self.group_wmax = max(self.group_wmax, *(s.d.nbytes for s in sites))
        self.report.issue_groups += 1
        self.report.grouped_issues += len(sites)
        Lgo, Lslow, Lzero, Ldone = self._label(), self._label(), self._label(), self._label()
        out: list[Statement] = []
        clock = [_ins("mov", ("u64",), (_R(R_IT), _R("%globaltimer")))]
        if self.early_clock:
            # HBFCC_EARLY_CLOCK (default 0): the group's issue time is read before hbfcc's own setup (addresses, band
            # checks, the group's first vote), where the program would issue its loads, not after it. H100, stop 53: a
            # Little round 21.25 -> 21.09 us of its 20, but the unrolled reduce 168 -> 212 registers (x1.77 -> x2.34)
            out += clock
            clock = []
        addrs = []
        for j, s in enumerate(sites):
            self._node = s.node
            tmp: list[Statement] = []
            a = self._addr_code(s.d, tmp)
            if tmp:                        # a computed address: into the slot's own register
                slot = f"{R_GA}{j}"
                tmp = [replace(x, operands=tuple(_R(slot) if type(o) is Register and o.name == R_ADDR else o
                                                 for o in x.operands)) for x in tmp]
                a = _R(slot)
            out += tmp
            addrs.append(a)
        if self.prefetch_group and loads is None:
            out += self._group_prefetches(sites, addrs, reqs)
        for j, s in enumerate(sites):
            P = _R(f"{R_GP}{j}")
            g = s.inst.guard
            out.append(_ins("sub", ("u64",), (_R(R_BAND), addrs[j], _R(R_LO))))
            if g is None:
                out.append(_ins("setp", ("lt", "u64"), (P, _R(R_BAND), _R(R_SPAN))))
            else:
                out.append(_ins("setp", ("lt", "and", "u64"),
                                (P, _R(R_BAND), _R(R_SPAN), Negated(g.reg) if g.negated else g.reg)))
            out.append(_ins("mov", ("pred",), (_R(R_GANY), P)) if j == 0 else
                       _ins("or", ("pred",), (_R(R_GANY), _R(R_GANY), P)))
            # an accessing lane must be in the descriptor's range, not in the band's guard zone below it
            if j == 0:
                out.append(_ins("setp", ("ge", "or", "u64"), (_R(R_GIN), _R(R_BAND), _R(R_GZ), Negated(P))))
            else:
                out += [_ins("setp", ("ge", "or", "u64"), (_R(R_IPB), _R(R_BAND), _R(R_GZ), Negated(P))),
                        _ins("and", ("pred",), (_R(R_GIN), _R(R_GIN), _R(R_IPB)))]
        Lpre = self._label() if loads is not None else Lzero
        out += [*self._group_mask(),
                _ins("vote", ("sync", "any", "pred"), (_R(R_IPB), _R(R_GANY), _R(R_IM)))]
        if loads is not None:
            out.append(_ins("mov", ("pred",), (_R(R_GW), _R(R_IPB))))
        out += [_ins("bra", (), (LabelRef(Lpre),), Guard(_R(R_IPB), True)),
                # the until, as each site alone checks it
                *clock,
                _ins("setp", ("lt", "s64"), (_R(R_IPA), _R(R_IT), _R(R_IUR))),
                _ins("bra", (), (LabelRef(Lgo),), Guard(_R(R_IPA))),
                _ins("bra", (), (LabelRef(Lgo),), Guard(_R(R_GANY), True)),
                _ins("neg", ("s64",), (_R(R_IX), _R(R_IUR))),
                _ins("setp", ("lt", "s64"), (_R(R_IPB), _R(R_IT), _R(R_IX))),
                _ins("bra", (), (LabelRef(Lgo),), Guard(_R(R_IPB)))]
        out += self._ask_until(abi.HBF_OP_LOAD, R_IUR)
        out += [_ins("setp", ("lt", "s64"), (_R(R_IPA), _R(R_IT), _R(R_IUR))),
                Label(Lgo)]
        if loads is not None:
            out += [Label(Lpre), *loads, _ins("bra", (), (LabelRef(Lzero),), Guard(_R(R_GW), True))]
            self.group_lf = True
        out += [
                # R_GIN: the until in force, the band is r0 and the lane in it -- or it accesses nowhere
                _ins("and", ("pred",), (_R(R_GIN), _R(R_GIN), _R(R_IPA))),
                _ins("and", ("pred",), (_R(R_GIN), _R(R_GIN), _R(R_CDB))),
                _ins("not", ("pred",), (_R(R_IPB), _R(R_GANY))),
                _ins("or", ("pred",), (_R(R_GIN), _R(R_GIN), _R(R_IPB))),
                _ins("ld", ("const", "u64"), (_R(R_IY), Address(Symbol(cd), abi.CDESC_INL_READ_DELAY_OFF))),
                _ins("add", ("u64",), (_R(R_IT), _R(R_IT), _R(R_IY))),          # the group's deadline
                _ins("ld", ("const", "u8"), (_R(R_IH), Address(Symbol(cd), abi.CDESC_READ_GSHIFT_OFF))),
                _ins("mov", ("b32",), (_R(R_GC), _I(0))),
                _ins("mov", ("b32",), (_R(R_GG), _I(0))),
                _ins("mov", ("b32",), (_R(R_GB), _I(0)))]
        Lmulti, Lcount = self._label(), self._label()
        out += self._by_mask(lambda mask, first: self._group_votes(sites, addrs, reqs, mask, first), Lmulti, Lcount,
                             full=len(sites) <= self.full_warp)
        out += [Label(Lcount),
                _ins("add", ("u32",), (_R(R_ICR), _R(R_ICR), _R(R_GC))),
                _ins("add", ("u32",), (_R(R_IGR), _R(R_IGR), _R(R_GG))),
                _ins("cvt", ("u64", "u32"), (_R(R_IX), _R(R_GB))),
                _ins("add", ("u64",), (_R(R_IBR), _R(R_IBR), _R(R_IX)))]
        if self.itime:
            # the group's own time once per warp: from its clock read (R_IT is now that read + the read delay) on the
            # lowest lane of the group's active lanes (R_IM; R_IPL held the last site's leader)
            out += [_ins("and", ("b32",), (_R(R_IL), _R(R_LMLT), _R(R_IM))),
                    _ins("setp", ("eq", "u32"), (_R(R_IPL), _R(R_IL), _I(0))),
                    _ins("ld", ("const", "u64"), (_R(R_IY), Address(Symbol(cd), abi.CDESC_INL_READ_DELAY_OFF))),
                    _ins("sub", ("u64",), (_R(R_IY), _R(R_IT), _R(R_IY)))]
            out += self._time_served(_R(R_IY))
        out += [_ins("bra", ("uni",), (LabelRef(Ldone),)),
                Label(Lmulti)]
        if self.multi:
            out += self._group_multi_check(sites, addrs, Lcount, Lslow)
        out.append(Label(Lslow))
        if self.fast_groups and len(sites) > 1:
            out += self._group_call(sites, addrs, Ldone)
        for s in sites:
            self._site_alone(s, out)
        out += [_ins("bra", ("uni",), (LabelRef(Ldone),)), Label(Lzero)]
        out += [_ins("mov", ("b64",), (_R(f"{R_FUT}{s.k}"), _I(0)), s.inst.guard) for s in sites]
        out.append(Label(Ldone))
        return out

    def _group_votes(self, sites: list["_GSite"], addrs: list, reqs: Optional[list["_MergeReq"]], mask,
                     count: bool) -> list[Statement]:
        """_group_code's per-request part (see there), its collectives over ``mask`` (_by_mask), then the group's
        one vote: every lane accessing somewhere in the range, in order, its until in force (R_IPA)."""
        out: list[Statement] = []
        for q in (reqs if reqs is not None else [_MergeReq((j,), j, 0, False) for j in range(len(sites))]):
            j = q.lead
            if len(q.members) == 1:
                P = _R(f"{R_GP}{j}")
            else:                                   # the request's lanes: those accessing at any member
                P = _R(R_IPA)
                out.append(_ins("mov", ("pred",), (P, _R(f"{R_GP}{q.members[0]}"))))
                out += [_ins("or", ("pred",), (P, P, _R(f"{R_GP}{m}"))) for m in q.members[1:]]
                if count:
                    self.report.merged_requests += 1
                    self.report.merged_sites += len(q.members)
            out += [_ins("vote", ("sync", "ballot", "b32"), (_R(R_IP), P, mask)),
                    _ins("and", ("b32",), (_R(R_IP), _R(R_IP), _R(R_LMLT))),    # accessing lanes below
                    _ins("setp", ("eq", "u32"), (_R(R_IPL), _R(R_IP), _I(0))),  # none: the lowest
                    _ins("clz", ("b32",), (_R(R_IP), _R(R_IP))),
                    _ins("sub", ("u32",), (_R(R_IP), _I(31), _R(R_IP))),
                    _ins("shr", ("b64",), (_R(R_IX), addrs[j], _R(R_IH))),
                    _ins("cvt", ("u32", "u64"), (_R(R_IK), _R(R_IX))),
                    _ins("shfl", ("sync", "idx", "b32"), (_R(R_IQ), _R(R_IK), _R(R_IP), _I(31), mask)),
                    _ins("setp", ("le", "or", "u32"), (_R(R_IPB), _R(R_IQ), _R(R_IK), _R(R_IPL)))]
            # R_GOK: the lanes ascend at every site this lane accesses (kept apart from R_GIN for the
            # multi-range re-check, which needs the order without r0)
            if q.members[0] == 0:
                out += [_ins("not", ("pred",), (_R(R_GOK), P)),
                        _ins("or", ("pred",), (_R(R_GOK), _R(R_GOK), _R(R_IPB)))]
            else:
                out.append(_ins("and", ("pred",), (_R(R_GOK), _R(R_GOK), _R(R_IPB)), Guard(P)))
            out += [_ins("setp", ("ne", "or", "u32"), (_R(R_IPB), _R(R_IQ), _R(R_IK), _R(R_IPL))),
                    _ins("and", ("pred",), (_R(R_IPB), _R(R_IPB), P)),
                    _ins("add", ("u32",), (_R(R_GG), _R(R_GG), _I(1)), Guard(_R(R_IPB))),
                    _ins("and", ("pred",), (_R(R_IPL), _R(R_IPL), P)),
                    _ins("add", ("u32",), (_R(R_GC), _R(R_GC), _I(1)), Guard(_R(R_IPL)))]
            if q.check:                             # the span in one granule (R_IH: its shift), on every lane of it
                out += [_ins("add", ("u64",), (_R(R_IX), addrs[j], _I(q.span - 1))),
                        _ins("xor", ("b64",), (_R(R_IX), _R(R_IX), addrs[j])),
                        _ins("shr", ("b64",), (_R(R_IX), _R(R_IX), _R(R_IH))),
                        _ins("setp", ("eq", "u64"), (_R(R_IPB), _R(R_IX), _I(0))),
                        _ins("and", ("pred",), (_R(R_GOK), _R(R_GOK), _R(R_IPB)), Guard(P))]
            for m, dv in q.verify:                  # a candidate member: where it is the start's + its distance
                out += [_ins("sub", ("u64",), (_R(R_IX), addrs[m], addrs[j])),
                        _ins("setp", ("eq", "u64"), (_R(R_IPB), _R(R_IX), _I(dv))),
                        _ins("and", ("pred",), (_R(R_GOK), _R(R_GOK), _R(R_IPB)), Guard(_R(f"{R_GP}{m}")))]
            for m in q.members:
                s, Pm = sites[m], _R(f"{R_GP}{m}")
                out += [_ins("add", ("u32",), (_R(R_GB), _R(R_GB), _I(s.d.nbytes)), Guard(Pm)),
                        _ins("selp", ("b64",), (_R(f"{R_FUT}{s.k}"), _R(R_IT), _I(0), Pm), s.inst.guard)]
        return out + [_ins("and", ("pred",), (_R(R_IPA), _R(R_GOK), _R(R_GIN))),
                      _ins("vote", ("sync", "all", "pred"), (_R(R_IPA), _R(R_IPA), mask))]

    def _by_mask(self, section, Lfail: str, Lpass: str, full: bool = True) -> list[Statement]:
        """``section(mask, first)``: an inline path's collectives over ``mask`` ending in a warp vote into R_IPA;
        a lane whose vote failed goes to ``Lfail``, else on to ``Lpass`` (the caller's label, right after).
        Without HBFCC_FULL_WARP the mask is R_IM (_group_mask: the group's lanes, which ptxas cannot prove
        warp-uniform, so every collective checks each lane's own mask: ~3-5 more SASS each, MATCH.ANY among them,
        on the path's dependent chain). With it the section is emitted twice: where R_IM is the whole warp (all 32
        lanes ran _group_mask's activemask together, so every lane sees the whole mask and takes the same branch)
        its collectives take the constant full mask, which ptxas compiles without the per-lane check -- correct
        there since every lane of the warp executes them (.sync waits for all 32); any other group runs the
        checked copy, as before. The same values either way (the mask is the same set). ``full`` False (a group of
        more than SMALL_GROUP_SITES sites): the checked copy only."""
        if not (self.full_warp and full):
            return section(_R(R_IM), True) + [_ins("bra", (), (LabelRef(Lfail),), Guard(_R(R_IPA), True))]
        Lfull = self._label()
        self.report.full_warp_paths += 1
        return ([_ins("setp", ("eq", "b32"), (_R(R_IFW), _R(R_IM), Immediate(FULL_MASK))),
                 _ins("bra", (), (LabelRef(Lfull),), Guard(_R(R_IFW)))]
                + section(_R(R_IM), True)
                + [_ins("bra", (), (LabelRef(Lfail),), Guard(_R(R_IPA), True)),
                   _ins("bra", ("uni",), (LabelRef(Lpass),)),
                   Label(Lfull)]
                + section(Immediate(FULL_MASK), False)
                + [_ins("bra", (), (LabelRef(Lfail),), Guard(_R(R_IPA), True))])

    def _group_multi_check(self, sites: list["_GSite"], addrs: list, Lcount: str, Lslow: str) -> list[Statement]:
        """Where the group's vote failed (ABI 6): with a multi-range descriptor (inl_nranges != 0; else
        ``Lslow`` at once, a uniform branch) the group checks again over the table's entries (one
        ``_table_walk`` for all its sites: R_IQ = the sites this lane accesses, R_IK = those found in some
        entry, a bit each), with the until (the clock is the group's deadline less the read delay), the order
        (R_GOK) and a second warp vote: every lane that accesses somewhere in order, its until in force, each
        access in some range -> ``Lcount`` (the counts and futures of the first pass), else ``Lslow``. A group
        whose lanes all hit r0 never comes here."""
        cd = abi.CDESC_GLOBAL
        out = [_ins("ld", ("const", "u32"), (_R(R_IH), Address(Symbol(cd), abi.CDESC_INL_NRANGES_OFF))),
               _ins("setp", ("eq", "u32"), (_R(R_IPA), _R(R_IH), _I(0))),
               _ins("bra", (), (LabelRef(Lslow),), Guard(_R(R_IPA))),
               _ins("ld", ("const", "u64"), (_R(R_IY), Address(Symbol(cd), abi.CDESC_INL_READ_DELAY_OFF))),
               _ins("sub", ("u64",), (_R(R_IX), _R(R_IT), _R(R_IY))),
               _ins("setp", ("lt", "s64"), (_R(R_IPA), _R(R_IX), _R(R_IUR))),
               _ins("not", ("pred",), (_R(R_IPB), _R(R_GANY))),
               _ins("or", ("pred",), (_R(R_IPA), _R(R_IPA), _R(R_IPB))),
               _ins("and", ("pred",), (_R(R_IPA), _R(R_IPA), _R(R_GOK))),
               _ins("mov", ("b32",), (_R(R_IQ), _I(0))),
               _ins("mov", ("b32",), (_R(R_IK), _I(0)))]
        out += [_ins("or", ("b32",), (_R(R_IQ), _R(R_IQ), _I(1 << j)), Guard(_R(f"{R_GP}{j}")))
                for j in range(len(sites))]

        def hit(j):
            return lambda: [_ins("setp", ("lt", "u64"), (_R(R_IPB), _R(R_IX), _R(R_IY))),
                            _ins("or", ("b32",), (_R(R_IK), _R(R_IK), _I(1 << j)), Guard(_R(R_IPB)))]
        out += self._table_walk([(addrs[j], hit(j)) for j in range(len(sites))])
        out += [_ins("and", ("b32",), (_R(R_IK), _R(R_IK), _R(R_IQ))),
                _ins("setp", ("eq", "u32"), (_R(R_IPB), _R(R_IK), _R(R_IQ))),
                _ins("and", ("pred",), (_R(R_IPA), _R(R_IPA), _R(R_IPB))),
                _ins("vote", ("sync", "all", "pred"), (_R(R_IPA), _R(R_IPA), _R(R_IM))),
                _ins("bra", (), (LabelRef(Lslow),), Guard(_R(R_IPA), True)),
                _ins("bra", ("uni",), (LabelRef(Lcount),))]
        self.report.multi_checks += 1
        return out

    def _group_call(self, sites: list["_GSite"], addrs: list, Ldone: str) -> list[Statement]:
        """A group that is not served inline, served by one ``__hb_issue_group`` call (hbf_abi.h) where the
        descriptor allows it (inl_flags HBF_CDI_GROUP: the FAST source) and the warp is whole: the sites'
        addresses, which sites this lane accesses (pmask: bit j = P_j), their sizes (a byte each); lane j's
        answer is site j's future, each accessing lane takes it (shfl from lane j), the others get 0.
        HB_GROUP_SLOW (the helper served nothing), a partial warp or another source: each site alone."""
        cd = abi.CDESC_GLOBAL
        self.report.group_calls += 1
        Lalone = self._label()
        out: list[Statement] = [
            _ins("ld", ("const", "u32"), (_R(R_IK), Address(Symbol(cd), abi.CDESC_INL_FLAGS_OFF))),
            _ins("and", ("b32",), (_R(R_IK), _R(R_IK), _I(abi.HBF_CDI_GROUP))),
            _ins("setp", ("eq", "u32"), (_R(R_IPB), _R(R_IK), _I(0))),
            _ins("bra", (), (LabelRef(Lalone),), Guard(_R(R_IPB))),
            _ins("setp", ("ne", "b32"), (_R(R_IPB), _R(R_IM), _I(-1))),     # a partial warp
            _ins("bra", (), (LabelRef(Lalone),), Guard(_R(R_IPB))),
            _ins("mov", ("b32",), (_R(R_GC), _I(0)))]
        nbpack = 0
        for j, s in enumerate(sites):
            nbpack |= s.d.nbytes << (8 * j)
            out.append(_ins("or", ("b32",), (_R(R_GC), _R(R_GC), _I(1 << j)), Guard(_R(f"{R_GP}{j}"))))
        out += [_ins("st", ("local", "u64"), (Address(Symbol(GAL), 8 * j), addrs[j]), Guard(_R(f"{R_GP}{j}")))
                for j in range(len(sites))]
        out += [_ins("mov", ("u64",), (_R(R_IX), Symbol(GAL))),
                _ins("cvta", ("local", "u64"), (_R(R_IX), _R(R_IX))),
                _call("__hb_issue_group", [("b64", _R(R_IX)), ("b32", _R(R_GC)), ("b64", _I(nbpack)),
                                           ("b32", _I(self.node_site[sites[0].node]))], ret=R_IX),
                _ins("setp", ("eq", "s64"), (_R(R_IPB), _R(R_IX), _I(abi.HB_GROUP_SLOW))),
                _ins("bra", (), (LabelRef(Lalone),), Guard(_R(R_IPB))),
                _ins("mov", ("b64",), (Vector((_R(R_IK), _R(R_IQ))), _R(R_IX)))]
        # after the call the lanes' sites come from pmask, not from the P_j: predicates live across a call
        # take registers of their own (and ptxas fails to allocate them in some kernels); bit j of pmask
        # becomes an all-ones / zero mask of the future
        for j, s in enumerate(sites):
            out += [_ins("shfl", ("sync", "idx", "b32"), (_R(R_IH), _R(R_IK), _I(j), _I(31), _I(-1))),
                    _ins("shfl", ("sync", "idx", "b32"), (_R(R_IP), _R(R_IQ), _I(j), _I(31), _I(-1))),
                    _ins("shl", ("b32",), (_R(R_IL), _R(R_GC), _I(31 - j))),
                    _ins("shr", ("s32",), (_R(R_IL), _R(R_IL), _I(31))),
                    _ins("and", ("b32",), (_R(R_IH), _R(R_IH), _R(R_IL))),
                    _ins("and", ("b32",), (_R(R_IP), _R(R_IP), _R(R_IL))),
                    _ins("mov", ("b64",), (_R(f"{R_FUT}{s.k}"), Vector((_R(R_IH), _R(R_IP)))), s.inst.guard)]
        out += [_ins("bra", ("uni",), (LabelRef(Ldone),)), Label(Lalone)]
        return out

    def _cpasync_masks(self, inst: Instruction, out: list[Statement]):
        """cp.async's optional src-size (bytes really read; 0 = nothing read) and ignore-src
        predicate: bytes passed to the helper, and instructions that clear HBF_F_ACTIVE."""
        ops = inst.operands
        rest = list(ops[3:])
        if "L2::cache_hint" in inst.modifiers and rest:
            rest = rest[:-1]   # the cache policy
        nbytes = None
        clear: list[Statement] = []
        for o in rest:
            if type(o) is Immediate:
                v = int(o.value)
                nbytes = _I(v)
                if v == 0:
                    clear.append(_ins("and", ("b32",), (_R(R_FLAGS), _R(R_FLAGS), _I(~abi.HBF_F_ACTIVE & 0xFFFFFFFF))))
            elif type(o) is Register:
                rt = self.ctx.reg_type(o.name)
                if rt == ".pred":          # ignore-src
                    clear.append(_ins("and", ("b32",), (_R(R_FLAGS), _R(R_FLAGS),
                                                       _I(~abi.HBF_F_ACTIVE & 0xFFFFFFFF)), Guard(o, False)))
                else:                      # src-size
                    nbytes = o
                    clear.append(_ins("setp", ("eq", "u32"), (_R(R_PRED), o, _I(0))))
                    clear.append(_ins("and", ("b32",), (_R(R_FLAGS), _R(R_FLAGS),
                                                       _I(~abi.HBF_F_ACTIVE & 0xFFFFFFFF)), Guard(_R(R_PRED), False)))
            elif type(o) is Negated:   # !p as ignore-src
                clear.append(_ins("and", ("b32",), (_R(R_FLAGS), _R(R_FLAGS),
                                                   _I(~abi.HBF_F_ACTIVE & 0xFFFFFFFF)), Guard(o.reg, True)))
        return (nbytes, clear or None)

    # ---- the function ---------------------------------------------------------------------
    def run(self) -> Function:
        fn = self.fn
        body = fn.body or ()
        nodes, succ = build_cfg(fn).instruction_graph()
        decisions: list[Optional[Decision]] = []
        for path, inst in nodes:
            d = classify(inst, self.ctx)
            if d is not None and d.tma is not None:
                self.report.tma[d.cls] = self.report.tma.get(d.cls, 0) + 1
            if d is not None:
                self.report.count(d)
                if d.action == "refused":
                    self.report.refused.append({"line": inst.line, "instruction": str(inst), "class": d.cls,
                                                "reason": d.reason})
            if inst.opcode == "call":
                self._note_call(inst)
            decisions.append(d if d is not None and d.action == "rewritten" else None)

        # site ids in source order; per-site future registers for (non-wait-now) loads
        fut_of: dict[int, int] = {}
        for i, d in enumerate(decisions):
            if d is None:
                continue
            self.node_site[i] = self.site_id()
            if d.kind == "load" and not (d.flags & abi.HBF_F_WAIT_NOW):
                fut_of[i] = len(fut_of)
                self.fut_site[fut_of[i]] = self.node_site[i]

        self._fut_of = fut_of
        self._nodes = nodes
        IN = self._dataflow(nodes, succ, decisions, fut_of)
        src, lines = address_provenance([inst for _, inst in nodes], [d.addr if d else None for d in decisions])
        self.report.address_source, self.report.memory_address_lines = src, lines[:8]

        for i, (path, inst) in enumerate(nodes):
            pre: list[Statement] = []
            S = IN[i] or {}
            g = inst.guard
            # 1. consume: wait for every future that may be pending on a register this reads
            need: set[int] = set()
            if S:
                for r in self._uses[i]:
                    v = S.get(r)
                    if v:
                        need |= v
            ws: list[Statement] = []
            for k in (sorted(need) if need else ()):
                ws.extend(self._wait(f"{R_FUT}{k}", self._site_of_fut(k), g))
                self.report.waits += 1
            # 2. drain posted stores
            if _drains(inst):
                ws.extend(self._wait(R_DRAIN, (self.kidx << 16) | 0xFFFF, g))
                self.report.drains += 1
            pre.extend(ws)
            # 2b. bulk stores / reductions: every exit waits for all of the thread's bulk groups
            if inst.opcode in ("ret", "exit") and self.KB:
                for slot in range(0, self.KB + 1):
                    pre.extend(self._wait(f"{R_BG}{slot}", (self.kidx << 16) | 0xFFFD, g))
            # 2c. a token-form wait's phase: the parity of the barrier's phase before the arrive that made it
            if inst.opcode == "mbarrier" and self.ctx.tracks and inst.operands and type(inst.operands[0]) is Register \
                    and inst.operands[0].name in self._token_regs():
                pre.extend(self._token_capture(inst))
            # 3. kernel exit
            if inst.opcode in ("ret", "exit") and fn.is_entry:
                pre.extend(self._unless_detached(self._exit_calls(g)))
            # 4. access site
            d = decisions[i]
            self._node = i
            if d is not None and d.kind == "mbwait":
                self.post[path] = self._mbwait(inst, d)
            elif d is not None:
                h, chain = self._hoist_target(i, nodes, decisions, fut_of, IN) if self.hoist else (i, [])
                if h == i:
                    self._site_code(inst, d, i, fut_of, pre)
                else:
                    code, inst_h, d_h, ren = self._hoisted_site(h, inst, d, chain)
                    self._site_code(inst_h, d_h, i, fut_of, code)
                    self.hoisted.setdefault(nodes[h][0], []).extend(code)
                    self.report.hoisted_issues += 1
                    mv = self._movable_load(h, i, nodes, IN, inst_h, ren) if self.move_loads and not need else None
                    if mv is not None:
                        if self.merge and code and type(code[-1]) is _GSite:   # after its group (_lower_groups)
                            self._moved_after[id(code[-1])] = mv[0]
                        else:
                            self.moved.setdefault(nodes[h][0], []).extend(mv[0])
                        self.drop |= mv[1]
                        self.report.moved_loads += 1
            # 5. cp.async group accounting
            fam = _family(inst)
            if fam == "cp.async.commit_group":
                self._commit(inst, pre)
            elif fam == "cp.async.wait_group":
                n = int(inst.operands[0].value) if inst.operands and type(inst.operands[0]) is Immediate else 0
                ws = []
                for slot in range(n + 1, self.K + 1):
                    ws.extend(self._wait(f"{R_GRP}{slot}", (self.kidx << 16) | 0xFFFE, g))
                pre.extend(ws)
            elif fam == "cp.async.wait_all":
                ws = []
                for slot in range(0, self.K + 1):
                    ws.extend(self._wait(f"{R_GRP}{slot}", (self.kidx << 16) | 0xFFFE, g))
                pre.extend(ws)
            elif fam == "cp.async.bulk.commit_group":
                self.report.tma["tma.bulk.commit_group"] = self.report.tma.get("tma.bulk.commit_group", 0) + 1
                if self.KB:
                    self._commit_window(R_BG, self.KB, g, pre)
            elif fam == "cp.async.bulk.wait_group":
                rd = "read" in inst.modifiers
                cls = "tma.bulk.wait_group" + (".read" if rd else "")
                self.report.tma[cls] = self.report.tma.get(cls, 0) + 1
                # .read: the shared source may be reused; the modeled global write is not observable there
                # (it still completes at a later wait_group or at exit)
                if self.KB and not rd:
                    n = int(inst.operands[0].value)
                    for slot in range(n + 1, self.KB + 1):
                        pre.extend(self._wait(f"{R_BG}{slot}", (self.kidx << 16) | 0xFFFD, g))
            if pre:
                self.pre[path] = pre
        for path, code in self.hoisted.items():    # hoisted issues (then loads moved with them) run before
            self.pre[path] = code + self.moved.get(path, []) + self.pre.get(path, [])   # that point's own code
        for path, code in self.pre.items():
            if any(type(st) is _GSite for st in code):
                self.pre[path] = self._lower_groups(code)
        if self.prefetch_next:
            for path, code in self._next_iteration_prefetches(body, nodes, decisions).items():
                self.pre[path] = self.pre.get(path, []) + code
        if self.tma_regs or self.ctx.tracks and fn.is_entry:
            self.report.address_source = "memory"   # a copy's global addresses come from a descriptor
        new_body = self._rebuild(body, ())
        new_body = self._prologue(new_body, len(fut_of))
        new_body = self._with_native_version(new_body, body)
        self.report.admitted = not self.report.refused
        self.report.max_group_sites = self.group_slots
        if self.report.refused:
            self.report.not_admitted_reasons.append(
                f"{len(self.report.refused)} refused memory operation(s)")
        return replace(fn, body=tuple(new_body))

    def _next_iteration_prefetches(self, body, nodes, decisions) -> dict[tuple[int, ...], list[Statement]]:
        """HBFCC_PREFETCH_NEXT: before a loop's back-edge, an L2 prefetch of every address its timed loads will read
        in the next iteration, on the back-edge's own predicate (only when that iteration runs).

        Why: the plain build's ptxas unrolls a streaming loop and has the next iterations' loads in flight (16 per
        thread in the stream reduce); in the instrumented loop each iteration's issue group -- its branches and
        calls -- keeps ptxas from moving the next loads above it, so a warp has one iteration's loads in flight and
        the kernel is latency-bound (stop 53: 4 blocks/SM, DRAM 52 %). A prefetch carries no data to the program
        (hbfcc leaves prefetches native and untimed) and changes no value; it only brings the lines into L2 while
        the group's code and the use run, where the next iteration's (timed) loads find them.

        Which loops: a back-edge ``@%p bra L`` (guarded) at the top level of the body to a label before it, whose
        loop body is one straight run of top-level instructions (no label, block or other branch in it). Which
        loads: the rewritten global (or generic) loads in that run whose address is ``[%r + k]`` with ``%r`` an
        induction register -- written in the loop only by ``add.s64/u64 %r, %r, imm`` -- or a register the loop
        writes once as ``add %r2, %r, imm`` from one (Triton's second vector of a block): the next address is then
        known from the register at the back-edge, the step and the order of the writes. Anything else: no
        prefetch. With HBFCC_PREFETCH_NEXT=N the next N iterations' addresses (a step further each; those past the
        loop's end are still prefetched: the next program's data, or nothing). A prefetch may name an address the
        next iteration's load masks off (a tail); it is a hint, never a fault on the cards measured
        (bench/probes/prefetch_probe.cu)."""
        labels = {st.name: k for k, st in enumerate(body) if type(st) is Label}
        idx_of = {path: i for i, (path, _) in enumerate(nodes)}
        out: dict[tuple[int, ...], list[Statement]] = {}
        for j, st in enumerate(body):
            if type(st) is not Instruction or st.opcode != "bra" or st.guard is None or not st.operands \
                    or type(st.operands[0]) is not LabelRef or labels.get(st.operands[0].name, j) >= j:
                continue
            lo = labels[st.operands[0].name]
            run = body[lo + 1:j]
            if any(type(x) in (Label, Block) or (type(x) is Instruction and x.opcode in ("bra", "call", "ret", "exit"))
                   for x in run):
                continue
            insts = [(lo + 1 + k, x) for k, x in enumerate(run) if type(x) is Instruction]
            defs: dict[str, list[int]] = {}
            for k, x in insts:
                for r in x.defs():
                    defs.setdefault(r, []).append(k)

            def imm_add(x, dst=None):
                """(source register, immediate) of ``add.s64/u64 dst, src, imm`` (unguarded), else None."""
                if x.guard is not None or x.opcode != "add" or not x.modifiers \
                        or x.modifiers[-1] not in ("s64", "u64") \
                        or len(x.operands) != 3 or type(x.operands[0]) is not Register \
                        or type(x.operands[1]) is not Register or type(x.operands[2]) is not Immediate \
                        or x.operands[2].is_float:
                    return None
                if dst is not None and x.operands[0].name != dst:
                    return None
                return x.operands[1].name, int(x.operands[2].value)
            step: dict[str, tuple[int, int]] = {}      # induction register -> (its update's position, step)
            for r, ks in defs.items():
                if len(ks) == 1:
                    a = imm_add(body[ks[0]], r)
                    if a is not None and a[0] == r:
                        step[r] = (ks[0], a[1])

            def next_addr(reg: str, at: int):
                """(base register at the back-edge, offset, the base's step per iteration) naming the value ``reg``
                has at position ``at`` of the next iteration, or None."""
                if reg in step:
                    upd, inc = step[reg]
                    return reg, (0 if at < upd else inc), inc
                ks = defs.get(reg)
                if ks is None or len(ks) != 1 or ks[0] > at:
                    return None
                a = imm_add(body[ks[0]], reg)
                if a is None or a[0] not in step:
                    return None
                base = next_addr(a[0], ks[0])
                return None if base is None else (base[0], base[1] + a[1], base[2])
            code, seen = [], set()
            for k, x in insts:
                i = idx_of.get((k,))
                d = decisions[i] if i is not None else None
                if d is None or d.kind != "load" or type(d.addr.base) is not Register:
                    continue
                n = next_addr(d.addr.base.name, k)
                if n is None:
                    continue
                space = ("global",) if x.state_space == "global" else ()
                for ahead in range(self.prefetch_next):      # iterations i+1 .. i+N
                    key = (n[0], n[1] + d.addr.offset + ahead * n[2], space)
                    if key in seen:
                        continue
                    seen.add(key)
                    code.append(_ins("prefetch", space + ("L2",), (Address(_R(key[0]), key[1]),), st.guard))
            if code:
                self.report.next_prefetches += len(code)
                out[(j,)] = code
        return out

    def _with_native_version(self, new_body: list[Statement], original) -> list[Statement]:
        """Code versioning: after the prologue, a launch with nothing registered (span == 0, which
        includes a detached module) branches (uniformly) to an untouched copy of the original body,
        so the native path runs the plain instruction stream, without helper calls (such a launch
        has nothing to model and is not counted). A detached module branches first, on the attach
        switch in its constant bank (_detached_switch), before any global load.

        With ``native_scope`` (HBFCC_NATIVE_SCOPE=1; default off since stop 48: slower on 2 of 3 TMA kernels on an H100) the copy is a nested block that declares
        the function's own registers again (its top-level ``.reg`` declarations; PTX scopes them to the
        block): the two versions share no virtual register, so ptxas allocates the copy as it does the plain
        function (the shared names made it keep the Triton kernels' zeroed wgmma accumulators in uniform
        registers and copy them out, +137..205 SASS instructions before the first HGMMA; docs/RESULTS.md
        "wt/nat15"). Sound: no instruction of the original body runs before the branch (the prologue
        goes after its leading declarations), so no register value crosses into the copy; shared, local
        and other declarations stay the function's (declared once, not doubled). Only the register count
        is shared with the instrumented version."""
        if not self.report.sites and not self.report.tma_hooks and not (self.ctx.tracks and self.fn.is_entry):
            return new_body
        names: set[str] = set()
        _labels_in(original, names)
        copy = _native_copy(original, names, True)
        if self.native_scope:
            copy = [Block(tuple([st for st in original if type(st) is VarDecl and st.space == "reg"] + copy))]
        # the branch goes right after the prologue (before kernel_enter)
        j = next(i for i, st in enumerate(new_body) if type(st) is Label and st.name == self._after_prologue)
        out = new_body[:j + 1] + [_ins("bra", ("uni",), (LabelRef(_NATIVE_LABEL),), Guard(_R(R_NONE)))] \
            + new_body[j + 1:]
        # the attach switch first (DETACHED_DECL): a detached module branches to the native copy after one
        # constant-bank read, before the prologue's global loads (the registers it uses are set again right after)
        j = next(i for i, st in enumerate(out) if st is self._state_load)
        out[j:j] = _detached_switch()
        # the instrumented version never falls through into the native one
        last = next((st for st in reversed(original) if type(st) is Instruction), None)
        if last is None or last.guard is not None or last.opcode not in ("ret", "exit", "bra", "trap"):
            end = _ins("ret", (), ())
            if self.fn.is_entry:
                out += self._unless_detached(self._exit_calls(None))
            out.append(end)
        out += [Label(_NATIVE_LABEL)] + copy
        self.report.native_version = True
        return out

    def _hoist_target(self, i: int, nodes, decisions, fut_of, IN):
        """Where a load's issue goes, and the copies of the computations it needs there.

        The plain build's ptxas moves independent loads above the uses of earlier ones (several loads
        in flight per thread, the order Triton's PTX does not have: it computes each load's address
        right before the load). The helper calls keep ptxas from doing so in the rewritten module, so
        every load after a use would be issued only once that use's wait is over and a run of k loads
        would take k modeled latencies instead of one. So the issue (never the load itself: the program
        runs as written) is placed as early as its straight-line run of sibling instructions allows,
        walking up from the load:
        * an instruction that writes a register the issue needs (address base, guard predicate, or one
          a copied computation reads) is COPIED into fresh hbfcc registers when it is a plain
          single-destination computation (_CLONEABLE, unguarded, register/immediate operands) -- the
          issue then computes the same address and guard from the same inputs -- and else ends the walk;
        * the walk also ends where a register the issue or a copy reads may still have a pending
          future (its wait is at its own use): a dependent load is never issued before the value its
          address comes from has arrived (pointer chasing keeps its serial latencies);
        * any other instruction is passed when it is plain (_hoistable_past) and does not read the
          load's destination registers (a wait is placed only before a read of a register whose
          value may still be pending, so no wait between the two positions can be on this load's
          future register; a write there, such as Triton's default value for masked lanes, is fine);
        * labels, nested blocks, the start of the run and HOIST_WINDOW end the walk; with HBFCC_MERGE_LOADS
          a load whose previous sibling load's issue went further up than HOIST_WINDOW may follow it there (at
          most MERGE_HOIST_WINDOW): the issues of a long run of loads then stay one run, which _merge_sets
          needs (a Triton masked tail of 64 scalar loads otherwise splits into one run of 29 and 35 lone
          issues at 35 different points).
        Only loads that wait at their first use are hoisted (not atomics, volatile/acquire loads,
        stores or cp.async). Returns (h, chain): the node the issue goes before, and the copied
        instructions in program order."""
        d = decisions[i]
        if d.kind != "load" or i not in fut_of:
            return i, []
        F = self._hoist_facts(nodes, IN)
        path_i, inst = nodes[i]
        need = set()
        if inst.guard is not None:
            need.add(inst.guard.reg.name)
        if d.addr is not None and type(d.addr.base) is Register:
            need.add(d.addr.base.name)
        dest = F.defs[i]
        chain: list[tuple[int, Instruction]] = []
        h = i
        window = HOIST_WINDOW
        if self.merge:   # follow the previous load's issue (one run, so the loads can merge), bounded
            prev = self._last_h.get(path_i[:-1])
            if prev is not None and i - prev > window:
                window = min(i - prev, MERGE_HOIST_WINDOW)
        for j in range(i - 1, max(-1, i - 1 - window), -1):
            if not F.sib[j]:
                break                                  # not the previous sibling (a label or block between)
            defs_j, uses_j = F.defs[j], F.uses[j]
            if dest & uses_j:
                break                                  # a read of the destination may wait on its future
            if defs_j & need:
                if len(chain) >= HOIST_CHAIN or not F.clone_ok[j]:
                    break
                n2 = (need - defs_j) | uses_j
            elif not F.passable[j]:
                break
            else:
                n2 = need
            # at the new position every value the issue (or a copy) reads must be one that is not
            # waiting: a register with a pending future there gets its wait only at its own use, so
            # reading it earlier would issue a dependent load before its address has arrived
            if F.pending[j] & n2:
                break
            if defs_j & need:
                chain.insert(0, (j, nodes[j][1]))
            need = n2
            h = j
        if self.merge:
            self._last_h[path_i[:-1]] = h
        return h, chain

    def _hoist_facts(self, nodes, IN) -> "_HoistFacts":
        """Per node, once per function: what the hoisting walk asks of it (its register sets, whether it
        is the previous sibling of the next node, whether an issue may pass it or copy it, and the
        registers with a pending future before it)."""
        if self._hfacts is None:
            n = len(nodes)
            targets = self._branch_targets()
            F = _HoistFacts(
                uses=[frozenset(inst.uses()) for _, inst in nodes],
                defs=[frozenset(inst.defs()) for _, inst in nodes],
                sib=[j + 1 < n and nodes[j][0][:-1] == nodes[j + 1][0][:-1]
                     and self._only_notes_between(nodes[j][0], nodes[j + 1][0], targets) for j in range(n)],
                passable=[_hoistable_past(inst) for _, inst in nodes],
                clone_ok=[], pending=[frozenset(r for r, v in (IN[j] or {}).items() if v) for j in range(n)])
            F.clone_ok = [_cloneable(inst) and all(self.ctx.reg_type(r) is not None for r in F.uses[j] | F.defs[j])
                          for j, (_, inst) in enumerate(nodes)]
            self._hfacts = F
        return self._hfacts

    def _branch_targets(self) -> set[str]:
        """Labels something may branch to: every label when the function has jump tables (brx,
        .branchtargets / .calltargets), else those a branch operand names."""
        refs: set[str] = set()
        labels: set[str] = set()
        jump_tables = False
        for _, st in walk(self.fn.body or ()):
            if type(st) is Instruction:
                refs.update(o.name for o in st.operands if type(o) is LabelRef)
                for o in st.operands:
                    if type(o) is ArgList:
                        refs.update(x.name for x in o.items if type(x) is LabelRef)
                jump_tables |= st.opcode == "brx"
            elif type(st) is Label:
                labels.add(st.name)
            elif type(st) is not Comment and "targets" in str(st):
                jump_tables = True
        return labels if jump_tables else refs

    def _only_notes_between(self, pa: tuple[int, ...], pb: tuple[int, ...], targets: set[str]) -> bool:
        """Statements strictly between two siblings are only comments, directives (.loc) and labels
        nothing branches to (Triton's debug labels $L__tmp<n>)."""
        body = self.fn.body or ()
        for k in pa[:-1]:
            body = body[k].body
        return all(type(st) in (Comment, Directive) or (type(st) is Label and st.name not in targets)
                   for st in body[pa[-1] + 1:pb[-1]])

    def _hoisted_site(self, h: int, inst: Instruction, d: Decision, chain: list[tuple[int, Instruction]]):
        """The copies of ``chain`` into fresh registers (%__hb_x_<type>_<n>, declared per type in the
        prologue), and the load and its decision with the address base and guard renamed to those
        copies. A computation already copied for another issue hoisted to the same node is reused (the
        same instruction on the same inputs at the same place: the same value)."""
        ren: dict[str, str] = {}
        code: list[Statement] = []
        for j, c in chain:
            (dname,) = c.defs()
            have = self.clone_at.get((h, j))
            if have is not None:
                ren[dname] = have
                continue
            ty = self.ctx.reg_type(dname)
            tag = ty.lstrip(".")
            k = self.clones.get(ty, 0)
            self.clones[ty] = k + 1
            new = f"%__hb_x_{tag}_{k}"
            self.ctx.reg_exact[new] = ty
            ops = [_rename_reg(o, ren) for o in c.operands[1:]]
            ren[dname] = new
            self.clone_at[(h, j)] = new
            code.append(replace(c, operands=(Register(new),) + tuple(ops), line=0))
        g = inst.guard
        if g is not None and g.reg.name in ren:
            g = Guard(Register(ren[g.reg.name]), g.negated)
        a = d.addr
        if a is not None and type(a.base) is Register and a.base.name in ren:
            a = replace(a, base=Register(ren[a.base.name]))
        return code, replace(inst, guard=g), replace(d, addr=a), ren

    def _movable_load(self, h: int, i: int, nodes, IN, inst_h: Instruction, ren: dict[str, str]):
        """HBFCC_HOIST_LOADS: the load itself (not only its issue) moved to its hoist point h, so that a
        run of loads is in flight before the first use's wait (ptxas does not move a load above a wait,
        whose slow path is a call). Only where that is the same program: between h and the load no store
        (a weak load may pass weak loads and computation, which is all the hoisting walk passes) and no
        write of the load's destination, except the movs right before it that give masked lanes their
        default (Triton's `other=`): they move with it, their source an immediate, a register nothing
        between writes and no future between may still be pending on, or one an unguarded `mov` of an
        immediate writes there (the immediate is used). Returns (statements for h, paths to drop) or None."""
        F = self._hoist_facts(nodes, IN)
        dest = F.defs[i]
        j = i - 1
        movs: list[int] = []
        while j >= h and F.sib[j]:
            mi = nodes[j][1]
            if mi.opcode == "mov" and mi.guard is None and len(F.defs[j]) == 1 and F.defs[j] <= dest:
                movs.insert(0, j)
                j -= 1
                continue
            break
        consts: dict[str, Immediate] = {}
        for t in range(h, j + 1):
            it = nodes[t][1]
            if it.opcode == "st" or F.defs[t] & dest:
                return None
            if it.opcode == "mov" and it.guard is None and len(it.operands) == 2 and type(it.operands[1]) is Immediate:
                consts[it.operands[0].name] = it.operands[1]
            else:
                for r in F.defs[t]:
                    consts.pop(r, None)
        span_defs = set().union(*(F.defs[t] for t in range(h, j + 1))) if j >= h else set()
        out: list[Statement] = []
        for t in movs:
            mi = nodes[t][1]
            src = mi.operands[1]
            if type(src) is Register and src.name in span_defs:
                if src.name not in consts:
                    return None
                src = consts[src.name]
            elif type(src) is Register:
                if any(src.name in F.pending[x] for x in range(h, t + 1)):
                    return None                # a value whose wait is between: never read before it
            elif type(src) is not Immediate:
                return None
            out.append(replace(mi, operands=(mi.operands[0], src), line=0))
        ops = inst_h.operands        # inst_h: the load with its guard renamed to the hoisting copies
        out.append(replace(inst_h, operands=(ops[0],) + tuple(_rename_reg(o, ren) for o in ops[1:]), line=0))
        return out, {nodes[t][0] for t in movs} | {nodes[i][0]}

    def _site_of_fut(self, k: int) -> int:
        return self.fut_site[k]

    def _note_call(self, inst: Instruction) -> None:
        tgt = inst.call_target
        if tgt is None:
            self.report.calls.append("<indirect>")
        elif tgt not in self.report.calls:
            self.report.calls.append(tgt)

    def _site_code(self, inst: Instruction, d: Decision, i: int, fut_of: dict[int, int],
                   pre: list[Statement]) -> None:
        """The site's code. The join / immediate wait runs inside the in-band block (the future is
        0 otherwise)."""
        g = inst.guard
        out: list[Statement] = []
        if d.kind == "load" and i in fut_of:
            k = fut_of[i]
            if self.group and self._inline_ok(d):   # emitted with its neighbours (_lower_groups)
                pre.append(_GSite(inst, d, k, self._node))
                return
            if g is None:
                self._issue(inst, d, f"{R_FUT}{k}", out)
            else:
                self._issue(inst, d, R_TMP, out)
                out.append(_ins("mov", ("b64",), (_R(f"{R_FUT}{k}"), _R(R_TMP)), g))
        elif d.kind in ("load", "atomic"):        # wait at once (inactive lanes get future 0)
            site = self.node_site[self._node]
            w = self._wait(R_NOW, site, None, clear=False)   # R_NOW is rewritten at the next site anyway
            self._issue(inst, d, R_NOW, out, tail=w)
        elif d.kind in ("store", "red"):          # posted
            self._issue(inst, d, R_TMP, out, tail=self._join_into(R_DRAIN, R_TMP))
        elif d.kind == "cpasync":
            tail = self._join_into(f"{R_GRP}0", R_TMP)
            if self.ctx.has_cp_async_mbarrier:    # and into the copies the next cp.async.mbarrier.arrive covers
                tail += self._join_into(R_CPALL, R_TMP)
            self._issue(inst, d, R_TMP, out, tail=tail)
        elif d.kind == "tma":
            self._tma_site(inst, d, out)
        elif d.kind == "cpa_arrive":
            self._cpa_arrive(inst, d, out)
        else:
            raise RewriteError("internal: unknown site kind", kind=d.kind)
        pre.extend(out)

    def _commit(self, inst: Instruction, pre: list[Statement]) -> None:
        self._commit_window(R_GRP, self.K, inst.guard, pre)

    def _commit_window(self, R: str, K: int, g: Optional[Guard], pre: list[Statement]) -> None:
        """commit_group on a window of K group registers R<0..K> (R0 the open group, newest first; RK
        accumulates every older group)."""
        pre.append(_ins("mov", ("b64",), (_R(R_TMP), _R(f"{R}{K}"))))
        pre.extend(self._join_into(R_TMP, f"{R}{K - 1}"))
        pre.append(_ins("mov", ("b64",), (_R(f"{R}{K}"), _R(R_TMP)), g))
        for slot in range(K - 1, 0, -1):
            pre.append(_ins("mov", ("b64",), (_R(f"{R}{slot}"), _R(f"{R}{slot - 1}")), g))
        pre.append(_ins("mov", ("b64",), (_R(f"{R}0"), _I(0)), g))

    # ---- TMA and bulk async copies (hbfcc/passes/tma.py) ----------------------------------------
    def _token_regs(self) -> dict[str, int]:
        """The state registers of the function's token-form mbarrier waits, each with its parity register."""
        if not self.tok and self.ctx.tracks:
            for _, st in walk(self.fn.body or ()):
                if type(st) is Instruction and st.opcode == "mbarrier" and _family(st) in (
                        "mbarrier.try_wait", "mbarrier.test_wait") and "parity" not in st.modifiers \
                        and len(st.operands) > 2 and type(st.operands[2]) is Register:
                    self.tok.setdefault(st.operands[2].name, len(self.tok))
            self.tok.setdefault("", -1)     # computed (a name no register has)
        return self.tok

    def _mbar32(self, a: Address, out: list[Statement]):
        """The mbarrier's shared::cta address as a .b32 operand (the table's key)."""
        base = a.base
        if type(base) is Register:
            rt = self.ctx.reg_type(base.name)
            if rt in _32BIT_TYPES or rt == ".b32":
                if not a.offset:
                    return base
                out.append(_ins("add", ("u32",), (_R(R_MB), base, _I(a.offset))))
                return _R(R_MB)
            out.append(_ins("cvt", ("u32", "u64"), (_R(R_MB), base)))
        elif type(base) is Symbol:
            out.append(_ins("mov", ("u32",), (_R(R_MB), base)))
        else:
            out.append(_ins("mov", ("u32",), (_R(R_MB), _I(0))))
        if a.offset:
            out.append(_ins("add", ("u32",), (_R(R_MB), _R(R_MB), _I(a.offset))))
        return _R(R_MB)

    def _gaddr64(self, a: Address, out: list[Statement]):
        """A copy's global side as a generic .b64 address: a register as it is (a generic or global
        address), a kernel parameter / .const / .global symbol through cvta."""
        base = a.base
        if type(base) is Register:
            rt = self.ctx.reg_type(base.name)
            if rt in _32BIT_TYPES:
                out.append(_ins("cvt", ("u64", "u32"), (_R(R_TA), base)))
            elif not a.offset:
                return base
            else:
                out.append(_ins("mov", ("b64",), (_R(R_TA), base)))
        elif type(base) is Symbol:
            sp = self.ctx.sym_space.get(base.name)
            out.append(_ins("mov", ("u64",), (_R(R_TA), base)))
            if sp in ("param", "global", "const"):
                out.append(_ins("cvta", (sp, "u64"), (_R(R_TA), _R(R_TA))))
        else:
            out.append(_ins("mov", ("u64",), (_R(R_TA), _I(0))))
        if a.offset:
            out.append(_ins("add", ("s64",), (_R(R_TA), _R(R_TA), _I(a.offset))))
        return _R(R_TA)

    def _tma_site(self, inst: Instruction, d: Decision, out: list[Statement]) -> None:
        """``__hb_tma`` before the native copy (hbf_abi.h): every lane that executes the copy calls it (a
        guard that is false clears HBF_TMA_F_ACTIVE: the helper returns 0 at once); a bulk_group copy's
        deadline joins the open bulk group."""
        f = d.tma
        self.tma_regs = True
        self.report.tma_hooks += 1
        site = self.node_site[self._node]
        kind = f.kind | (f.rank << abi.HBF_TMA_RANK_SHIFT) | (abi.HBF_TMA_F_MULTICAST if f.multicast else 0)
        gaddr = self._gaddr64(f.gaddr, out)
        coords = list(f.gaddr.coords.elems) if f.rank and f.gaddr.coords is not None else []
        cs = [c if type(c) in (Register, Immediate) else _I(0) for c in coords] + [_I(0)] * (5 - len(coords))
        nb = f.nbytes if type(f.nbytes) in (Register, Immediate) else _I(0)
        if type(nb) is Register and self.ctx.reg_type(nb.name) not in _32BIT_TYPES | {".b32"}:
            out.append(_ins("cvt", ("u32", "u64"), (_R(R_TM), nb)))
            nb = _R(R_TM)
        mbar = self._mbar32(f.mbar, out) if f.mbar is not None else _I(0)
        mask = f.ctamask
        if type(mask) is Register:
            if self.ctx.reg_type(mask.name) in (".b16", ".u16", ".s16"):
                out.append(_ins("cvt", ("u32", "u16"), (_R(R_TM), mask)))
                mask = _R(R_TM)
        elif type(mask) is not Immediate:
            mask = _I(0)
        g = inst.guard
        act = kind | abi.HBF_TMA_F_ACTIVE
        if g is None:
            kop = _I(act)
        else:
            out.append(_ins("selp", ("b32",), (_R(R_FLAGS), _I(kind), _I(act), g.reg) if g.negated
                            else (_R(R_FLAGS), _I(act), _I(kind), g.reg)))
            kop = _R(R_FLAGS)
        out.append(_call("__hb_tma", [("b64", gaddr)] + [("b32", c) for c in cs] +
                         [("b32", nb), ("b32", mbar), ("b32", kop), ("b32", mask),
                          ("b32", _R(R_TBL) if self.ctx.tracks else _I(0)), ("b32", _I(site))], ret=R_TMP))
        if f.completion == "bulk_group" and self.KB:
            out.extend(self._join_into(f"{R_BG}0", R_TMP))

    def _cpa_arrive(self, inst: Instruction, d: Decision, out: list[Statement]) -> None:
        """cp.async.mbarrier.arrive: the thread's cp.async copies since its last arrive complete the
        barrier's current phase: their joined deadline goes into its table entry (``__hb_mbar_note``)."""
        self.tma_regs = True
        self.report.tma_hooks += 1
        site = self.node_site[self._node]
        g = inst.guard
        mbar = self._mbar32(d.tma.mbar, out)
        fut = _R(R_CPALL)
        if g is not None:
            out.append(_ins("selp", ("b64",), (_R(R_TA), _I(0), _R(R_CPALL), g.reg) if g.negated
                            else (_R(R_TA), _R(R_CPALL), _I(0), g.reg)))
            fut = _R(R_TA)
        out.append(_call("__hb_mbar_note", [("b32", _R(R_TBL)), ("b32", mbar), ("b64", fut), ("b32", _I(site))]))
        out.append(_ins("mov", ("b64",), (_R(R_CPALL), _I(0)), g))

    def _mbwait(self, inst: Instruction, d: Decision) -> list[Statement]:
        """After an mbarrier.try_wait/test_wait: where it returned true (and its guard held), wait for the
        modeled completion of that phase (``__hb_mbar_wait``)."""
        self.tma_regs = True
        self.report.tma_hooks += 1
        site = self.node_site[self._node]
        ops = inst.operands
        L = self._label()
        out: list[Statement] = []
        g = inst.guard
        if g is not None:
            out.append(_ins("bra", (), (LabelRef(L),), Guard(g.reg, not g.negated)))
        out.append(_ins("bra", (), (LabelRef(L),), Guard(ops[0], True)))
        mbar = self._mbar32(d.tma.mbar, out)
        if "parity" in inst.modifiers:
            par = ops[2]
        else:
            par = _R(f"{R_TK}{self._token_regs()[ops[2].name]}")
        out.append(_call("__hb_mbar_wait", [("b32", _R(R_TBL)), ("b32", mbar), ("b32", par), ("b32", _I(site))]))
        out.append(Label(L))
        return out

    def _token_capture(self, inst: Instruction) -> list[Statement]:
        """Before an mbarrier.arrive whose state a token-form wait uses: the parity of the barrier's current
        phase (the one this arrival counts toward: test_wait.parity 0 is true once the even phase is over,
        so the current phase is odd), kept in that state's parity register."""
        self.tma_regs = True
        k = self._token_regs()[inst.operands[0].name]
        return [_ins("mbarrier", ("test_wait", "parity", "shared", "b64"), (_R(R_TQ), inst.address, _I(0))),
                _ins("selp", ("b32",), (_R(f"{R_TK}{k}"), _I(1), _I(0), _R(R_TQ)), inst.guard)]

    def _dataflow(self, nodes, succ, decisions, fut_of) -> list[Optional[dict[str, frozenset[int]]]]:
        n = len(nodes)
        IN: list[Optional[dict[str, frozenset[int]]]] = [None] * n
        if n == 0:
            return IN
        IN[0] = {}
        uses = self._uses = [inst.uses() for _, inst in nodes]
        defs = [inst.defs() for _, inst in nodes]
        work = deque([0])
        queued = [False] * n
        queued[0] = True
        while work:
            i = work.popleft()
            queued[i] = False
            S = IN[i]
            assert S is not None
            inst = nodes[i][1]
            guarded = inst.guard is not None
            out = S
            need: set[int] = set()
            for r in uses[i]:
                v = S.get(r)
                if v:
                    need |= v
            if need and not guarded:
                out = {}
                for r, v in S.items():
                    v2 = v - need
                    if v2:
                        out[r] = v2
            if defs[i]:
                if out is S:
                    out = dict(S)
                if i in fut_of:
                    k = fut_of[i]
                    for r in defs[i]:
                        if guarded:
                            out[r] = out.get(r, frozenset()) | {k}
                        else:
                            out[r] = frozenset((k,))
                elif not guarded:
                    for r in defs[i]:
                        out.pop(r, None)
            for j in succ[i]:
                old = IN[j]
                if old is None:
                    IN[j] = dict(out)
                    changed = True
                else:
                    changed = False
                    merged = old
                    for r, v in out.items():
                        ov = old.get(r)
                        if ov is None or not v <= ov:
                            if merged is old:
                                merged = dict(old)
                            merged[r] = (ov | v) if ov else v
                            changed = True
                    if changed:
                        IN[j] = merged
                if changed and not queued[j]:
                    queued[j] = True
                    work.append(j)
        return IN

    def _rebuild(self, body: tuple[Statement, ...], prefix: tuple[int, ...]) -> list[Statement]:
        out: list[Statement] = []
        for i, s in enumerate(body):
            p = prefix + (i,)
            ins = self.pre.get(p)
            if ins:
                out.extend(ins)
            if p in self.drop:
                continue
            if type(s) is Block:
                out.append(replace(s, body=tuple(self._rebuild(s.body, p))))
            else:
                out.append(s)
            post = self.post.get(p)
            if post:
                out.extend(post)
        return out

    def _prologue(self, body: list[Statement], nfut: int) -> list[Statement]:
        decls: list[Statement] = [
            Comment(f"// hbfcc timing: {self.report.sites} sites, kernel index {self.kidx}"),
            VarDecl((), "reg", (), ".b64", (Declarator(R_ADDR), Declarator(R_TMP), Declarator(R_DRAIN),
                                           Declarator(R_NOW))),
            VarDecl((), "reg", (), ".b32", (Declarator(R_FLAGS),)),
            VarDecl((), "reg", (), ".pred", (Declarator(R_PRED), Declarator(R_OFF), Declarator(R_ZERO),
                                             Declarator(R_OUT), Declarator(R_NONE))),
            VarDecl((), "reg", (), ".b64", (Declarator(R_STATE), Declarator(R_LO), Declarator(R_SPAN),
                                            Declarator(R_BAND))),
            VarDecl((), "reg", (), ".b64", (Declarator(R_GRP, count=self.K + 1),)),
        ] + [VarDecl((), "reg", (), ty, (Declarator(f"%__hb_x_{ty.lstrip('.')}_", count=n),))
             for ty, n in self.clones.items()]
        self._state_load = _ins("ld", ("global", "u64"), (_R(R_STATE), Address(Symbol(abi.STATE_GLOBAL))))
        init: list[Statement] = [
            self._state_load,
            _ins("setp", ("eq", "u64"), (_R(R_OFF), _R(R_STATE), _I(0))),
            # fast-reject band {lo, span} (the first 16 bytes of hbf_device_state): span 0 = native
            _ins("mov", ("b64",), (_R(R_LO), _I(0))),
            _ins("mov", ("b64",), (_R(R_SPAN), _I(0))),
            _ins("ld", ("global", "u64"), (_R(R_LO), Address(_R(R_STATE))), Guard(_R(R_OFF), True)),
            _ins("ld", ("global", "u64"), (_R(R_SPAN), Address(_R(R_STATE), 8)), Guard(_R(R_OFF), True)),
            _ins("setp", ("eq", "u64"), (_R(R_NONE), _R(R_SPAN), _I(0))),
            _ins("mov", ("b64",), (_R(R_DRAIN), _I(0)))]
        if self.inline:
            decls += [VarDecl((), "reg", (), ".b64", tuple(Declarator(r) for r in (R_IUR, R_IUW, R_IBR, R_IBW, R_ISL,
                                                                                  R_IT, R_IX, R_IY, R_IR))),
                      VarDecl((), "reg", (), ".b32", tuple(Declarator(r) for r in (R_ICR, R_IGR, R_ICW, R_IRW, R_IM,
                                                                                  R_IL, R_IK, R_IP, R_IQ, R_IH,
                                                                                  R_LMLT))),
                      VarDecl((), "reg", (), ".pred", tuple(Declarator(r) for r in (R_IPA, R_IPB, R_IPL)))]
            if self.full_warp:
                decls.append(VarDecl((), "reg", (), ".pred", (Declarator(R_IFW),)))
            init += [_ins("mov", ("b64",), (_R(r), _I(0))) for r in (R_IUR, R_IUW, R_IBR, R_IBW, R_ISL)]
            if self.itime:
                decls.append(VarDecl((), "reg", (), ".b64", (Declarator(R_INS),)))
                init.append(_ins("mov", ("b64",), (_R(R_INS), _I(0))))
            init += [_ins("mov", ("b32",), (_R(r), _I(0))) for r in (R_ICR, R_IGR, R_ICW, R_IRW)]
            init.append(_ins("mov", ("b32",), (_R(R_LMLT), _R("%lanemask_lt"))))
        if self.report.group_calls:
            decls.append(VarDecl((), "local", (".align 8",), ".b8", (Declarator(GAL, dims=(8 * GROUP_MAX,)),)))
        if self.group_slots:
            n = self.group_slots
            if self.group_lf:
                decls.append(VarDecl((), "reg", (), ".pred", (Declarator(R_GW),)))
            decls += [VarDecl((), "reg", (), ".b64", (Declarator(R_GA, count=n), Declarator(R_GZ))),
                      VarDecl((), "reg", (), ".pred", (Declarator(R_GP, count=n), Declarator(R_GANY),
                                                       Declarator(R_GOK), Declarator(R_CDB), Declarator(R_GIN))),
                      VarDecl((), "reg", (), ".b32", (Declarator(R_GC), Declarator(R_GG), Declarator(R_GB)))]
            # R_CDB: the band {lo, span} ends where the descriptor's one range ends and starts at or below
            # it (the runtime puts a guard zone of R_GZ = base - lo bytes below the first range), the range
            # starts 32-byte aligned and its length is a multiple of W, the widest access of the function's
            # group sites (a group then needs no end check: a naturally aligned access of w | W bytes that
            # starts in the range ends in it); fixed for the launch (the descriptor changes only between
            # launches). W, not 32: a masked tail's tensor of n fp16 (n not a multiple of 16, the range
            # n * 2 bytes, registered as allocated) failed a 32-byte end for every launch, so every group of
            # the tail kernel ran site by site (wt/merge13b)
            cd = abi.CDESC_GLOBAL
            W = self.group_wmax if self.group_wmax in INLINE_BYTES else 32
            init += [_ins("ld", ("const", "u64"), (_R(R_IX), Address(Symbol(cd), abi.CDESC_R0_BASE_OFF))),
                     _ins("ld", ("const", "u64"), (_R(R_IY), Address(Symbol(cd), abi.CDESC_R0_LEN_OFF))),
                     _ins("and", ("b64",), (_R(R_GZ), _R(R_IX), _I(31))),              # base % 32
                     _ins("setp", ("eq", "u64"), (_R(R_CDB), _R(R_GZ), _I(0))),
                     _ins("and", ("b64",), (_R(R_GZ), _R(R_IY), _I(W - 1))),           # len % W
                     _ins("setp", ("eq", "and", "u64"), (_R(R_CDB), _R(R_GZ), _I(0), _R(R_CDB))),
                     _ins("setp", ("ne", "and", "u64"), (_R(R_CDB), _R(R_IY), _I(0), _R(R_CDB))),
                     _ins("sub", ("u64",), (_R(R_GZ), _R(R_IX), _R(R_LO))),              # base - lo
                     _ins("setp", ("le", "and", "u64"), (_R(R_CDB), _R(R_GZ), _R(R_SPAN), _R(R_CDB))),
                     _ins("add", ("u64",), (_R(R_IX), _R(R_GZ), _R(R_IY))),              # end - lo
                     _ins("setp", ("eq", "and", "u64"), (_R(R_CDB), _R(R_IX), _R(R_SPAN), _R(R_CDB)))]
        if self.tma_regs or self.ctx.tracks and self.fn.is_entry:
            decls += [VarDecl((), "reg", (), ".b32", (Declarator(R_TBL), Declarator(R_MB), Declarator(R_TM))),
                      VarDecl((), "reg", (), ".b64", (Declarator(R_TA), Declarator(R_CPALL))),
                      VarDecl((), "reg", (), ".pred", (Declarator(R_TQ),))]
            init += [_ins("mov", ("u32",), (_R(R_TBL), Symbol(T.TABLE_SYMBOL) if self.ctx.tracks else _I(0))),
                     _ins("mov", ("b64",), (_R(R_CPALL), _I(0)))]
        ntok = len([k for k in self.tok if k])
        if ntok:
            decls.append(VarDecl((), "reg", (), ".b32", (Declarator(R_TK, count=ntok),)))
            init += [_ins("mov", ("b32",), (_R(f"{R_TK}{k}"), _I(0))) for k in range(ntok)]
        if self.KB:
            decls.append(VarDecl((), "reg", (), ".b64", (Declarator(R_BG, count=self.KB + 1),)))
            init += [_ins("mov", ("b64",), (_R(f"{R_BG}{k}"), _I(0))) for k in range(self.KB + 1)]
        if nfut:
            decls.append(VarDecl((), "reg", (), ".b64", (Declarator(R_FUT, count=nfut),)))
            init += [_ins("mov", ("b64",), (_R(f"{R_FUT}{k}"), _I(0))) for k in range(nfut)]
        init += [_ins("mov", ("b64",), (_R(f"{R_GRP}{k}"), _I(0))) for k in range(self.K + 1)]
        self._after_prologue = self._label()
        init.append(Label(self._after_prologue))
        if self.fn.is_entry:
            enter = [_call("__hb_kernel_enter", [("b32", _I(self.kidx))])]
            if self.ctx.tracks:     # the completion table: zeroed, then every thread (of the cluster) past it
                enter.append(_call("__hb_tma_enter", [("b32", _R(R_TBL)),
                                                      ("b32", _I(abi.HBF_TMA_E_CLUSTER if self.cluster else 0))]))
            init.extend(self._unless_detached(enter))
        # after the leading declarations of the body
        j = 0
        while j < len(body) and type(body[j]) in (VarDecl, Comment, Directive):
            if type(body[j]) is Directive and body[j].name not in ("pragma", "loc", "file"):
                break
            j += 1
        return body[:j] + decls + init + body[j:]


_NATIVE_LABEL = "$__hb_native"
_NATIVE_SUFFIX = "_hbn"


def _detached_switch() -> list[Statement]:
    """The detached test: ``__hb_detached`` (abi.DETACHED_GLOBAL, the module's constant bank: a ULDC) nonzero ->
    the native copy, uniformly. R_STATE and R_OFF are the prologue's; it sets them again right after."""
    return [_ins("ld", ("const", "u64"), (_R(R_STATE), Address(Symbol(abi.DETACHED_GLOBAL)))),
            _ins("setp", ("ne", "u64"), (_R(R_OFF), _R(R_STATE), _I(0))),
            _ins("bra", ("uni",), (LabelRef(_NATIVE_LABEL),), Guard(_R(R_OFF)))]


def _labels_in(body, out: set[str]) -> None:
    for st in body:
        if type(st) is Label:
            out.add(st.name)
        elif type(st) is Block:
            _labels_in(st.body, out)


def _relabel_op(op, names: set[str]):
    t = type(op)
    if t is LabelRef and op.name in names:
        return LabelRef(op.name + _NATIVE_SUFFIX)
    if t is Symbol and op.name in names:
        return Symbol(op.name + _NATIVE_SUFFIX)
    if t is ArgList:
        return ArgList(tuple(_relabel_op(x, names) for x in op.items))
    if t is Vector:
        return Vector(tuple(_relabel_op(x, names) for x in op.elems))
    if t is Address and type(op.base) is Symbol and op.base.name in names:
        return replace(op, base=Symbol(op.base.name + _NATIVE_SUFFIX))
    return op


def _native_copy(body, names: set[str], top: bool) -> list:
    """The original body for the native version: labels renamed, the function's own (top-level)
    declarations left out (the instrumented version above declares them in the same scope)."""
    out: list = []
    for st in body:
        t = type(st)
        if t is VarDecl and top:
            continue
        if t is Label:
            out.append(Label(st.name + _NATIVE_SUFFIX) if st.name in names else st)
        elif t is Block:
            out.append(replace(st, body=tuple(_native_copy(st.body, names, False))))
        elif t is Directive and st.args and any(a in names for a in st.args):
            out.append(replace(st, args=tuple(a + _NATIVE_SUFFIX if a in names else a for a in st.args)))
        elif t is Instruction:
            ops = tuple(_relabel_op(o, names) for o in st.operands)
            out.append(st if ops == st.operands else replace(st, operands=ops))
        else:
            out.append(st)
    return out


def _already_instrumented(module: Module) -> bool:
    return any(f.name in abi.HELPERS for f in module.functions())


# the module global the rewritten code reads at entry; the linker replaces this declaration with the
# helper module's (weak) definition
STATE_DECL = link.extern_global(abi.STATE_GLOBAL, ".u64", 8)
# the launch descriptor inline sites read (constant bank operands), the same way
CDESC_DECL = link.extern_global(abi.CDESC_GLOBAL, ".b8", 8, space="const", nbytes=abi.CDESC_BYTES)
# the attach switch (_detached_switch), defined here, not by the helper module: .weak, one per link (-rdc)
DETACHED_DECL = VarDecl((".weak",), "const", (".align 8",), ".u64", (Declarator(abi.DETACHED_GLOBAL),))


def _module_tma(module: Module) -> tuple[bool, bool]:
    """(the module has mbarrier-tracked copies that hbfcc rewrites, one of them is a multicast)."""
    tracks = cluster = False
    for f in module.functions():
        for _, st in walk(f.body or ()):
            if type(st) is Instruction and st.opcode == "cp":
                t = T.classify(st)
                if t is not None and t.action == "rewritten" and (
                        (t.role == "copy" and t.completion == "mbarrier") or t.role == "cpasync_arrive"):
                    tracks = True
                    cluster |= t.multicast
    return tracks, cluster


def prototypes() -> list[Function]:
    """The helper prototypes (hbf_abi.h) the rewritten functions call."""
    return link.declarations(abi.HELPERS.values())


def timing_pass(module: Module, meta: dict) -> Module:
    """The timing rewrite ``(module, metadata) -> module``. Adds ``meta["timing"]``:
    ``{"functions": [FunctionReport dicts], "kernels": [...names in kernel-index order]}``."""
    if _already_instrumented(module):
        raise RewriteError("module is already instrumented (defines or declares the timing helpers)")
    window = int(meta.get("cpasync_window", 2))
    hoist = bool(meta.get("hoist_issues", True))
    inline = bool(meta.get("inline_issues", True))
    group = bool(meta.get("group_issues", True))
    move_loads = bool(meta.get("hoist_loads", True))
    fast_groups = bool(meta.get("fast_groups", True))
    multi = bool(meta.get("inline_multi", True))
    live = bool(meta.get("inline_live", True))
    itime = bool(meta.get("inline_time", False))
    native_scope = bool(meta.get("native_scope", False))
    merge = bool(meta.get("merge_loads", False))
    share_until = bool(meta.get("share_until", True))
    loads_first = group_scope(meta.get("loads_first", "0"))
    full_warp = group_scope(meta.get("full_warp", "1"))
    full_warp_all = frozenset(meta.get("full_warp_all") or ())     # HBFCC_FULL_WARP=auto: these functions get `all`
    early_clock = bool(meta.get("early_clock", False))
    early_clock_in = frozenset(meta.get("early_clock_in") or ())   # HBFCC_EARLY_CLOCK=auto: these functions
    prefetch_next = int(meta.get("prefetch_next", 1))
    prefetch_group = bool(meta.get("prefetch_group", False))
    prefetch_group_in = frozenset(meta.get("prefetch_group_in") or ())   # HBFCC_PREFETCH_GROUP=auto: these functions
    entries = [f for f in module.items if type(f) is Function and f.is_entry and f.body is not None]
    kidx_of = {f.name: i for i, f in enumerate(entries)}
    n_entries = len(entries)
    funcs = [f for f in module.items if type(f) is Function and not f.is_entry and f.body is not None]
    for j, f in enumerate(funcs):
        kidx_of.setdefault(f.name, n_entries + j)
    tracks, cluster = _module_tma(module)
    reports: dict[str, FunctionReport] = {}
    new_items = []
    any_inline = any_native = False
    for it in module.items:
        if type(it) is Function and it.body is not None:
            rw = _FunctionRewriter(module, it, kidx_of[it.name], window, hoist, inline, group, move_loads,
                                   fast_groups, tracks, cluster, multi, live, itime, native_scope, merge,
                                   share_until, loads_first,
                                   GROUP_MAX if it.name in full_warp_all else full_warp,
                                   early_clock or it.name in early_clock_in, prefetch_next,
                                   prefetch_group or it.name in prefetch_group_in)
            new_items.append(rw.run())
            reports[it.name] = rw.report
            any_inline |= rw.inline and rw.report.sites > 0
            any_native |= rw.report.native_version
        else:
            new_items.append(it)
    # admission through calls: a function is admitted only if everything it calls is
    for r in reports.values():
        r.external_calls = [c for c in r.calls if c not in reports and c not in SYSTEM_CALLS]
    why = admit({n: r.admitted for n, r in reports.items()}, {n: r.calls for n, r in reports.items()},
                not_seen_by_rewrite)
    for n, reason in why.items():
        reports[n].admitted = False
        reports[n].not_admitted_reasons.append(reason)
    # address provenance through calls (the same fixpoint): a function takes its addresses from its
    # parameters only when its own accesses do and every function it calls does too (an indirect or an
    # unseen callee may take them from anywhere)
    mem = admit({n: r.address_source == "params" for n, r in reports.items()},
                {n: r.calls for n, r in reports.items()}, lambda c: f"calls {c}, not seen by this rewrite")
    for n in mem:
        reports[n].address_source = "memory"
    # prototypes before the first function
    first = next((i for i, it in enumerate(new_items) if type(it) is Function), len(new_items))
    protos = [Comment("// hbfcc: helper prototypes (runtime_cuda/include/hbf_abi.h)"), STATE_DECL] + \
        ([DETACHED_DECL] if any_native else []) + ([CDESC_DECL] if any_inline else []) + prototypes()
    if tracks:      # the per-CTA completion table of mbarrier-tracked copies (hbf_abi.h), a whole number of
        # DYNAMIC_SMEM_ALIGN units: the kernel's dynamic shared memory, placed after it, keeps its alignment
        protos.append(VarDecl((), "shared", (".align 8",), ".b8",
                              (Declarator(T.TABLE_SYMBOL, dims=(T.TABLE_DECL_BYTES,)),)))
    new_items = new_items[:first] + protos + new_items[first:]
    meta[PASS_NAME] = {
        "kernels": [f.name for f in entries],
        "functions": [reports[f.name].to_dict() for f in entries + funcs],
        "cpasync_window_default": window,
        "hoist_issues": hoist,
        "inline_issues": inline,
        "group_issues": group,
        "hoist_loads": move_loads,
        "fast_groups": fast_groups,
        "inline_multi": multi,
        "inline_live": live,
        "inline_time": itime,
        "native_scope": native_scope,
        "merge_loads": merge,
        "share_until": share_until,
        "loads_first": loads_first,
        "full_warp": full_warp,
        "full_warp_all": sorted(full_warp_all),
        "prefetch_group_in": sorted(prefetch_group_in),
        "early_clock": early_clock,
        "early_clock_in": sorted(early_clock_in),
    }
    return replace(module, items=tuple(new_items))
