"""TMA and the rest of Hopper's asynchronous copies (issue 15): which forms are admitted, how each is
modeled, and the code the timing pass (:mod:`hbfcc.passes.timing`) emits for them.

docs/design.md §3.3 "TMA and bulk async copies (issue 15)" is the design; docs/hbfcc.md has the rules.
In short:

* **Issue.** Before every admitted copy that touches global memory, the issuing lane calls
  ``__hb_tma`` (hbf_abi.h, ABI 5) with the global side (a TensorMap's generic address and its
  coordinates, or a bulk copy's global address and size), the mbarrier, the multicast mask and the
  kind. The helper decodes the descriptor, splits the box into HBM / HBF / out-of-bounds bytes and turns
  the HBF page spans into media requests through the ordinary per-page request path. The copy itself,
  its mbarrier and its destination are never touched.
* **Completion where the program waits (conjunctive).** An mbarrier-tracked copy (a load, or
  ``cp.async.mbarrier.arrive`` for Ampere ``cp.async``) records its deadline in a per-CTA table
  (``__hb_mbt``, declared here in ``.shared``) under (mbarrier, parity of the phase its bytes complete);
  every ``mbarrier.try_wait``/``test_wait`` that returns true then also waits for its phase's deadline
  (``__hb_mbar_wait``): the phase is over for the program when the native phase AND every modeled
  segment are. Multicast copies write into each destination CTA's table (shared::cluster).
* **Bulk groups.** Stores and reductions to global are posted into a per-thread bulk-group window
  (``%__hb_bg<k>``, like the ``cp.async`` window): ``cp.async.bulk.wait_group N`` waits for the groups
  older than the N newest; ``.read`` does not wait (it says only that the shared source may be reused;
  the modeled global write is not observable there); every exit waits for all of them.
* **Refused** with a reason naming the form: im2col, gather4/scatter4, ``.cta_group``, ``.cp_mask``,
  unknown forms, a token-form mbarrier wait whose state does not come from an ``mbarrier.arrive`` of
  the same function (its phase cannot be known) in a module with tracked copies.

This module holds the classification (:func:`classify`) and the constants; the emission lives in the
timing pass, which owns the function's registers and CFG.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from hbfcommon import abi
from hbfcommon.tensormap import SMEM_ALIGN_OF_SWIZZLE

from hbfcc.ptx.model import Address, Immediate, Instruction, Register, Sink

# the per-CTA completion table (hbf_abi.h "TMA completion table"): a module-scope .shared array
TABLE_SYMBOL = "__hb_mbt"
TABLE_BYTES = abi.HBF_TMA_TABLE_BYTES
# A kernel's dynamic shared memory (its ``.extern .shared`` array: Triton's ``global_smem``, CUDA's ``extern
# __shared__``) starts where its static ``.shared`` bytes end (ptxas places it after them; on sm_90 both follow the
# 1 KiB the system reserves, so with no static bytes it starts 1024-byte aligned). Triton's TMA destinations and
# wgmma operands in it are 128-byte swizzled tiles that need that alignment (the 128B swizzle pattern's repeat,
# hbfcommon.tensormap.smem_dst_align, the largest any copy needs): the table, a static array, moved Triton's
# global_smem by 400 B and every instrumented TMA load faulted (CUDA_ERROR_MISALIGNED_ADDRESS at the UTMALDG, H100,
# 2026-12-06; docs/RESULTS.md "Issue 15: the Triton TMA kernels' misaligned address"). The table is therefore
# declared as a whole number of these units: the dynamic base moves by a multiple of 1024 B, its alignment stays
# what the plain build gives; the bytes past TABLE_BYTES are unused.
DYNAMIC_SMEM_ALIGN = max(SMEM_ALIGN_OF_SWIZZLE)
TABLE_DECL_BYTES = -(-TABLE_BYTES // DYNAMIC_SMEM_ALIGN) * DYNAMIC_SMEM_ALIGN

# the sm_100-family and other modes hbfcc does not model (ptxas rejects most of them on sm_90a anyway)
_UNMODELED_MODES = {
    "im2col": "im2col mode (the box is a sliding window over the im2col offsets and the pixel range: its "
              "address pattern is not modeled)",
    "im2col::w": "im2col::w mode (sm_100 family) is not modeled",
    "im2col::w::128": "im2col::w::128 mode (sm_100 family) is not modeled",
    "tile::gather4": "tile::gather4 (sm_100 family) is not modeled",
    "tile::scatter4": "tile::scatter4 (sm_100 family) is not modeled",
    "cp_mask": "cp.async.bulk .cp_mask (byte-masked bulk store, sm_100 family) is not modeled",
}


@dataclass(frozen=True)
class TmaForm:
    """What the timing pass does with one TMA-family instruction.

    cls:        the report class ("tma.load.tensor.2d", "tma.store.bulk", "mbarrier.wait.parity", ...)
    action:     "rewritten" (a __hb_tma site, a wait hook, a group operation) | "native" | "refused"
    completion: "mbarrier" | "bulk_group" | "none" (prefetch) for copies
    gaddr:      the global side: a tensor copy's [tmap, {coords}] Address, a bulk copy's global Address
    nbytes:     a bulk copy's size operand (tensor copies: None, the box says)
    mbar:       the mbarrier Address (mbarrier completion, waits, arrives)
    ctamask:    the multicast mask operand (.multicast::cluster), else None
    """

    cls: str
    action: str
    reason: str = ""
    kind: int = 0
    rank: int = 0
    completion: str = ""
    gaddr: Optional[Address] = None
    nbytes: object = None
    mbar: Optional[Address] = None
    ctamask: object = None
    multicast: bool = False
    role: str = ""        # "copy" | "wait" | "arrive" | "cpasync_arrive" | "commit" | "wait_group" | ""


def _rank(mods: tuple[str, ...]) -> int:
    for m in mods:
        if len(m) == 2 and m[1] == "d" and m[0] in "12345":
            return int(m[0])
    return 0


def _addrs(inst: Instruction) -> list[Address]:
    return [o for o in inst.operands if type(o) is Address]


def _unmodeled(mods: tuple[str, ...]) -> Optional[str]:
    for m in mods:
        if m in _UNMODELED_MODES:
            return _UNMODELED_MODES[m]
        if m.startswith("cta_group"):
            return f".{m} (sm_100 family CTA-pair copy) is not modeled"
    return None


def _trailing_mask(inst: Instruction, first_extra: int) -> object:
    """The ctaMask operand of a .multicast::cluster copy: the first operand after the fixed ones."""
    ops = inst.operands
    return ops[first_extra] if len(ops) > first_extra else None


def classify(inst: Instruction) -> Optional[TmaForm]:
    """The TMA-family decision for ``inst``; None when it is not a TMA-family instruction (the timing
    pass classifies everything else)."""
    op, mods, mn = inst.opcode, inst.modifiers, inst.mnemonic
    fam = inst.family
    if op == "cp" and fam in ("cp.async.bulk.commit_group",):
        return TmaForm("tma.bulk.commit_group", "rewritten", role="commit")
    if op == "cp" and fam == "cp.async.bulk.wait_group":
        if not inst.operands or type(inst.operands[0]) is not Immediate:
            return TmaForm("tma.bulk.wait_group", "refused", reason=f"{mn} with a non-immediate group count")
        return TmaForm("tma.bulk.wait_group" + (".read" if "read" in mods else ""), "rewritten", role="wait_group")
    if op == "cp" and fam == "cp.async.mbarrier.arrive":
        a = inst.address
        if a is None:
            return TmaForm("cp.async.mbarrier.arrive", "refused", reason=f"{mn} without an mbarrier operand")
        return TmaForm("cp.async.mbarrier.arrive" + (".noinc" if "noinc" in mods else ""), "rewritten",
                       mbar=a, role="cpasync_arrive")
    if op == "cp" and (fam.startswith("cp.async.bulk") or fam.startswith("cp.reduce.async.bulk")):
        return _classify_copy(inst, fam)
    if op == "mbarrier":
        return _classify_mbarrier(inst, fam)
    if op == "fence" and fam == "fence.proxy":
        return TmaForm("fence.proxy." + ".".join(m for m in mods[1:2]), "native",
                       reason="proxy fence (orders the async/tensormap proxy; no data to model)")
    if op == "tensormap":
        return _classify_tensormap(inst, fam)
    if op in ("prefetch", "prefetchu") and "tensormap" in mods:
        return TmaForm("prefetch.tensormap", "native", reason="prefetch of a tensor map (no data to the program)")
    return None


def _classify_copy(inst: Instruction, fam: str) -> TmaForm:
    mods, mn = inst.modifiers, inst.mnemonic
    bad = _unmodeled(mods)
    tensor = fam.endswith(".tensor")
    reduce_ = fam.startswith("cp.reduce")
    prefetch = "prefetch" in fam
    rank = _rank(mods) if tensor else 0
    what = ("prefetch" if prefetch else "reduce" if reduce_ else None)
    dst, src = inst.copy_spaces() or ("generic", "generic")
    if prefetch:
        what = "prefetch"
    elif reduce_:
        what = "reduce" if dst == "global" else "reduce.dsmem"
    elif src == "global":
        what = "load"
    elif dst == "global":
        what = "store"
    else:
        what = "dsmem"
    cls = f"tma.{what}." + (f"tensor.{rank}d" if tensor else "bulk")
    if bad is not None:
        return TmaForm(cls, "refused", reason=f"{mn}: {bad}")
    if tensor and not 1 <= rank <= 5:
        return TmaForm(cls, "refused", reason=f"{mn}: tensor copy without a 1d..5d rank")
    A = _addrs(inst)
    if what in ("dsmem", "reduce.dsmem"):
        return TmaForm(cls, "native", reason="shared::cta -> shared::cluster bulk copy (DSMEM), not global memory")
    if what == "prefetch":
        if not A:
            return TmaForm(cls, "refused", reason=f"{mn}: operands not understood")
        if tensor:
            if A[0].coords is None:
                return TmaForm(cls, "refused", reason=f"{mn}: no tensor coordinates")
            return TmaForm(cls, "rewritten", kind=abi.HBF_TMA_K_PREFETCH, rank=rank, completion="none", gaddr=A[0],
                           role="copy")
        if len(inst.operands) < 2:
            return TmaForm(cls, "refused", reason=f"{mn}: operands not understood")
        return TmaForm(cls, "rewritten", kind=abi.HBF_TMA_K_PREFETCH, completion="none", gaddr=A[0],
                       nbytes=inst.operands[1], role="copy")
    mbar_mode = any(m.startswith("mbarrier::complete_tx") for m in mods)
    group_mode = "bulk_group" in mods
    if what == "load":
        if not mbar_mode:
            return TmaForm(cls, "refused", reason=f"{mn}: a global->shared copy without mbarrier completion "
                           "is not a known form")
        multicast = "multicast::cluster" in mods
        if tensor:
            # [dst], [tmap, {c}], [mbar] {, im2colInfo} {, ctaMask} {, policy}
            if len(A) < 3 or A[1].coords is None:
                return TmaForm(cls, "refused", reason=f"{mn}: operands not understood")
            mask = _trailing_mask(inst, 3) if multicast else None
            return TmaForm(cls, "rewritten", kind=abi.HBF_TMA_K_LOAD, rank=rank, completion="mbarrier", gaddr=A[1],
                           mbar=A[2], ctamask=mask, multicast=multicast, role="copy")
        # [dst], [src], size, [mbar] {, ctaMask} {, policy}
        ops = inst.operands
        if len(ops) < 4 or type(ops[0]) is not Address or type(ops[1]) is not Address or type(ops[3]) is not Address:
            return TmaForm(cls, "refused", reason=f"{mn}: operands not understood")
        mask = _trailing_mask(inst, 4) if multicast else None
        return TmaForm(cls, "rewritten", kind=abi.HBF_TMA_K_LOAD, completion="mbarrier", gaddr=ops[1],
                       nbytes=ops[2], mbar=ops[3], ctamask=mask, multicast=multicast, role="copy")
    # store / reduce into global memory: bulk_group completion
    kind = abi.HBF_TMA_K_REDUCE if what == "reduce" else abi.HBF_TMA_K_STORE
    if not group_mode:
        return TmaForm(cls, "refused", reason=f"{mn}: a copy into global memory without bulk_group completion "
                       "is not a known form")
    if tensor:
        # [tmap, {c}], [src] {, policy}
        if len(A) < 2 or A[0].coords is None:
            return TmaForm(cls, "refused", reason=f"{mn}: operands not understood")
        return TmaForm(cls, "rewritten", kind=kind, rank=rank, completion="bulk_group", gaddr=A[0], role="copy")
    ops = inst.operands
    if len(ops) < 3 or type(ops[0]) is not Address or type(ops[1]) is not Address:
        return TmaForm(cls, "refused", reason=f"{mn}: operands not understood")
    return TmaForm(cls, "rewritten", kind=kind, completion="bulk_group", gaddr=ops[0], nbytes=ops[2], role="copy")


def _classify_mbarrier(inst: Instruction, fam: str) -> TmaForm:
    mods = inst.modifiers
    if fam in ("mbarrier.try_wait", "mbarrier.test_wait"):
        parity = "parity" in mods
        ops = inst.operands
        if len(ops) < 3 or type(ops[1]) is not Address:
            return TmaForm(f"{fam}", "refused", reason=f"{inst.mnemonic}: operands not understood")
        space = inst.state_space or "generic"
        if space not in ("shared", "shared::cta"):
            # generic / shared::cluster waits: the waiter's own barrier in its CTA is what the program waits on
            return TmaForm(f"{fam}" + (".parity" if parity else ""), "refused",
                           reason=f"{inst.mnemonic}: a wait on a .{space} mbarrier address is not modeled "
                           "(hbfcc keys completions by the shared::cta address)")
        return TmaForm(f"{fam}" + (".parity" if parity else ""), "rewritten", mbar=ops[1], role="wait")
    if fam in ("mbarrier.arrive", "mbarrier.arrive_drop"):
        ops = inst.operands
        a = inst.address
        token = bool(ops) and type(ops[0]) is Register
        return TmaForm(fam + (".expect_tx" if "expect_tx" in mods else ""), "native",
                       reason="mbarrier arrive (shared memory object)", mbar=a, role="arrive" if token else "")
    return TmaForm(fam, "native", reason="mbarrier objects live in shared memory")


def _classify_tensormap(inst: Instruction, fam: str) -> TmaForm:
    space = inst.state_space or "generic"
    if fam == "tensormap.cp_fenceproxy":
        # tensormap.cp_fenceproxy.global.shared::cta... [dst], [src], 128: a 128-byte write into global memory
        A = _addrs(inst)
        if not A:
            return TmaForm(fam, "refused", reason=f"{inst.mnemonic}: operands not understood")
        return TmaForm(f"{fam}.global", "rewritten", gaddr=A[0], nbytes=Immediate("128"), role="descstore")
    if fam == "tensormap.replace":
        if space in ("shared", "shared::cta", "shared::cluster", "param", "param::entry", "param::func", "local"):
            return TmaForm(f"{fam}.{space}", "native", reason=f".{space} tensor map staging")
        A = _addrs(inst)
        if not A:
            return TmaForm(fam, "refused", reason=f"{inst.mnemonic}: operands not understood")
        return TmaForm(f"{fam}.{space}", "rewritten", gaddr=A[0], nbytes=Immediate("128"), role="descstore")
    return TmaForm(fam, "native", reason="tensor-map bookkeeping")


def is_sink(o) -> bool:
    return type(o) is Sink
