"""The device access loop of runtime_cuda/src/hbf_capacity.cuh (__hb_cap_access: pin through the page table, miss,
retry after the completion, PENDING backoff, the prefetch marker's hint, the wait for a frame still in flight),
compiled as host C++ for one lane (HBF_CAP_HOST_LOOP: the harness supplies the warp intrinsics and hb_now) and
run against a REAL hbfd: the range's capacity region mapped by the harness, its misses and hints posted on hbfd's
request ring (hbfd.capacity.device.RingHost), exactly the words and requests the GPU's loop uses. The bytes it
reads are the store's; its stores survive eviction and write-back; every pin is given back."""
from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from hbfcommon import ctl
from hbfcommon.capacity import HBF_CAP_PAGE_BYTES as PAGE
from hbfd.capacity.backing import GeneratedStore
from hbfd.capacity.device import RingHost
from hbfd.hostring import RingDriver
from hbfd.runner import start_daemon

from region_c import OPEN_REGION  # tests/capacity/region_c.py (pytest puts this folder on the path)

ROOT = Path(__file__).resolve().parents[2]
HARNESS = r"""
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <ctime>
#define __device__
#define __noinline__ __attribute__((noinline))
static inline uint64_t hb_now() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000ull + t.tv_nsec; }
static inline uint32_t hb_laneid() { return 0u; }
static inline uint32_t __activemask() { return 1u; }
static inline uint32_t __ballot_sync(uint32_t, int p) { return p ? 1u : 0u; }
static inline uint32_t __match_any_sync(uint32_t, uint64_t) { return 1u; }
static inline uint32_t __shfl_sync(uint32_t, uint32_t v, uint32_t) { return v; }
static inline int __ffs(uint32_t x) { return __builtin_ffs(x); }
static inline void __nanosleep(uint32_t ns) { timespec t{0, (long)ns}; nanosleep(&t, nullptr); }
extern "C" unsigned int __hb_cap_miss(unsigned long long addr, unsigned long long media, unsigned int op,
                                      unsigned int range_id, unsigned int site) {
    printf("M %llu %u %llu\n", addr, op, (unsigned long long)hb_now()); fflush(stdout);
    unsigned int st = 0; if (scanf("%u", &st) != 1) exit(3);
    return st;
}
extern "C" void __hb_cap_hint(unsigned long long addr, unsigned long long, unsigned int, unsigned int) {
    printf("H %llu %llu\n", addr, (unsigned long long)hb_now()); fflush(stdout);
}
#define HBF_CAP_HOST_LOOP 1
#include "hbf_capacity.cuh"
""" + OPEN_REGION + r"""
int main(int argc, char** argv) {
    hbf_cap_range r = open_region(argv);
    char cmd[8]; unsigned long long off, val; unsigned int op;
    while (scanf("%7s %llu %u %llu", cmd, &off, &op, &val) == 4) {
        unsigned int frame = 0, status = 0, waited = 0;
        unsigned long long x = __hb_cap_access(&r, r.base + off, op, 7u, &frame, &status, &waited);
        if (!x) { printf("R 0 %u %u 0\n", status, waited); fflush(stdout); continue; }
        uint64_t* p = (uint64_t*)x;
        if (op == 1u) *p = val;
        const unsigned long long got = *p;
        hb_cap_unpin(&r, frame);
        printf("R %llu %u %u %llu\n", (unsigned long long)(x - r.frame_data), status, waited, got); fflush(stdout);
    }
    return 0;
}
"""
BASE = 0x7A00_0000_0000


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed")
    d = tmp_path_factory.mktemp("loop")
    (d / "h.cpp").write_text(HARNESS)
    inc = [f"-I{ROOT / 'runtime_cuda' / 'include'}", f"-I{ROOT / 'runtime_cuda' / 'src'}"]
    subprocess.run(["g++", "-O2", "-std=c++17", *inc, str(d / "h.cpp"), "-o", str(d / "h")], check=True,
                   capture_output=True, text=True)
    return d / "h"


