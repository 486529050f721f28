"""runtime_cuda/devstate.py mirrors runtime_cuda/include/hbf_device.h (offsetof/sizeof probe), and the
Python constants match hbf_abi.h / hbf_device.h."""
from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest

from hbfcommon import abi
from hbfcommon import ctl as C
from runtime_cuda import devstate as D

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import layout_probe as LP  # noqa: E402

INC = Path(__file__).resolve().parents[2] / "runtime_cuda" / "include"


def test_mirror_has_every_struct_and_field_in_order():
    cs = LP.c_structs(INC / "hbf_device.h")
    assert set(cs) == set(D.STRUCTS)
    for name, fields in cs.items():
        assert fields == [f[0] for f in D.STRUCTS[name]._fields_], name


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    structs = {sname: [f[0] for f in cls._fields_] for sname, cls in D.STRUCTS.items()}
    defines = [n for hdr in ("hbf_device.h", "hbf_abi.h") for n in LP.c_defines(INC / hdr)]
    return LP.compile_probe(tmp_path_factory.mktemp("probe"), INC, ["hbf_device.h", "hbf_abi.h"], structs, defines)


def test_sizes_and_offsets_match(probe):
    import ctypes
    for sname, cls in D.STRUCTS.items():
        assert probe[("size", sname)] == ctypes.sizeof(cls), sname
        for fname, *_ in cls._fields_:
            assert probe[("off", f"{sname}.{fname}")] == getattr(cls, fname).offset, (sname, fname)
            assert probe[("fsize", f"{sname}.{fname}")] == getattr(cls, fname).size, (sname, fname)


def test_constants_match(probe):
    defs = {k[1]: v for k, v in probe.items() if k[0] == "def"}
    py = {"HBF_DEVSTATE_MAGIC": D.HBF_DEVSTATE_MAGIC, "HBF_DEVSTATE_VERSION": D.HBF_DEVSTATE_VERSION,
          "HBF_DEV_MAX_CHANNELS": D.HBF_DEV_MAX_CHANNELS, "HBF_DEV_MAX_BANKS": D.HBF_DEV_MAX_BANKS, "HBF_BUF_READY_BITS": D.HBF_BUF_READY_BITS,
          "HBF_DEV_GUARD_BYTES": D.HBF_DEV_GUARD_BYTES, "HBF_DSF_ALLOW_UNMODELED": D.HBF_DSF_ALLOW_UNMODELED,
          "HBF_DSF_TMA_DEVICE": D.HBF_DSF_TMA_DEVICE,
          "HBF_HELPER_ABI_VERSION": D.HBF_HELPER_ABI_VERSION, "HBF_F_OP_MASK": D.HBF_F_OP_MASK,
          "HBF_F_ACTIVE": D.HBF_F_ACTIVE, "HBF_F_GENERIC": D.HBF_F_GENERIC, "HBF_F_WAIT_NOW": D.HBF_F_WAIT_NOW,
          "HBF_F_NC": D.HBF_F_NC, "HBF_F_RELEASE": D.HBF_F_RELEASE,
          "HBF_FUTURE_TICKET_BIT": D.HBF_FUTURE_TICKET_BIT, "HBF_KSHARDS": D.HBF_KSHARDS,
          "HBF_THC_REPLICA_STRIDE": D.HBF_THC_REPLICA_STRIDE, "HBF_CD_ON": D.HBF_CD_ON,
          "HBF_CD_FAST": D.HBF_CD_FAST, "HBF_CD_SHARDED": D.HBF_CD_SHARDED, "HBF_CD_MULTI": D.HBF_CD_MULTI,
              "HBF_CD_L2": D.HBF_CD_L2,
          "HBF_CDI_READ": D.HBF_CDI_READ, "HBF_CDI_WRITE": D.HBF_CDI_WRITE,
          "HBF_CDI_GROUP": D.HBF_CDI_GROUP, "HBF_MAX_WAIT_NS": D.HBF_MAX_WAIT_NS,
          "HBF_REF_OVF_BUSY": D.HBF_REF_OVF_BUSY, "HBF_INL_MAX_RANGES": abi.INL_MAX_RANGES}
    # the TMA helpers' constants (hbf_abi.h, ABI 5): hbfcommon.abi is their Python side
    py.update({n: getattr(abi, n) for n in ("HBF_TMA_K_LOAD", "HBF_TMA_K_STORE", "HBF_TMA_K_REDUCE",
                                            "HBF_TMA_K_PREFETCH", "HBF_TMA_K_MASK", "HBF_TMA_F_ACTIVE",
                                            "HBF_TMA_F_MULTICAST", "HBF_TMA_RANK_SHIFT", "HBF_TMA_TABLE_ENTRIES",
                                            "HBF_TMA_TABLE_BYTES", "HBF_TMA_E_CLUSTER", "HBF_TMA_DBG_HDR",
                                            "HBF_TMA_DBG_EVENTS", "HBF_TMA_DBG_EV_WORDS", "HBF_TMA_DBG_CTAS",
                                            "HBF_TMA_DBG_CTA_WORDS", "HBF_TMA_DBG_WORDS")})
    assert set(py) == set(defs), set(defs) ^ set(py)
    for k, v in py.items():
        assert defs[k] == v, k


