"""Sharded per-kernel counters (hbf_device.h kshards): the runtime's sum over the shards of a slot."""
from __future__ import annotations

from hbfcommon import ctl as C
from runtime_cuda import devstate as D


def test_shards_add_and_timestamps_take_the_max():
    n = 3
    slots = (D.hbf_kernel_counters * C.HBF_MAX_KERNEL_SLOTS)()
    shards = (D.hbf_kernel_counters * (n * D.HBF_KSHARDS))()
    slots[1].launches, slots[1].kend_ns, slots[1].kstart_ns = 5, 100, 7   # what the block itself holds
    for j in range(D.HBF_KSHARDS):
        s = shards[1 * D.HBF_KSHARDS + j]
        s.ops[C.HBF_OP_LOAD].requests = j
        s.ops[C.HBF_OP_LOAD].program_bytes = 2 * j
        s.kend_ns = 10 * j
        s.slack_ns = 1
        s.status[C.HBF_ST_READY] = 1
    shards[2 * D.HBF_KSHARDS + 5].wait_calls = 9
    D.sum_shards(slots, shards, n)
    s = slots[1]
    assert s.ops[C.HBF_OP_LOAD].requests == sum(range(D.HBF_KSHARDS))
    assert s.ops[C.HBF_OP_LOAD].program_bytes == 2 * sum(range(D.HBF_KSHARDS))
    assert s.kend_ns == 10 * (D.HBF_KSHARDS - 1)      # max, not sum
    assert s.kstart_ns == 7
    assert s.launches == 5 and s.slack_ns == D.HBF_KSHARDS and s.status[C.HBF_ST_READY] == D.HBF_KSHARDS
    assert slots[2].wait_calls == 9 and slots[0].wait_calls == 0
    assert slots[3].wait_calls == 0    # beyond n: untouched


def test_counter_dict_has_the_honest_fields():
    d = D.kernel_counters_dict(D.hbf_kernel_counters())
    for f in ("ready_waits", "slack_ns", "wait_wall_ns", "wait_overhead_ns"):
        assert f in d
    assert set(d["ops"]["load"]) >= {"bytes", "program_bytes", "modeled_ns", "overhead_ns"}


def test_inline_ns_is_a_summed_counter_in_the_same_640_bytes():
    """Helper ABI 8 / devstate 7: inline_ns (the inline path's own time) follows inline_requests, one word taken from
    l2_reserved, so the counters stay 640 bytes (a 64-byte multiple: kslots and the shards keep their size); the
    runtime's shard sum adds it like slack_ns and counters() shows it."""
    import ctypes
    K = D.hbf_kernel_counters
    assert ctypes.sizeof(K) == 640 and K.inline_ns.offset == K.inline_requests.offset + 8
    assert K.l2_lines.offset == K.inline_ns.offset + 8 and K.l2_reserved.size == 8
    assert D.HBF_DEVSTATE_VERSION == 7
    n = 2
    slots = (K * C.HBF_MAX_KERNEL_SLOTS)()
    shards = (K * (n * D.HBF_KSHARDS))()
    for j in range(D.HBF_KSHARDS):
        shards[1 * D.HBF_KSHARDS + j].inline_ns = 1000 + j
        shards[1 * D.HBF_KSHARDS + j].inline_requests = 2
    D.sum_shards(slots, shards, n)
    assert slots[1].inline_ns == sum(1000 + j for j in range(D.HBF_KSHARDS)) and slots[0].inline_ns == 0
    d = D.kernel_counters_dict(slots[1])
    assert d["inline_ns"] == slots[1].inline_ns and d["inline_requests"] == 2 * D.HBF_KSHARDS