class Lane:
    """The compiled loop as one GPU lane: its misses and hints go through ``host`` (hbfd's ring)."""

    def __init__(self, exe: Path, host: RingHost, region_path: str, base: int = BASE) -> None:
        self.host, self.base = host, base
        self.p = subprocess.Popen([str(exe), region_path, hex(base)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
        self.t0 = time.monotonic_ns()
        self.misses = self.hints = 0

    def access(self, off: int, op: int = ctl.HBF_OP_LOAD, val: int = 0) -> tuple[int, int, int, int]:
        self.p.stdin.write(f"a {off} {op} {val}\n")
        self.p.stdin.flush()
        while True:
            ln = self.p.stdout.readline().split()
            if ln[0] == "M":
                self.misses += 1
                page = (int(ln[1]) - self.base) // PAGE
                st = self.host.miss(self.host.range_id, page, int(ln[2]), int(ln[3])).status
                self.p.stdin.write(f"{st}\n")
                self.p.stdin.flush()
            elif ln[0] == "H":
                self.hints += 1
                self.host.hint(self.host.range_id, (int(ln[1]) - self.base) // PAGE, int(ln[2]))
            else:
                return tuple(int(x) for x in ln[1:])

    def close(self) -> None:
        self.p.stdin.close()
        self.p.wait(5)


def test_the_compiled_access_loop_against_hbfds_ring(harness, tmp_path):
    with start_daemon("nominal", workdir=tmp_path, pythonpath=[ROOT], timeout_s=60.0,
                      env={"HBFD_ENGINE": "fixed", "HBFD_THERMAL": "none", "HBFD_REFRESH": "none"}) as h:
        with h.client() as c:
            att = c.call("Attach", workload_pid=0, abi_version=ctl.HBF_CTL_ABI_VERSION)
        m = ctl.map_region(att.ctl_path)
        try:
            drv = RingDriver(m, att.ring_key)
            with h.client() as c:
                r = c.call("RegisterRange", range=c.pb.Range(base=BASE, length=96 * PAGE, mode=ctl.HBF_MODE_CAPACITY,
                                                             perms=ctl.HBF_PERM_READ),
                           capacity=c.pb.CapacitySpec(n_frames=32, store="generated", seed=3, policy="next:4"))
                w = c.call("RegisterRange", range=c.pb.Range(base=BASE + (1 << 30), length=64 * PAGE,
                                                             mode=ctl.HBF_MODE_CAPACITY,
                                                             perms=ctl.HBF_PERM_READ | ctl.HBF_PERM_WRITE),
                           capacity=c.pb.CapacitySpec(n_frames=32, store="sparse", path=str(tmp_path / "w.bin"),
                                                      policy="none"))
            host = RingHost(drv, r.capacity_path, BASE)
            lane = Lane(harness, host, r.capacity_path)
            ref = GeneratedStore(3, 96)
            for page in list(range(96)) + list(range(0, 96, 5)):     # a stream through 32 frames, then revisits
                off = page * PAGE + (page * 8) % PAGE
                x, status, waited, got = lane.access(off)
                assert status == ctl.HBF_ST_READY
                want = int(ref.read_pages(page, 1)[0][(page * 8) % PAGE:(page * 8) % PAGE + 8].view("<u8")[0])
                assert got == want, page
                assert x % PAGE == (page * 8) % PAGE
            assert lane.misses >= 20 and lane.hints >= 1                  # prefetch marker hints went out
            assert (host.pool.frames["pins"] == 0).all()                  # every pin given back
            lane.close()
            # stores through the loop into a read-write range: dirty frames, evicted, written back exactly
            wbase = BASE + (1 << 30)
            whost = RingHost(drv, w.capacity_path, wbase)
            wl = Lane(harness, whost, w.capacity_path, wbase)
            want = np.zeros((64, PAGE // 8), np.uint64)
            for k in range(200):
                page, word = (k * 7) % 64, (k * 13) % (PAGE // 8)
                val = (k * 0x9E3779B97F4A7C15 + 1) & ((1 << 64) - 1)
                _x, status, _w, got = wl.access(page * PAGE + word * 8, ctl.HBF_OP_STORE, val)
                assert status == ctl.HBF_ST_READY and got == val
                want[page, word] = val
            assert (whost.pool.frames["pins"] == 0).all()
            wl.close()
            with h.client() as c:
                c.call("UnregisterRange", range_id=w.range.range_id)  # every dirty frame written back
            got = np.fromfile(tmp_path / "w.bin", np.uint64).reshape(64, PAGE // 8)
            assert np.array_equal(got, want)
        finally:
            m.close()
        h.stop()
    cap = h.read_summary()["capacity"]
    assert all(x["status"] == "READY" for x in cap["ranges"])