def test_native_reject_line_is_first():
    """__hb_issue reads {lo, span} as one 16-byte load at offset 0 of the block."""
    assert D.hbf_device_state.lo.offset == 0 and D.hbf_device_state.span.offset == 8
    assert D.hbf_device_state.range_seq.offset < 64 and D.HEAD_BYTES % 64 == 0


def _r(base, length, rid=1, mode=C.HBF_MODE_TIMING, perms=C.HBF_PERM_ALL, pb=4096):
    return D.DevRange(base, length, 0, rid, mode, perms, pb)


def test_fill_ranges_bounds_and_order():
    st = D.new_state(0, None, D.RunParams())
    assert st.span == 0 and st.n_ranges == 0          # nothing registered: every address is native
    D.fill_ranges(st, [_r(0x30000000, 8192, 2), _r(0x10000000, 4096, 1)], 5)
    assert st.n_ranges == 2 and st.generation == 5
    assert [st.ranges[i].base for i in range(2)] == [0x10000000, 0x30000000]
    assert st.ranges[0].end == 0x10001000 and st.ranges[0].page_shift == 12
    assert st.lo == 0x10000000 - D.HBF_DEV_GUARD_BYTES
    assert st.lo + st.span == 0x30002000
    addr_in, addr_below = 0x10000010, 0x10000000 - D.HBF_DEV_GUARD_BYTES - 1
    assert (addr_in - st.lo) % (1 << 64) < st.span
    assert (addr_below - st.lo) % (1 << 64) >= st.span


@pytest.mark.parametrize("bad,code", [
    ([_r(0x1000, 8192, 1), _r(0x2000, 4096, 2)], "RANGE_OVERLAP"),
    ([_r(0x1000, 0, 1)], "RANGE_ZERO_LENGTH"),
    ([_r(0x1000, 4096, 1, pb=3000)], "RANGE_MISALIGNED"),
])
def test_fill_ranges_rejects(bad, code):
    from hbfcommon.errors import RangeError
    st = D.new_state(0, None, D.RunParams())
    with pytest.raises(RangeError) as ei:
        D.fill_ranges(st, bad, 1)
    assert ei.value.code.name == code


def _state_for_cdesc(source=C.HBF_SRC_FIXED, ranges=None, max_age=1_000_000, kshards=0):
    m = C.hbf_media_params()
    m.timing_source, m.read_granularity, m.fixed_read_ns, m.fixed_write_ns = source, 64, 2_000, 3_000
    st = D.new_state(0, m, D.RunParams(thermal_max_age_ns=max_age, deadline_bias_ns=250))
    st.kshards = kshards
    D.fill_ranges(st, ranges if ranges is not None else [_r(1 << 40, 1 << 20)], 1)
    return st


