"""The helper ABI: what rewritten code calls and which module globals the runtime sets, in one place.

Python mirror of runtime_cuda/include/hbf_abi.h (the timing helpers, their flag bits and globals)
plus the extern API of the Eidola helper module (eidola/src/hbf_eidola_helpers.cu) that the flags
pass calls. hbfcc declares, checks and links these; runtime_cuda and eidola set the globals and
read the version. ``tests/hbfcc/test_rewrite_helpers.py`` and ``tests/runtime/test_runtime_abi.py``
compare every value here with the header; change both together (and bump the version).
"""
from __future__ import annotations

from dataclasses import dataclass

# ---- hbf_abi.h ---------------------------------------------------------------------------------

HBF_HELPER_ABI_VERSION = 8   # 2: __hb_inline_until, __hb_kernel_flush, a 128-byte __hb_cdesc; 3: __hb_issue_group;
#                              4: __hb_l2_hooks (the L2 build);
#                              5: the TMA helpers (__hb_tma, __hb_mbar_note, __hb_mbar_wait, __hb_tma_enter/exit);
#                              6: a 192-byte __hb_cdesc (several ranges inline: inl_nranges, inl_base, inl_len);
#                              7: __hb_inline_until_live (the inline counters flushed at every until point);
#                              8: inline_ns, the last parameter of __hb_kernel_flush and __hb_inline_until_live
#                                 (the inline path's own time, HBFCC_INLINE_TIME; 0 without it)

# the operation: the low bits of __hb_issue's flags and the op field of a ring request (hbf_ctl.h
# defines them; hbfcommon.ctl imports them from here, so the compiler needs no control-region mirror)
HBF_OP_LOAD = 0
HBF_OP_STORE = 1
HBF_OP_ATOMIC = 2
HBF_OP_CPASYNC = 3

# flags argument of __hb_issue
HBF_F_OP_MASK = 0x3
HBF_F_ACTIVE = 0x4
HBF_F_GENERIC = 0x8
HBF_F_WAIT_NOW = 0x10
HBF_F_NC = 0x20
HBF_F_RELEASE = 0x40
HBF_FUTURE_TICKET_BIT = 1 << 63

# module globals the helper PTX defines and the runtime points at its state after loading a module
STATE_GLOBAL = "__hb_state"            # .u64: device address of hbf_device_state (0 = detached)
# the attach switch in the constant bank (docs/design.md §3.2 "Nothing registered: detached"): defined by the
# rewritten module itself (hbfcc's timing pass, .weak: one per link like __hb_state), not by the helper PTX, in every
# module with a native version; nonzero = detached (the prologue's first read, one ld.const, branches to the native
# body without a global load); 0, its initial value = read __hb_state as before (a runtime that does not know the word
# never writes it: slower, never wrong). The runtime writes it wherever it writes __hb_state.
DETACHED_GLOBAL = "__hb_detached"      # .const .u64: 1 = detached (__hb_state is 0), 0 = ask __hb_state
KSLOT_BASE_GLOBAL = "__hb_kslot_base"  # .u32: first per-kernel counter slot of the module
L2_HOOKS_GLOBAL = "__hb_l2_hooks"      # .u32, the L2 build only (docs/design.md §3.12): its helpers model the L2
CDESC_GLOBAL = "__hb_cdesc"            # .const 192 B: the launch descriptor (hbf_device.h hbf_cdesc; 0 = none)
CDESC_BYTES = 192                      # sizeof(hbf_cdesc) (ABI 6)
CDESC_BYTES_V5 = 128                   # a module built before ABI 6: its first 128 bytes, one range inline
# byte offsets in hbf_cdesc that inline sites read (hbf_device.h; tests/runtime/test_runtime_abi.py checks them)
CDESC_R0_BASE_OFF = 8
CDESC_READ_GSHIFT_OFF = 90
CDESC_R0_LEN_OFF = 96
CDESC_INL_READ_DELAY_OFF = 104
CDESC_INL_WRITE_DELAY_OFF = 112
HBF_CDI_READ = 0x1                     # hbf_cdesc.inl_flags: loads may be served inline
HBF_CDI_WRITE = 0x2                    # stores may be served inline
HBF_CDI_GROUP = 0x4                    # issue groups through __hb_issue_group (the FAST source)
CDESC_INL_FLAGS_OFF = 120
# ABI 6, the multi-range inline path: inl_nranges (0: r0 only), then INL_MAX_RANGES bases and lengths (32-B aligned)
CDESC_INL_NRANGES_OFF = 124
CDESC_INL_BASE_OFF = 128
CDESC_INL_LEN_OFF = 160
INL_MAX_RANGES = 4                     # hbf_device.h HBF_INL_MAX_RANGES (docs/design.md §3.3: why 4)
HB_GROUP_SLOW = -1                      # __hb_issue_group (as .s64; all ones): the group is not served, each site alone
INLINE_NEVER = -(2 ** 63 - 1)          # __hb_inline_until: not inline for the rest of this launch

