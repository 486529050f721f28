"""Reference-path tickets come from a counter in DEVICE memory (hbf_device_state.ref_next_ticket), not
from GPU atomics on the host-mapped header.ring_head. The session seeds the counter at attach from the
region (max of ring_head, ring[].seq, completions[].seq: ring_head is only a lower bound), so tickets
continue monotonically across sessions, and copies it back into ring_head at its synchronization
points. CPU half against a real hbfd; the GPU half is marked gpu and skips without a device."""
from __future__ import annotations

import ctypes
import time

import numpy as np
import pytest

import runtime_cuda
from hbfcommon import ctl as C
from hbfd.hostring import RingDriver, seal
from runtime_cuda import devstate as D
from runtime_cuda.session import ticket_floor

N = C.HBF_RING_SLOTS


def _wait_completions(m: C.CtlMap, tickets: list[int], timeout_s: float = 10.0) -> None:
    c = m.completions
    deadline = time.monotonic() + timeout_s
    for t in tickets:
        while int(c["seq"][t % N]) != t + 1:
            assert time.monotonic() < deadline, f"hbfd never completed ticket {t}"
            time.sleep(0.005)
        c["consumed"][t % N] = t + 1


def test_attach_seeds_the_device_ticket_counter_from_the_region(hbfd_daemon):
    sock = hbfd_daemon[0]
    # a first session whose tickets went through ring_head (a host ring driver, as the GPU used to)...
    a = runtime_cuda.attach(socket=sock, cuda=False)
    try:
        h0 = int(a.ctl.ctl.header.ring_head)
        assert a.state.ref_next_ticket == ticket_floor(a.ctl) >= h0
        drv = RingDriver(a.ctl, a.ring_key)
        ts = [drv.issue(arrival_ns=1000 + i, address=0x1000 * i, media_address=0x1000 * i, nbytes=4096,
                        op=C.HBF_OP_LOAD) for i in range(3)]
        assert ts == [h0, h0 + 1, h0 + 2]
        _wait_completions(a.ctl, ts)
        # ...then two tickets reserved from a device counter and published, ring_head not written back
        # (a session that died before its write-back): only ring[].seq / completions[].seq show them
        r = a.ctl.ring
        extra = [h0 + 3, h0 + 4]
        for t in extra:
            s = t % N
            r["arrival_ns"][s], r["address"][s], r["media_address"][s] = 5000 + t, 0x2000, 0x2000
            r["bytes"][s], r["op"][s], r["range_id"][s], r["site"][s] = 4096, C.HBF_OP_LOAD, 0, 0
            r["kernel_slot"][s], r["flags"][s], r["thermal_q_ppm"][s] = 0, 0, 0
            seal(a.ctl, s, t + 1, a.ring_key)            # what the device helper tags it with
            r["seq"][s] = t + 1                          # release: after the payload
        _wait_completions(a.ctl, extra)
        assert int(a.ctl.ctl.header.ring_head) == h0 + 3
    finally:
        a.close()

    b = runtime_cuda.attach(socket=sock, cuda=False)
    try:
        assert int(b.ctl.ctl.header.ring_head) == h0 + 3       # a lower bound only
        assert b.state.ref_next_ticket == h0 + 5               # continues after every published ticket
        # a ticket reserved on ring_head but not yet published also counts
        b.ctl.ctl.header.ring_head = h0 + 7
        assert ticket_floor(b.ctl) == h0 + 7
    finally:
        b.ctl.ctl.header.ring_head = h0 + 5                    # leave no unpublished reservation behind
        b.close()
    c = runtime_cuda.attach(socket=sock, cuda=False)
    try:
        assert c.state.ref_next_ticket == h0 + 5
    finally:
        c.close()


def test_counter_lives_in_line_2_of_the_state_block():
    """Range updates rewrite line 0 and set_run_params lines 0-1; the counter must survive both."""
    assert D.REF_NEXT_TICKET_OFF == D.hbf_device_state.ref_next_ticket.offset
    assert 128 <= D.REF_NEXT_TICKET_OFF < 192 and D.REF_NEXT_TICKET_OFF % 8 == 0


@pytest.mark.gpu
def test_tickets_continue_across_gpu_sessions(gpu, nvcc, hbfd_daemon, tmp_path):
    """Two sessions, each running a reference-path kernel (16 requests): every request READY, the
    device counter seeded from the region, ring_head written back after counters()."""
    from runtime_cuda import cudrv, linker
    cubin = linker.build_microbench(tmp_path)["cubin"]
    heads = []
    for _ in range(2):
        with runtime_cuda.attach(socket=hbfd_daemon[0]) as s:
            floor = ticket_floor(s.ctl)
            v = ctypes.c_uint64(0)
            cudrv.dtoh(v, s.state_dptr + D.REF_NEXT_TICKET_OFF, 8)
            assert v.value == floor                            # published with the block
            mod = cudrv.module_load_data(open(cubin, "rb").read())
            b = s.bind_module(mod, artifact={"kernels": [{"name": n, "admitted": True}
                                                          for n in ("stream_instr", "probe_instr", "sem_instr")]})
            n = 1 << 20
            raw = cudrv.mem_alloc(2 * n)
            src = (raw + 4095) & ~4095
            dst, tier = cudrv.mem_alloc(512 * 32), cudrv.mem_alloc(512 * 8)
            s.register_timing_range(src, n)
            f = cudrv.module_function(mod, "sem_instr")
            s.note_function(f, b, "sem_instr")
            s.launch(f, (4,), (128,), [ctypes.c_int32(2), ctypes.c_uint64(src), ctypes.c_uint64(dst),
                                       ctypes.c_uint64(tier), ctypes.c_int64(65536), ctypes.c_int32(16)],
                     kernel="sem_instr", binding=b)
            s.synchronize()
            c = s.counters()
            assert c["totals"]["status"].get("READY", 0) == 16
            head = int(s.ctl.ctl.header.ring_head)
            assert head == floor + 16 == s.state.ref_next_ticket
            seqs = s.ctl.ring["seq"]
            assert int(np.max(seqs)) == head                   # the last ticket published is head - 1
            heads.append((floor, head))
    assert heads[1][0] == heads[0][1]                          # the second session continues the first