def test_cdesc_for_fixed_one_range():
    sp = 0x7F0000000000
    st = _state_for_cdesc()
    d = D.cdesc_for(st, sp, 3)
    assert d.flags == D.HBF_CD_ON and d.st == sp
    assert (d.r0_base, d.r0_end, d.r0_perms, d.r0_page_shift) == (1 << 40, (1 << 40) + (1 << 20), C.HBF_PERM_ALL, 12)
    assert (d.fixed_read_ns, d.fixed_write_ns, d.bias, d.max_age, d.read_gshift) == (2_000, 3_000, 250, 1_000_000, 6)
    size = ctypes.sizeof(D.hbf_kernel_counters)
    # unsharded: hb_kslot_of's &st->kslots[kbase + k], the overflow bucket HBF_MAX_KERNEL_SLOTS - 1
    assert d.kslot == sp + D.KSLOTS_OFF + 3 * size and (d.kslot_stride, d.kshard_stride) == (size, 0)
    assert 3 + d.kmax == C.HBF_MAX_KERNEL_SLOTS - 1
    assert d.replica == sp + D.hbf_device_state.thc_replica.offset


def test_cdesc_for_sharded_fast_multi():
    ks = 0x7E0000000000
    st = _state_for_cdesc(C.HBF_SRC_FAST, [_r(1 << 40, 1 << 20), _r(1 << 41, 1 << 20, rid=2)], kshards=ks)
    d = D.cdesc_for(st, 0x1000, 5)
    assert d.flags == D.HBF_CD_ON | D.HBF_CD_FAST | D.HBF_CD_SHARDED | D.HBF_CD_MULTI
    size = ctypes.sizeof(D.hbf_kernel_counters)
    # [slot][shard] (hb_kslot_of): slot k, shard s at ks + (k * HBF_KSHARDS + s) * size
    assert d.kslot == ks + 5 * D.HBF_KSHARDS * size
    assert (d.kslot_stride, d.kshard_stride) == (D.HBF_KSHARDS * size, size)


@pytest.mark.parametrize("why", ["reference", "curve", "max_age0", "no_ranges", "fixed_u32", "no_state", "slot"])
def test_cdesc_for_general_path_cases(why):
    st = _state_for_cdesc(source={"reference": C.HBF_SRC_REFERENCE, "curve": C.HBF_SRC_CURVE}.get(why, C.HBF_SRC_FIXED),
                          ranges=[] if why == "no_ranges" else None, max_age=0 if why == "max_age0" else 1_000_000)
    if why == "fixed_u32":
        st.media.fixed_read_ns = 1 << 32
    d = D.cdesc_for(st, 0 if why == "no_state" else 0x1000, C.HBF_MAX_KERNEL_SLOTS if why == "slot" else 0)
    assert d.flags == 0 and bytes(d) == bytes(D.hbf_cdesc())   # all zero: the general path


def test_cdesc_non_timing_range_has_no_permissions():
    st = _state_for_cdesc(ranges=[_r(1 << 40, 1 << 20, mode=C.HBF_MODE_CAPACITY)])
    assert D.cdesc_for(st, 0x1000, 0).r0_perms == 0    # every hit goes to the general path


def test_cdesc_inline_offsets_match_the_abi():
    """The byte offsets inline sites read (hbfcommon.abi) are hbf_cdesc's fields."""
    assert D.CDESC_BYTES == abi.CDESC_BYTES == 192
    assert D.hbf_cdesc.inl_nranges.offset == abi.CDESC_INL_NRANGES_OFF
    assert D.hbf_cdesc.inl_base.offset == abi.CDESC_INL_BASE_OFF
    assert D.hbf_cdesc.inl_len.offset == abi.CDESC_INL_LEN_OFF
    # a module built before ABI 6 holds the first 128 bytes: every field its sites and helpers read is there
    assert abi.CDESC_INL_NRANGES_OFF + 4 == abi.CDESC_BYTES_V5 == D.CDESC_BYTES_V5
    assert D.hbf_cdesc.r0_base.offset == abi.CDESC_R0_BASE_OFF
    assert D.hbf_cdesc.read_gshift.offset == abi.CDESC_READ_GSHIFT_OFF
    assert D.hbf_cdesc.r0_len.offset == abi.CDESC_R0_LEN_OFF
    assert D.hbf_cdesc.inl_read_delay.offset == abi.CDESC_INL_READ_DELAY_OFF
    assert D.hbf_cdesc.inl_write_delay.offset == abi.CDESC_INL_WRITE_DELAY_OFF
    assert D.hbf_cdesc.inl_flags.offset == abi.CDESC_INL_FLAGS_OFF


