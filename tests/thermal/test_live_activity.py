"""Live HBF activity (issue 17 item 2): the device path publishes its media activity into the control region
while kernels run (hbf_ctl.h hbf_activity) and hbfd's 10 ms energy bins read it, so the package model heats
the HBF layers DURING a long kernel, not at the next synchronization.

The writer here is a host twin of the device's publisher (runtime_cuda/src/hbf_helpers.cu hb_act_mark /
hb_act_visit / hb_act_flush): per-kernel counter shards that simulated warps add to, the launched-slot mask,
the per-slot "seen" sums and running totals in (simulated) device memory, single-flight publication at most
once per HBF_ACT_PERIOD_NS, HBF_ACT_SLOTS_PER_FLUSH slots per publication round robin, the same fields in the
same order under the seqlock (odd, payload, even), and no publication before the latest launched kernel has run
HBF_ACT_MIN_RUN_NS (short kernels never pay for one). The device code itself is not run here (no GPU in CI)."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from hbfcommon import ctl
from hbfcommon.profile import PROFILE_DIR
from hbfd.runner import start_daemon

ROOT = Path(__file__).resolve().parents[2]
KSHARDS = 32


class DeviceActivityTwin:
    """The device publisher's algorithm and state, on the host (see the module docstring)."""

    def __init__(self, c: ctl.hbf_ctl, state_ptr: int = 0x7F00_0000_0000):
        self.c = c
        self.state_ptr = state_ptr
        n = ctl.HBF_MAX_KERNEL_SLOTS
        self.shards = np.zeros((n, KSHARDS, ctl.HBF_N_OPS, 2), np.uint64)   # kshards: ops[op].{requests, bytes}
        self.mask = np.zeros(n // 64, np.uint64)
        self.seen = np.zeros((n, 2 * ctl.HBF_N_OPS), np.uint64)
        self.total = np.zeros(2 * ctl.HBF_N_OPS, np.uint64)
        self.stamp = 0
        self.cursor = 0
        self.pub_seq = 0
        self.flushes = 0
        self.visits = 0
        self.launch_ns = 0
        self.lock = threading.Lock()

    # __hb_kernel_enter, block 0 thread 0 (hb_act_mark): the launch stamped, the slot marked
    def kernel_enter(self, k: int, now_ns: int) -> None:
        self.launch_ns = now_ns
        self.mask[k >> 6] |= np.uint64(1 << (k & 63))

    # a warp's counter update (red.global on its SM's shard)
    def count(self, k: int, smid: int, op: int, requests: int, nbytes: int) -> None:
        with self.lock:
            self.shards[k, smid % KSHARDS, op, 0] += np.uint64(requests)
            self.shards[k, smid % KSHARDS, op, 1] += np.uint64(nbytes)

    def _visit(self, k: int) -> None:
        with self.lock:
            s = self.shards[k].sum(axis=0)                         # (ops, 2): the shards summed
        cur = s.reshape(-1)                                        # requests, bytes per op
        grow = cur > self.seen[k]
        self.total[grow] += cur[grow] - self.seen[k][grow]
        self.seen[k][grow] = cur[grow]

    # hb_act_flush, called by the thread that refreshes the thermal snapshot
    def flush(self, now_ns: int) -> bool:
        if self.stamp & 1 or now_ns - self.stamp < ctl.HBF_ACT_PERIOD_NS:
            return False
        if now_ns - self.launch_ns < ctl.HBF_ACT_MIN_RUN_NS:      # the latest launch is young (signed on the GPU)
            return False
        self.stamp = now_ns | 1                                    # the CAS claim
        n = ctl.HBF_MAX_KERNEL_SLOTS
        k, scanned, visited = self.cursor % n, 0, 0
        while scanned < n and visited < ctl.HBF_ACT_SLOTS_PER_FLUSH:
            m = int(self.mask[k >> 6]) >> (k & 63)
            if m == 0:
                skip = 64 - (k & 63)
                k, scanned = (k + skip) % n, scanned + skip
                continue
            z = (m & -m).bit_length() - 1
            k += z
            scanned += z + 1
            self._visit(k)
            visited += 1
            k = (k + 1) % n
        q = self.pub_seq + 2
        a = self.c.activity
        a.seq = q - 1                                              # odd
        for op in range(ctl.HBF_N_OPS):
            a.ops[op].requests, a.ops[op].bytes = int(self.total[2 * op]), int(self.total[2 * op + 1])
        self.flushes += 1
        self.visits += visited
        a.flushes, a.gpu_ns = self.flushes, now_ns
        a.slot_visits, a.state_ptr = self.visits, self.state_ptr
        a.seq = q                                                  # even (st.release.sys)
        self.pub_seq, self.cursor = q, k
        self.stamp = now_ns & ~1
        return True


def test_twin_publishes_lower_bounds_that_reach_the_totals():
    """Round robin over more launched slots than one publication visits: every publication is a consistent
    lower bound of what the shards hold, and a few more publications with no new traffic reach the exact sum."""
    c = ctl.hbf_ctl()
    tw = DeviceActivityTwin(c)
    rng = np.random.default_rng(1)
    slots = [0, 3, 64, 65, 200, 1023]                              # more than HBF_ACT_SLOTS_PER_FLUSH
    for k in slots:
        tw.kernel_enter(k, 0)
    t = ctl.HBF_ACT_MIN_RUN_NS - ctl.HBF_ACT_PERIOD_NS
    for _ in range(50):
        for k in slots:
            tw.count(k, int(rng.integers(0, 132)), int(rng.integers(0, 4)), 1, 4096)
        t += ctl.HBF_ACT_PERIOD_NS
        assert tw.flush(t)
        a = ctl.read_activity(c)
        exact = tw.shards.sum(axis=(0, 1))
        assert all(a.requests[i] <= exact[i, 0] and a.bytes[i] <= exact[i, 1] for i in range(ctl.HBF_N_OPS))
        assert not tw.flush(t + ctl.HBF_ACT_PERIOD_NS // 2)       # at most one publication per period
    for _ in range(3):
        t += ctl.HBF_ACT_PERIOD_NS
        tw.flush(t)
    a = ctl.read_activity(c)
    exact = tw.shards.sum(axis=(0, 1))
    assert a.requests == tuple(int(v) for v in exact[:, 0]) and a.bytes == tuple(int(v) for v in exact[:, 1])
    assert a.slot_visits == 53 * ctl.HBF_ACT_SLOTS_PER_FLUSH and a.state_ptr == tw.state_ptr


def test_short_kernels_never_publish_long_ones_do():
    """The publisher waits until the latest launched kernel has run HBF_ACT_MIN_RUN_NS: a stream of 40 us
    kernels (each one's refresher trying at its end) publishes nothing in 100 ms -- their activity reaches hbfd
    at the next synchronization -- while a kernel that runs 10 ms publishes from its 2nd ms on, once per period;
    a launch stamped a little after `now` (another SM's clock) is young too."""
    c = ctl.hbf_ctl()
    tw = DeviceActivityTwin(c)
    t = 10 * ctl.HBF_ACT_MIN_RUN_NS
    for i in range(1000):                                           # 100 ms of short kernels
        tw.kernel_enter(i % 4, t)
        tw.count(i % 4, i % 132, ctl.HBF_OP_LOAD, 1, 4096)
        assert not tw.flush(t + 40_000)
        t += 100_000
    assert tw.flushes == 0 and ctl.read_activity(c).flushes == 0
    tw.kernel_enter(7, t)                                           # one long kernel
    assert not tw.flush(t - 1_000)                                  # stamped after now
    published = [dt for dt in range(0, 10_000_000, 100_000) if tw.flush(t + dt)]
    assert published[0] == ctl.HBF_ACT_MIN_RUN_NS
    assert published == list(range(ctl.HBF_ACT_MIN_RUN_NS, 10_000_000, ctl.HBF_ACT_PERIOD_NS))
    a = ctl.read_activity(c)
    assert a.requests[ctl.HBF_OP_LOAD] == 1000 and a.bytes[ctl.HBF_OP_LOAD] == 1000 * 4096   # the short ones too


def _profile(tmp_path: Path) -> Path:
    """ocp-sg1 with a cool compute die (10 W constant telemetry) and no HBM traffic: the HBF stack's own
    activity is what heats its layers."""
    p = json.loads((PROFILE_DIR / "ocp-sg1.json").read_text())
    num = lambda v: {"value": v, "provenance": "assumed", "source": "test scenario"}  # noqa: E731
    p["thermal"]["telemetry_gpu_power_w"] = num(10)
    p["thermal"]["hbm_traffic_bytes_per_s"] = num(0)
    out = tmp_path / "sg1-cool.json"
    out.write_text(json.dumps(p))
    return out


def test_hbf_layers_heat_during_a_long_kernel(tmp_path):
    """A simulated 3 s kernel streaming 1.5 TB/s of HBF reads (126 W in the NAND layers), 25 M stores/s and 2 M
    atomics/s (their program energy: ~27 W) publishes live activity every millisecond and never synchronizes: the
    published HBF temperature climbs while the kernel runs, every layer of the stack heats, and the binned energy
    is the profile's per-op energy of the published counts (reads: e_byte x bytes + read_j; stores and atomics:
    + program_j each), so an op published under the wrong op (a store counted as a read) is seen."""
    h = start_daemon(_profile(tmp_path), workdir=tmp_path,
                     env={"HBFD_ENGINE": "fixed", "HBFD_THERMAL": "auto", "HBFD_REFRESH": "none"}, timeout_s=60.0)
    try:
        import os
        with h.client() as cl:
            rep = cl.call("Attach", workload_pid=os.getpid(), abi_version=ctl.HBF_CTL_ABI_VERSION)
        m = ctl.map_region(rep.ctl_path)
        assert m.ctl.header.off_activity == ctl.OFFSETS["activity"]
        tw = DeviceActivityTwin(m.ctl)
        temps: list[tuple[float, float]] = []

        def hbf_c() -> float:
            th = m.ctl.thermal
            return ctl.seqlock_read(th, lambda: th.hbf_max_millic) / 1000.0

        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.0:                         # before the kernel: idle
            temps.append((time.monotonic() - t0, hbf_c()))
            time.sleep(0.02)
        # the kernel: slots 5 and 6 launched, warps on 132 SMs count 1.5 TB/s of 4 KiB reads, stores and atomics;
        # the refresher publishes every ~1 ms (HBF_THERMAL_MAX_AGE_NS default)
        gpu_ns = 1_000_000_000
        tw.kernel_enter(5, gpu_ns)
        tw.kernel_enter(6, gpu_ns)
        rate = 1.5e12
        st_rate, at_rate = 2.5e7, 2e6                                # stores (64 B) and atomics (8 B) per second
        k0 = time.monotonic()
        last = k0
        last_w = k0
        sent = 0
        stores = atomics = 0
        sm = 0
        next_sample = k0
        while (now := time.monotonic()) - k0 < 3.0:
            nbytes = int(rate * (now - last)) // 4096 * 4096
            if nbytes:
                tw.count(5 + (sm & 1), sm, ctl.HBF_OP_LOAD, nbytes // 4096, nbytes)
                sent += nbytes
                last += nbytes / rate
                sm = (sm + 1) % 132
            ns, na = int(st_rate * (now - last_w)), int(at_rate * (now - last_w))
            if ns and na:
                tw.count(6, sm, ctl.HBF_OP_STORE, ns, 64 * ns)
                tw.count(5, sm, ctl.HBF_OP_ATOMIC, na, 8 * na)
                stores, atomics = stores + ns, atomics + na
                last_w = now
            gpu_ns += 1_000_000
            tw.flush(gpu_ns)
            if now >= next_sample:
                temps.append((now - t0, hbf_c()))
                next_sample = now + 0.02
            time.sleep(0.001)
        k1 = time.monotonic()
        for _ in range(3):                                         # the kernel's last counters published
            gpu_ns += ctl.HBF_ACT_PERIOD_NS
            tw.flush(gpu_ns)
        time.sleep(0.3)
        with h.client() as cl:
            summary = json.loads(cl.call("GetSummary").summary_json)
        # a publisher that stops inside the seqlock (its context killed mid-write): hbfd keeps the last
        # consistent totals, says so, and the run goes on
        m.ctl.activity.seq += 1
        time.sleep(0.1)
        with h.client() as cl:
            torn = json.loads(cl.call("GetSummary").summary_json)["services"]["thermal"]["live_activity"]
        assert torn["torn_reads"] >= 1 and torn["bytes"]["load"] == sent
        assert h.stop() == 0
    finally:
        h.kill()
    T = np.array(temps)
    kstart, kend = k0 - t0, k1 - t0
    before = T[T[:, 0] < kstart][:, 1]
    early = T[(T[:, 0] > kstart + 0.2) & (T[:, 0] < kstart + 0.5)][:, 1]
    late = T[(T[:, 0] > kend - 0.3) & (T[:, 0] < kend)][:, 1]
    # nothing was synchronized: the device counters section never moved
    assert int(m.device_counters["bytes"].sum()) == 0
    assert sent > 3e12
    # idle before: the HBF layers drift slowly (10 W die + 5 W HBF idle from ambient, ~1 K in that second);
    # during the kernel they climb (~153 W into the layers: measured 37.7 -> 77.8 C mean in its first 0.2-0.5 s;
    # layer 0 37.4 -> 85.1 C and layer 7 36.0 -> 63.8 C one second in, the stack then crossing LTT/STT)
    assert before.max() - before.min() < 2.0, before
    assert early.mean() > before.max() + 5.0, (before.max(), early.mean())
    assert late.mean() > early.mean() + 5.0, (early.mean(), late.mean())
    th = summary["services"]["thermal"]
    la = th["live_activity"]
    assert la["bytes"]["load"] == sent
    assert (la["requests"]["store"], la["bytes"]["store"]) == (stores, 64 * stores)
    assert (la["requests"]["atomic"], la["bytes"]["atomic"]) == (atomics, 8 * atomics)
    e_byte, program_j, read_j = 8.4e-11, 1e-6, 0.0                 # ocp-sg1's energy section
    want = (e_byte * (sent + 64 * stores + 8 * atomics) + read_j * (sent // 4096 + atomics)
            + program_j * (stores + atomics))
    assert program_j * (stores + atomics) > 0.15 * want              # the per-op split is a visible part
    dyn = th["media_energy_j"] - 5.0 * (summary["daemon"]["uptime_ns"] / 1e9)
    assert dyn == pytest.approx(want, rel=0.05), (dyn, want)
    # every layer of the stack heats during the kernel (the event energy goes evenly over the NAND layers):
    # the thermal service's own samples (every second of its clock) before the kernel and at its end
    layers = [f"hbf_l{i}" for i in range(8)]
    first, hottest = th["samples"][0]["temps_c"], th["samples"][-1]["temps_c"]
    assert th["samples"][-1]["t_ns"] >= 3_000_000_000
    # (10 K: idle drift is ~1 K; the sample's place in the kernel depends on this host's load -- 19.9 K was seen
    # for layer 0 on a loaded 2-core box where an unloaded run gives ~40 K)
    for lay in layers:
        assert hottest[lay] > first[lay] + 10.0, (lay, first[lay], hottest[lay])
