"""The device hit path of runtime_cuda/src/hbf_capacity.cuh (hb_cap_pin / hb_cap_unpin), compiled as plain C++
(its host build: the same code, the host-shared words through __atomic builtins) and driven against hbfd's frame
pool in a shared capacity region (hbfcommon.capacity.CapRegion, the layout of hbf_capacity.h). Every step is
compared with the CPU stand-in's device side (hbfd.capacity.frames.FramePool.device_pin / device_unpin) run on a
copy of the same words: the same outcome, frame, address, ready time, and the same words afterwards."""
from __future__ import annotations

import mmap
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from hbfcommon import ctl
from hbfcommon.capacity import HBF_CAP_PAGE_BYTES as PAGE, CapRegion, region_layout
from hbfd.capacity.backing import GeneratedStore
from hbfd.capacity.frames import FrameMemory, FramePool
from hbfd.capacity.prefetch import NextPages
from hbfd.capacity.service import CapacityService
from hbfd.media import MediaGeometry
from hbfcommon.profile import load_profile

from region_c import OPEN_REGION  # tests/capacity/region_c.py (pytest puts this folder on the path)

ROOT = Path(__file__).resolve().parents[2]
DRIVER = r"""
#include <cstdio>
#include <cstdlib>
#include "hbf_capacity.cuh"
""" + OPEN_REGION + r"""
int main(int argc, char** argv) {
    hbf_cap_range r = open_region(argv);
    char cmd[16]; unsigned long long a; int st;
    while (scanf("%15s %llu %d", cmd, &a, &st) == 3) {
        if (cmd[0] == 'p') {
            uint64_t x = 0, ready = 0; uint32_t f = 0;
            uint32_t res = hb_cap_pin(&r, r.base + a, st != 0, &x, &f, &ready);
            if (res == HB_CAP_MISS) printf("0 0 0 0\n");
            else printf("%u %u %llu %llu\n", res, f, (unsigned long long)(x - r.frame_data),
                        (unsigned long long)ready);
        } else {
            hb_cap_unpin(&r, (uint32_t)a);
            printf("ok\n");
        }
        fflush(stdout);
    }
    return 0;
}
"""
BASE = 0x7000_0000_0000
PAGES, FRAMES = 96, 32


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed")
    d = tmp_path_factory.mktemp("pinhost")
    (d / "drv.cpp").write_text(DRIVER)
    inc = [f"-I{ROOT / 'runtime_cuda' / 'include'}", f"-I{ROOT / 'runtime_cuda' / 'src'}"]
    subprocess.run(["g++", "-O2", "-std=c++17", "-x", "c++", *inc, str(d / "drv.cpp"), "-o", str(d / "drv")],
                   check=True, capture_output=True, text=True)
    return d / "drv"


class Pair:
    """The region (driven by the C++ hit path and by hbfd's service) and a Python twin of its words."""

    def __init__(self, path: Path, drv: Path) -> None:
        size = region_layout(PAGES, FRAMES)["total_bytes"]
        path.write_bytes(b"\0" * size)
        self.f = open(path, "r+b")
        self.reg = CapRegion.init(mmap.mmap(self.f.fileno(), size), range_id=5, pages=PAGES, n_frames=FRAMES,
                                  perms=ctl.HBF_PERM_READ, media_offset=0)
        self.svc = CapacityService(MediaGeometry.from_profile(load_profile("nominal")), FRAMES, NextPages(4),
                                   frame_memory=FrameMemory(FRAMES, self.reg.data), frames=self.reg.frames)
        self.svc.add_range(5, PAGES, 0, ctl.HBF_PERM_READ, GeneratedStore(3, PAGES), table=self.reg.table)
        self.p = subprocess.Popen([str(drv), str(path), hex(BASE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)

    def twin(self) -> FramePool:
        t = FramePool(FRAMES, frames=self.reg.frames.copy())
        t.add_range(5, PAGES, self.reg.table.copy())
        return t

    def ask(self, line: str) -> str:
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().split()

    def pin(self, page: int, offset: int = 0, store: bool = False):
        t = self.twin()
        want = t.device_pin(5, page, store=store)
        got = [int(x) for x in self.ask(f"p {page * PAGE + offset} {int(store)}")]
        if want is None:
            assert got == [0, 0, 0, 0], (page, got)
        else:
            f, ready, took = want
            assert got == [2 if took else 1, f, f * PAGE + offset, ready], (page, got, want)
        assert self.reg.frames.tobytes() == t.frames.tobytes()          # the same words afterwards
        assert self.reg.table.tobytes() == t.tables[5].dense().tobytes()
        return None if want is None else want[0]

    def unpin(self, frame: int) -> None:
        t = self.twin()
        t.device_unpin(frame)
        assert self.ask(f"u {frame} 0") == ["ok"]
        assert self.reg.frames.tobytes() == t.frames.tobytes()

    def close(self) -> None:
        self.p.stdin.close()
        self.p.wait(5)
        self.f.close()


def test_the_compiled_hit_path_matches_the_cpu_stand_in(driver, tmp_path):
    pr = Pair(tmp_path / "region", driver)
    try:
        svc = pr.svc
        assert pr.pin(10) is None                                   # unmapped: a miss, nothing pinned
        assert svc.miss(5, 10, ctl.HBF_OP_LOAD, 1000).status == 1   # demand fill + NextPages(4): 11..14 marked
        f = pr.pin(10, 24)                                          # a hit: referenced, the frame's byte
        pr.unpin(f)
        g = pr.pin(11, 8)                                           # a prefetched frame: the marker is taken
        h = pr.pin(11, 16)                                          # ... once
        pr.unpin(g)
        pr.unpin(h)
        k = pr.pin(12, 0, store=True)                               # a store hit sets dirty
        assert pr.reg.frames[k]["dirty"] == 1
        assert svc.pool.begin_eviction_of(k) is None                # pinned by the compiled path: never evicted
        assert pr.reg.frames[k]["state"] in (2, 3)
        pr.unpin(k)
        ev = svc.pool.begin_eviction_of(k)                          # unpinned: evictable; pte cleared, generation+1
        assert ev is not None and ev.dirty
        assert pr.pin(12) is None                                   # a miss now
        # a stale pte (mapping removed after the device read it): generation differs -> miss, pin given back
        f13 = svc.pool.lookup(5, 13)
        pr.reg.frames[f13]["generation"] += 1
        assert pr.pin(13) is None and pr.reg.frames[f13]["pins"] == 0
        pr.reg.frames[f13]["generation"] -= 1
        pr.reg.frames[f13]["state"] = 4                             # EVICTING -> miss
        assert pr.pin(13) is None
        pr.reg.frames[f13]["state"] = 2
        assert pr.pin(13) == f13
        pr.unpin(f13)
        # the bytes the compiled path addresses are the page's
        f14 = pr.pin(14)
        np.testing.assert_array_equal(pr.reg.data[f14], GeneratedStore(3, PAGES).read_pages(14, 1)[0])
        pr.unpin(f14)
        assert pr.pin(PAGES) is None                                # past the table: a miss, no read past it
    finally:
        pr.close()