def test_cdesc_inline_fixed_one_range():
    st = _state_for_cdesc()                 # fixed 2000 / 3000 ns, bias 250, one TIMING range of 1 MiB, perms all
    d = D.cdesc_for(st, 0x1000, 0)
    assert d.inl_flags == D.HBF_CDI_READ | D.HBF_CDI_WRITE and d.r0_len == 1 << 20
    assert (d.inl_read_delay, d.inl_write_delay) == (2_000 - 250, 3_000 - 250)   # the bias applied once
    assert D.cdesc_for(st, 0x1000, 0, inline=False).inl_flags == 0               # HBF_INLINE_ISSUE=0


def test_cdesc_fast_source_serves_groups_with_one_range_or_several():
    for ranges in (None, [_r(1 << 40, 1 << 20), _r(1 << 41, 1 << 20, rid=2)]):
        st = _state_for_cdesc(C.HBF_SRC_FAST, ranges)
        d = D.cdesc_for(st, 0x1000, 0)
        assert d.inl_flags == D.HBF_CDI_GROUP and d.flags & D.HBF_CD_FAST
        assert D.cdesc_for(st, 0x1000, 0, inline=False).inl_flags == 0          # HBF_INLINE_ISSUE=0: no groups


def test_cdesc_inline_delay_clamped_by_the_bias():
    st = _state_for_cdesc()
    st.media.fixed_read_ns, st.media.fixed_write_ns = 0, 250      # max(0, 1) and 250 are <= the bias 250
    d = D.cdesc_for(st, 0x1000, 0)
    assert (d.inl_read_delay, d.inl_write_delay) == (0, 0)        # deadline = the issue time (hb_apply_bias)
    st.deadline_bias_ns = 0
    d = D.cdesc_for(st, 0x1000, 0)
    assert (d.inl_read_delay, d.inl_write_delay) == (1, 250)      # a zero service is one ns (a valid future)


@pytest.mark.parametrize("why", ["fast", "multi", "read_only", "small_granule", "big_range", "capacity"])
def test_cdesc_inline_refused(why):
    ranges = None
    if why == "multi":     # more ranges than the inline table holds (2..4: test_cdesc_inline_several_ranges)
        ranges = [_r((1 << 40) + (k << 30), 1 << 20, rid=k + 1) for k in range(abi.INL_MAX_RANGES + 1)]
    elif why == "read_only":
        ranges = [_r(1 << 40, 1 << 20, perms=C.HBF_PERM_READ)]
    elif why == "big_range":
        ranges = [_r(1 << 40, D.INLINE_MAX_RANGE + 4096)]
    elif why == "capacity":
        ranges = [_r(1 << 40, 1 << 20, mode=C.HBF_MODE_CAPACITY)]
    st = _state_for_cdesc(C.HBF_SRC_FAST if why == "fast" else C.HBF_SRC_FIXED, ranges)
    if why == "small_granule":
        st.media.read_granularity = 16
    d = D.cdesc_for(st, 0x1000, 0)
    want = {"read_only": D.HBF_CDI_READ, "small_granule": D.HBF_CDI_WRITE,
            "fast": D.HBF_CDI_GROUP}.get(why, 0)        # the FAST source: groups, nothing inline
    assert d.inl_flags == want


def _multi(n, **kw):
    """n 1 MiB TIMING ranges, 1 GiB apart (granule keys 2^24 apart: disjoint)."""
    return [_r((1 << 40) + (k << 30), 1 << 20, rid=k + 1, **kw) for k in range(n)]