# ---- TMA and bulk async copies (ABI 5, hbf_abi.h "TMA"; hbfcc/passes/tma.py) ----
# __hb_tma's kind argument: bits 0..3 the kind, bits 8..11 the tensor rank (0: a bulk copy: gaddr is the global
# address and nbytes its size), HBF_TMA_F_ACTIVE (the copy's guard holds), HBF_TMA_F_MULTICAST (ctamask used)
HBF_TMA_K_LOAD = 0          # global -> shared, completion through an mbarrier (complete_tx)
HBF_TMA_K_STORE = 1         # shared -> global, bulk_group completion
HBF_TMA_K_REDUCE = 2        # shared -> global read-modify-write, bulk_group completion
HBF_TMA_K_PREFETCH = 3      # global -> L2, nobody waits
HBF_TMA_K_MASK = 0xF
HBF_TMA_F_ACTIVE = 0x10
HBF_TMA_F_MULTICAST = 0x20
HBF_TMA_RANK_SHIFT = 8
# the per-CTA completion table hbfcc declares in .shared (hbf_abi.h "TMA completion table"): an 8-byte header
# {u32 exited threads, u32 flags} and HBF_TMA_TABLE_ENTRIES entries {u32 key (the mbarrier's shared::cta address
# minus the table's, + 1: the same in every CTA of a cluster, whose addresses carry the CTA's rank), u32 pad,
# u64 word[2] (per phase parity)}
HBF_TMA_TABLE_ENTRIES = 16
HBF_TMA_TABLE_BYTES = 8 + 24 * HBF_TMA_TABLE_ENTRIES
HBF_TMA_E_CLUSTER = 0x1     # __hb_tma_enter flags: other CTAs of the cluster write this table (multicast)
# the multicast debug buffer of a helper built with -DHBF_TMA_MC_DEBUG=1 (hbf_abi.h; bench/tma_semantics.py --mc-debug)
TMA_DBG_GLOBAL = "__hb_tma_dbg"
HBF_TMA_DBG_HDR = 4
HBF_TMA_DBG_EVENTS = 256
HBF_TMA_DBG_EV_WORDS = 12
HBF_TMA_DBG_CTAS = 8
HBF_TMA_DBG_CTA_WORDS = 4 + HBF_TMA_TABLE_BYTES // 4
HBF_TMA_DBG_WORDS = HBF_TMA_DBG_HDR + HBF_TMA_DBG_EVENTS * HBF_TMA_DBG_EV_WORDS + HBF_TMA_DBG_CTAS * HBF_TMA_DBG_CTA_WORDS

# every helper symbol starts with this; the linker keeps these names and makes them .weak
HELPER_PREFIX = "__hb_"