@pytest.mark.parametrize("n", [2, 3, 4])
def test_cdesc_inline_several_ranges(n):
    """ABI 6: 2..4 qualifying ranges fill the descriptor's table (r0 too), both ops inline."""
    st = _state_for_cdesc(ranges=_multi(n))
    d = D.cdesc_for(st, 0x1000, 0)
    assert d.inl_flags == D.HBF_CDI_READ | D.HBF_CDI_WRITE and d.inl_nranges == n
    assert d.flags & D.HBF_CD_MULTI
    assert [d.inl_base[k] for k in range(n)] == [(1 << 40) + (k << 30) for k in range(n)]
    assert [d.inl_len[k] for k in range(4)] == [1 << 20] * n + [0] * (4 - n)     # unused entries never hit
    assert (d.r0_base, d.r0_len) == (1 << 40, 1 << 20)                              # r0 first, as before
    assert (d.inl_read_delay, d.inl_write_delay) == (2_000 - 250, 3_000 - 250)    # one media-wide delay
    off = D.cdesc_for(st, 0x1000, 0, multi=False)                                 # HBF_INLINE_MULTI=0
    assert off.inl_flags == 0 and off.inl_nranges == 0 and list(off.inl_len) == [0] * 4
    assert D.cdesc_for(st, 0x1000, 0, inline=False).inl_flags == 0                 # HBF_INLINE_ISSUE=0


def test_cdesc_inline_one_range_leaves_the_table_empty():
    d = D.cdesc_for(_state_for_cdesc(), 0x1000, 0)
    assert d.inl_nranges == 0 and list(d.inl_len) == [0] * 4 and list(d.inl_base) == [0] * 4


def test_cdesc_inline_several_ranges_aligned_inwards():
    """An entry is the range's 32-byte aligned inside: one compare per range serves an aligned access of at
    most 32 B; the unaligned edges (and a range with no aligned 32 B) take the helpers."""
    b = 1 << 40
    st = _state_for_cdesc(ranges=[_r(b + 8, 1000, rid=1), _r(b + (1 << 30), 40, rid=2), _r(b + (2 << 30) + 4, 20, rid=3)])
    d = D.cdesc_for(st, 0x1000, 0)
    assert d.inl_nranges == 3
    assert (d.inl_base[0], d.inl_len[0]) == (b + 32, (b + 1008) // 32 * 32 - (b + 32))
    assert (d.inl_base[1], d.inl_len[1]) == (b + (1 << 30), 32)
    assert d.inl_len[2] == 0


@pytest.mark.parametrize("why", ["five", "capacity", "big_range", "read_only", "keys_collide", "small_granule",
                                 "fast"])
def test_cdesc_inline_several_ranges_refused(why):
    """A disqualifying range: the descriptor falls back exactly as before ABI 6 (no op inline with several ranges),
    or loses the op that a range does not grant / whose granule keys would collide."""
    ranges = _multi(2)
    if why == "five":
        ranges = _multi(5)
    elif why == "capacity":
        ranges = _multi(1) + [_r((1 << 40) + (1 << 30), 1 << 20, rid=2, mode=C.HBF_MODE_CAPACITY)]
    elif why == "big_range":
        ranges = _multi(1) + [_r(1 << 41, D.INLINE_MAX_RANGE + 4096, rid=2)]
    elif why == "read_only":
        ranges = _multi(1) + [_r((1 << 40) + (1 << 30), 1 << 20, rid=2, perms=C.HBF_PERM_READ)]
    elif why == "keys_collide":   # 2^(32 + 6) bytes apart: the same 32-bit keys at a 64-byte granule
        ranges = _multi(1) + [_r((1 << 40) + (1 << 38), 1 << 20, rid=2)]
    st = _state_for_cdesc(C.HBF_SRC_FAST if why == "fast" else C.HBF_SRC_FIXED, ranges)
    if why == "small_granule":
        st.media.read_granularity = 16
    d = D.cdesc_for(st, 0x1000, 0)
    want = {"read_only": D.HBF_CDI_READ, "keys_collide": D.HBF_CDI_WRITE, "small_granule": D.HBF_CDI_WRITE,
            "fast": D.HBF_CDI_GROUP}.get(why, 0)
    assert d.inl_flags == want
    if want in (0, D.HBF_CDI_GROUP):
        assert d.inl_nranges == 0 and list(d.inl_len) == [0] * 4
        assert bytes(d)[:D.CDESC_BYTES_V5] == bytes(D.cdesc_for(st, 0x1000, 0, multi=False))[:D.CDESC_BYTES_V5]
    else:
        assert d.inl_nranges == 2


def test_cdesc_for_a_module_built_before_abi6():
    """A module with a 128-byte __hb_cdesc (helper ABI <= 5: its sites check r0 only) gets the first 128 bytes of
    the one-range descriptor, with several ranges as before (nothing inline); an ABI 6 module the table."""
    st = _state_for_cdesc(ranges=_multi(3))
    new = D.cdesc_for_module(st, 0x1000, 0, D.CDESC_BYTES)
    old = D.cdesc_for_module(st, 0x1000, 0, D.CDESC_BYTES_V5)
    assert new.inl_nranges == 3 and new.inl_flags == D.HBF_CDI_READ | D.HBF_CDI_WRITE
    assert old.inl_nranges == 0 and old.inl_flags == 0
    assert bytes(old)[:D.CDESC_BYTES_V5] == bytes(D.cdesc_for(st, 0x1000, 0, multi=False))[:D.CDESC_BYTES_V5]
    assert D.cdesc_for_module(st, 0x1000, 0, D.CDESC_BYTES, multi=False).inl_nranges == 0   # HBF_INLINE_MULTI=0
    one = _state_for_cdesc()                        # one range: the same descriptor either way
    assert bytes(D.cdesc_for_module(one, 0x1000, 0, D.CDESC_BYTES_V5)) == bytes(D.cdesc_for_module(one, 0x1000, 0, D.CDESC_BYTES))
    from hbfcommon.errors import ErrorCode, HbfError
    with pytest.raises(HbfError) as ei:
        D.cdesc_for_module(st, 0x1000, 0, 64)
    assert ei.value.code == ErrorCode.ABI_MISMATCH


def test_granule_keys_disjoint():
    g = 6
    assert D._keys_disjoint([(0, 1 << 20), (1 << 30, (1 << 30) + 64)], g)
    assert not D._keys_disjoint([(0, 1 << 20), (1 << 38, (1 << 38) + 64)], g)          # same keys mod 2^32
    assert D._keys_disjoint([(0, 1 << 20), ((1 << 38) + (1 << 20), (1 << 38) + (2 << 20))], g)   # adjacent keys
    top = (1 << 38) - 4096                                                               # wraps past key 2^32 - 1
    assert D._keys_disjoint([(top, top + 8192), (1 << 30, (1 << 30) + 64)], g)
    assert not D._keys_disjoint([(top, top + 8192), (1 << 38, (1 << 38) + 64)], g)     # meets the wrapped part
    assert not D._keys_disjoint([(0, (1 << 38) + 64)], g)                                # > 2^32 granules


def test_kernel_counters_have_inline_requests():
    k = D.hbf_kernel_counters()
    k.inline_requests = 7
    assert D.kernel_counters_dict(k)["inline_requests"] == 7


def test_tma_device_is_on_by_default_and_can_be_turned_off(monkeypatch):
    """The TMA device path (hbf_tma.cuh) is verified on the card (stop 55): the state flag that lets __hb_tma model a
    copy is set unless HBF_TMA_DEVICE=0 (then every instrumented TMA copy fails closed)."""
    from runtime_cuda import knobs
    monkeypatch.delenv("HBF_TMA_DEVICE", raising=False)
    assert knobs.tma_device() is True
    assert D.new_state(0, None, D.RunParams()).flags & D.HBF_DSF_TMA_DEVICE == D.HBF_DSF_TMA_DEVICE
    monkeypatch.setenv("HBF_TMA_DEVICE", "0")
    assert knobs.tma_device() is False
    assert D.new_state(0, None, D.RunParams(tma_device=False)).flags & D.HBF_DSF_TMA_DEVICE == 0
    st = D.new_state(0, None, D.RunParams(tma_device=True, allow_unmodeled=True))
    assert st.flags == D.HBF_DSF_TMA_DEVICE | D.HBF_DSF_ALLOW_UNMODELED