@dataclass(frozen=True)
class Signature:
    """A helper function as rewritten code declares it: ``(width, name)`` per return and parameter."""

    name: str
    returns: tuple[tuple[int, str], ...]
    params: tuple[tuple[int, str], ...]

    @property
    def widths(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(return widths, parameter widths): what a helper module's definition must match."""
        return tuple(w for w, _ in self.returns), tuple(w for w, _ in self.params)


def _sig(name: str, returns=(), params=()) -> Signature:
    return Signature(name, tuple(returns), tuple(params))


# the timing helpers (hbf_abi.h "PTX prototypes"), in the order hbfcc declares them
HELPERS: dict[str, Signature] = {s.name: s for s in (
    _sig("__hb_issue", [(64, "fut")], [(64, "addr"), (32, "bytes"), (32, "flags"), (32, "site")]),
    _sig("__hb_wait", [], [(64, "fut"), (32, "site")]),
    _sig("__hb_future_join", [(64, "fut")], [(64, "a"), (64, "b")]),
    _sig("__hb_kernel_enter", [], [(32, "kernel_index")]),
    _sig("__hb_kernel_exit", [], [(32, "kernel_index")]),
    _sig("__hb_inline_until", [(64, "until")], [(32, "op")]),
    _sig("__hb_kernel_flush", [], [(32, "kernel_index"), (32, "rd_req"), (32, "rd_granules"), (64, "rd_bytes"),
                                   (32, "wr_req"), (64, "wr_bytes"), (32, "ready_waits"), (64, "slack_ns"),
                                   (64, "inline_ns")]),
    _sig("__hb_inline_until_live", [(64, "until")], [(32, "op"), (32, "kernel_index"), (32, "rd_req"),
                                                     (32, "rd_granules"), (64, "rd_bytes"), (32, "wr_req"),
                                                     (64, "wr_bytes"), (32, "ready_waits"), (64, "slack_ns"),
                                                     (64, "inline_ns")]),
    _sig("__hb_issue_group", [(64, "fut")], [(64, "addrs"), (32, "pmask"), (64, "nbpack"), (32, "site")]),
    _sig("__hb_tma", [(64, "fut")], [(64, "gaddr"), (32, "c0"), (32, "c1"), (32, "c2"), (32, "c3"), (32, "c4"),
                                     (32, "nbytes"), (32, "mbar"), (32, "kind"), (32, "ctamask"), (32, "table"),
                                     (32, "site")]),
    _sig("__hb_mbar_note", [], [(32, "table"), (32, "mbar"), (64, "fut"), (32, "site")]),
    _sig("__hb_mbar_wait", [], [(32, "table"), (32, "mbar"), (32, "parity"), (32, "site")]),
    _sig("__hb_tma_enter", [], [(32, "table"), (32, "flags")]),
    _sig("__hb_tma_exit", [], [(32, "table"), (32, "kernel_index")]),
)}

# ---- the Eidola helper module (the flags pass, issue 7) ----------------------------------------

EIDOLA_STATE_GLOBAL = "__hb_eidola_state"   # .u64: device address of the replay's state (0 = none)

_R = [(32, "func_retval0")]
_R64 = [(64, "func_retval0")]
EIDOLA_HELPERS: dict[str, Signature] = {s.name: s for s in (
    _sig("__hb_eidola_ld_flag_u32", _R, [(64, "addr")]),
    _sig("__hb_eidola_ld_flag_u64", _R64, [(64, "addr")]),
    _sig("__hb_eidola_kernel_enter"),
    _sig("__hb_eidola_monitor", _R, [(64, "addr"), (32, "nbytes"), (64, "wake")]),
    _sig("__hb_eidola_mwait", [], [(64, "addr")]),
    _sig("__hb_eidola_flush_nonflag", [], [(32, "thread_reads"), (32, "warp_reads")]),
    _sig("__hb_eidola_ld_flag32_acct", _R64, [(64, "addr")]),
    _sig("__hb_eidola_count_flag_other", [], [(32, "klass"), (32, "lead"), (32, "virt")]),
    _sig("__hb_eidola_flush_flag", [], [(32, "klass"), (32, "thread_reads"), (32, "warp_reads"),
                                        (32, "virtual_loads")]),
)}
