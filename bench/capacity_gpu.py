"""Issue 16: capacity mode's proofs on the H200. First run on a GPU (an H100) in stop 41 (docs/RESULTS.md "Stop 41":
paper110 128/128, generated 4 GiB equal; the 16 GiB and rw 8 GiB runs found two host bugs, fixed since);
``--dry-run`` (CPU) checks the arguments and builds the kernels through hbfcc with the capacity pass.

    PYTHONPATH=$PWD HBF_CAPACITY_DEVICE=1 .venv/bin/python bench/capacity_gpu.py [--parts ...] [--dry-run]

Parts (each with its own hbfd, profile ocp-sg1, and its own runtime session; every part's result is written to
the JSON as soon as it ends, long parts also per chunk, so a run that dies keeps what it measured):

* ``paper110``: HBFSim §6.2 -- a 110 GiB capacity range (a sparse file) through 2 GiB of frames: the first and
  last 64 pages written by a kernel (a pattern of their word index and a seed), a sweep through the middle evicts
  them (exact write-backs), a kernel reads the 128 pages back: per-page checksums against the same kernels run
  on a native 110 GiB device buffer (``--native gpu``; ``cpu``: the pattern's checksum computed on the CPU).
* ``generated``: >= 200 GiB of generated read-only data (a GeneratedStore: content = f(seed, page)) streamed by a
  checksum kernel through <= 8 GiB of frames, chunk by chunk (one launch per ``--chunk-gib``); every chunk's
  checksum against GeneratedStore.span_checksum (CPU, from the seed alone; computed while the GPU streams the
  chunk itself). ``--gen-kernel pages`` (the default): one warp per page (``cap_sum_pages``: a lane reads words
  lane, lane + 32, ..., so a page costs one miss request, and every resident warp has its own page in flight:
  hbfd serves wide scans); ``words``: one word per thread (``cap_sum``: 16 warps per page, 16 requests
  coalesced by hbfd). ``--gen-policy`` (default next:64) is the range's prefetch policy; hbfd fills on
  ``--cap-workers`` threads (``$HBFD_CAPACITY_WORKERS``; 0: hbfd's default, the host's cores).
* ``rw``: 32 GiB read-write (a sparse file) through 4 GiB of frames: ``--rw-passes`` read-modify-write passes of
  a kernel over strided words of the whole range (every pass evicts every frame), then UnregisterRange (every
  dirty frame written back) and the file's checksum against the same kernel's result on a native buffer.
  ``--rw-kernel pages`` (the default): one warp per page (``cap_rmw_pages``: a page costs one miss request, as
  ``cap_sum_pages``); ``words``: one thread per RMW'd word (``cap_rmw``: at stride 64 8 lanes per page, a warp
  spans 4 pages and each lane posts its own miss: ~16 k pages/s on the H100 of stop 43).
* ``stress``: many warps fault the same and neighbouring pages: every warp of a large grid adds 1 (atomics) to
  word (lane) of pages ``warp % hot`` and ``warp % hot + 1`` of a fresh read-write range through 32 frames (the
  minimum), then the counts are read back through the capacity path and compared with the exact expectation.
* ``moe``: the paper's synthetic MoE stream (hbfd/capacity/streams.moe_stream, 8 pages per expert, 256 frames),
  walked by one warp with ``--moe-gap-ns`` of compute per access, with the default policy (next:8) and the MoE
  policy (moe:8,16,4): the service's counters and the device's (no wait / demand waits / late prefetch waits).

Every run also records the four times (modeled, service, wall, overhead) and the miss-service throughput from
hbfd's summary (capacity section) and the device counters (Session.capacity_counters).
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hbfcc.toolchain import cli_wrapper  # noqa: E402
from hbfcommon.capacity import HBF_CAP_PAGE_BYTES as PAGE, region_layout  # noqa: E402
from hbfcommon.errors import ConfigError  # noqa: E402
from hbfcommon.fsutil import atomic_write_json  # noqa: E402
from hbfcommon.profile import load_profile  # noqa: E402

GIB = 1 << 30
PARTS = ("paper110", "generated", "rw", "stress", "moe")
KERNELS = ("cap_fill", "cap_sum", "cap_sum_pages", "cap_page_sums", "cap_rmw", "cap_rmw_pages", "cap_stress",
           "cap_stream")
SOURCE = r"""
#include <stdint.h>
#define GOLDEN 0x9E3779B97F4A7C15ull
__device__ __forceinline__ uint64_t mix(uint64_t z) {           // hbfcommon.capacity.splitmix64
    z += GOLDEN; z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull; z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
// word w of the range (from its page-aligned base) contributes mix((w * GOLDEN) ^ word): span_checksum's sum
extern "C" __global__ void cap_sum(const uint64_t* p, uint64_t w0, uint64_t nwords, unsigned long long* out) {
    uint64_t acc = 0;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < nwords; i += (uint64_t)gridDim.x * blockDim.x)
        acc += mix(((w0 + i) * GOLDEN) ^ p[w0 + i]);
    atomicAdd(out, (unsigned long long)acc);
}
// the same sum, one warp per page: lane l reads words l, l + 32, ..., l + 480 of its page (one miss per page)
extern "C" __global__ void cap_sum_pages(const uint64_t* p, uint64_t page0, uint64_t npages, unsigned long long* out) {
    const uint64_t lane = threadIdx.x & 31;
    const uint64_t nwarps = ((uint64_t)gridDim.x * blockDim.x) >> 5;
    uint64_t acc = 0;
    for (uint64_t k = (blockIdx.x * (uint64_t)blockDim.x + threadIdx.x) >> 5; k < npages; k += nwarps) {
        const uint64_t w0 = (page0 + k) * 512 + lane;
        for (int i = 0; i < 16; ++i) {
            const uint64_t w = w0 + 32 * i;
            acc += mix((w * GOLDEN) ^ p[w]);
        }
    }
    atomicAdd(out, (unsigned long long)acc);
}
extern "C" __global__ void cap_page_sums(const uint64_t* p, const uint64_t* pages, int n, unsigned long long* out) {
    for (int k = blockIdx.x; k < n; k += gridDim.x) {
        uint64_t acc = 0;
        for (int i = threadIdx.x; i < 512; i += blockDim.x) {
            const uint64_t w = pages[k] * 512 + i;
            acc += mix((w * GOLDEN) ^ p[w]);
        }
        atomicAdd(&out[k], (unsigned long long)acc);
    }
}
extern "C" __global__ void cap_fill(uint64_t* p, const uint64_t* pages, int n, uint64_t seed) {
    for (int k = blockIdx.x; k < n; k += gridDim.x)
        for (int i = threadIdx.x; i < 512; i += blockDim.x) {
            const uint64_t w = pages[k] * 512 + i;
            p[w] = mix(w ^ seed);
        }
}
extern "C" __global__ void cap_rmw(uint64_t* p, uint64_t nwords, uint64_t stride, uint64_t seed) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i * stride < nwords; i += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t w = i * stride;
        p[w] = p[w] * 6364136223846793005ull + (w ^ seed);
    }
}
// cap_rmw's update, one warp per page: warp k takes page k (grid-stride) and its lanes the page's words that are
// multiples of stride (lane l: the (l + 32 j)-th of them), so a page costs one miss request and each word is
// updated once per pass by the same arithmetic: the same final bytes as cap_rmw
extern "C" __global__ void cap_rmw_pages(uint64_t* p, uint64_t nwords, uint64_t stride, uint64_t seed) {
    const uint64_t lane = threadIdx.x & 31;
    const uint64_t nwarps = ((uint64_t)gridDim.x * blockDim.x) >> 5;
    const uint64_t npages = (nwords + 511) / 512;
    for (uint64_t k = (blockIdx.x * (uint64_t)blockDim.x + threadIdx.x) >> 5; k < npages; k += nwarps) {
        const uint64_t end = (k + 1) * 512 < nwords ? (k + 1) * 512 : nwords;
        const uint64_t first = (k * 512 + stride - 1) / stride * stride;
        for (uint64_t w = first + lane * stride; w < end; w += 32 * stride)
            p[w] = p[w] * 6364136223846793005ull + (w ^ seed);
    }
}
extern "C" __global__ void cap_stress(unsigned int* p, unsigned int hot, unsigned int iters) {
    const unsigned int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    for (unsigned int k = 0; k < iters; ++k) {
        const unsigned int pg = (warp + k) % hot;
        atomicAdd(&p[pg * 1024 + lane], 1u);
        atomicAdd(&p[(pg + 1) * 1024 + lane], 1u);
    }
}
extern "C" __global__ void cap_stream(const uint64_t* p, const uint64_t* pages, int n, uint64_t gap_ns,
                                      unsigned long long* out) {
    uint64_t acc = 0;
    for (int k = 0; k < n; ++k) {
        uint64_t t0; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        uint64_t t = t0;
        while (t - t0 < gap_ns) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        acc += p[pages[k] * 512 + threadIdx.x * 16];
    }
    atomicAdd(out, (unsigned long long)acc);
}
"""


def check_args(a) -> list[str]:
    """Refuse an impossible plan before anything starts (ConfigError naming the argument). Returns warnings
    (a plan that runs but does not meet the issue's proof sizes)."""
    parts = [p for p in a.parts.split(",") if p]
    bad = [p for p in parts if p not in PARTS]
    if bad or not parts:
        raise ConfigError(f"--parts: unknown part {bad[0] if bad else '(none)'} (known: {', '.join(PARTS)})",
                          field="parts", value=a.parts)
    cap = load_profile(a.profile).capacity_bytes
    warn = []
    for name, gib, fgib in (("paper", a.paper_gib, a.paper_frames_gib), ("gen", a.gen_gib, a.gen_frames_gib),
                            ("rw", a.rw_gib, a.rw_frames_gib)):
        if gib <= 0 or fgib <= 0:
            raise ConfigError(f"--{name}-gib and --{name}-frames-gib must be > 0", field=name, value=(gib, fgib))
        if gib * GIB > cap:
            raise ConfigError(f"--{name}-gib {gib} exceeds the profile's capacity ({cap / GIB:.0f} GiB)",
                              field=f"{name}_gib", value=gib, capacity_bytes=cap)
        frames = int(fgib * GIB) // PAGE
        if frames < 32:
            raise ConfigError(f"--{name}-frames-gib gives {frames} frames; a pool needs >= 32 (one warp's pages)",
                              field=f"{name}_frames_gib", value=fgib)
        region = region_layout(int(gib * GIB) // PAGE, frames)["total_bytes"]
        if region > a.max_host_gib * GIB:
            raise ConfigError(f"the {name} range's capacity region (frames + page table) is {region / GIB:.1f} GiB "
                              f"of host memory, over --max-host-gib {a.max_host_gib}", field="max_host_gib",
                              value=a.max_host_gib)
    if a.gen_gib < 200 or a.gen_frames_gib > 8:
        warn.append(f"generated: {a.gen_gib} GiB through {a.gen_frames_gib} GiB of frames is not the issue's proof "
                    "(>= 200 GiB through <= 8 GiB)")
    if a.rw_gib < 32 or a.rw_frames_gib > 4:
        warn.append("rw: not the issue's size (32 GiB through 4 GiB)")
    if a.chunk_gib <= 0 or a.rw_passes < 1 or a.moe_gap_ns < 0 or a.stress_warps < 32:
        raise ConfigError("--chunk-gib > 0, --rw-passes >= 1, --moe-gap-ns >= 0, --stress-warps >= 32",
                          field="args")
    from hbfd.capacity.dispatch import parse_policy
    parse_policy(a.gen_policy)                    # ConfigError naming the policy
    if a.gen_kernel not in ("pages", "words") or not 0 <= a.cap_workers <= 64 or a.gen_blocks < 1:
        raise ConfigError("--gen-kernel pages|words, --cap-workers in [0, 64], --gen-blocks >= 1", field="gen")
    if a.rw_kernel not in ("pages", "words") or a.rw_blocks < 1 or a.rw_stride < 1:
        raise ConfigError(f"need --rw-kernel pages|words, --rw-blocks >= 1, --rw-stride >= 1 (rw-kernel "
                          f"{a.rw_kernel!r}, rw-blocks {a.rw_blocks}, rw-stride {a.rw_stride})", field="rw")
    return warn


def build(work: Path) -> dict:
    """nvcc -cubin through hbfcc (as nvcc) with HBFCC_PASSES=timing,capacity; the artifact must capacity-admit
    every kernel."""
    from hbfcommon.capacity import capacity_admitted
    d = work / "build"
    d.mkdir(parents=True, exist_ok=True)
    (d / "cap.cu").write_text(SOURCE)
    wrap = cli_wrapper(d / "hbfcc")
    # the repository first, then the caller's path (a machine without the package installed carries its wheels
    # there: the H200 run of 2026-12-05 lost pyelftools when this replaced PYTHONPATH)
    env = dict(os.environ, HBFCC_PASSES="timing,capacity",
               PYTHONPATH=os.pathsep.join([str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    out = {}
    for tag, exe, e in (("plain", "nvcc", os.environ), ("cap", str(wrap), env)):
        cub = d / f"cap_{tag}.cubin"
        r = subprocess.run([exe, "-arch=sm_90a", "-O3", "-cubin", str(d / "cap.cu"), "-o", str(cub)], cwd=d,
                           env=dict(e), capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            raise SystemExit(f"{tag} build failed (rc {r.returncode}): {(r.stderr or r.stdout)[-3000:]}")
        out[tag] = str(cub)
    art = Path(out["cap"] + ".hbfcc.json")
    doc = json.loads(art.read_text())
    ok = capacity_admitted(doc)
    out["artifact"] = str(art)
    out["capacity_admitted"] = {k: ok.get(k, False) for k in KERNELS}
    if not all(out["capacity_admitted"].values()):
        raise SystemExit(f"hbfcc did not capacity-admit every kernel: {out['capacity_admitted']}")
    return out


class Gpu:
    """One hbfd + one runtime session + both modules bound (capacity-rewritten and plain)."""

    def __init__(self, work: Path, built: dict, profile: str, cap_workers: int = 0) -> None:
        import runtime_cuda
        from hbfd.runner import start_daemon
        from runtime_cuda import cudrv
        self.cu = cudrv
        env = {"HBFD_THERMAL": "none"} | ({"HBFD_CAPACITY_WORKERS": str(cap_workers)} if cap_workers else {})
        self.d = start_daemon(profile, workdir=work, pythonpath=[ROOT], env=env,
                              timeout_s=120.0)
        self.s = runtime_cuda.attach(socket=str(self.d.socket), cuda=True)
        art = json.loads(Path(built["artifact"]).read_text())
        mod = art["modules"][0] if "modules" in art else art
        self.mh = cudrv.module_load_data(Path(built["cap"]).read_bytes())
        self.b = self.s.bind_module(self.mh, artifact=mod)
        self.mp = cudrv.module_load_data(Path(built["plain"]).read_bytes())
        self.fh = {n: cudrv.module_function(self.mh, n) for n in KERNELS}
        self.fp = {n: cudrv.module_function(self.mp, n) for n in KERNELS}
        for n, f in self.fh.items():
            self.s.note_function(f, self.b, n)

    def run(self, name: str, grid, block, args, *, native: bool = False) -> float:
        t = time.perf_counter()
        if native:
            self.cu.launch(self.fp[name], grid, block, args)
            self.cu.ctx_synchronize()
        else:
            self.s.launch(self.fh[name], grid, block, args)
            self.s.synchronize()
        return time.perf_counter() - t

    def dev_u64(self, values) -> int:
        arr = (ctypes.c_uint64 * len(values))(*values)
        p = self.cu.mem_alloc(ctypes.sizeof(arr))
        self.cu.htod(p, arr, ctypes.sizeof(arr))
        return p

    def zeros(self, n: int) -> int:
        p = self.cu.mem_alloc(8 * n)
        self.cu.memset_d8(p, 0, 8 * n)
        return p

    def read_u64(self, p: int, n: int) -> list[int]:
        arr = (ctypes.c_uint64 * n)()
        self.cu.dtoh(arr, p, ctypes.sizeof(arr))
        return [int(x) for x in arr]

    def close(self) -> dict:
        counters = self.s.capacity_counters()
        self.s.close()
        self.d.stop()
        summ = self.d.read_summary()
        return {"device_counters": counters, "capacity": summ.get("capacity")}


U64 = ctypes.c_uint64


def part_paper110(g: "Gpu", a, tmp: Path, put) -> dict:
    pages = (a.paper_gib * GIB) // PAGE
    cr = g.s.register_capacity_range(None, pages * PAGE, perms=3, n_frames=int(a.paper_frames_gib * GIB) // PAGE,
                                     store="sparse", path=str(tmp / "paper110.bin"), policy="none")
    sel = list(range(64)) + list(range(pages - 64, pages))
    pp = g.dev_u64(sel)
    g.run("cap_fill", (128,), (256,), [U64(cr.base), U64(pp), ctypes.c_int32(len(sel)), U64(a.seed)])
    mid = pages // 2
    acc = g.zeros(1)
    sweep = (int(a.paper_frames_gib * GIB) // PAGE) * 2          # twice the frames: every frame evicted
    g.run("cap_sum", (1024,), (256,), [U64(cr.base), U64(mid * 512), U64(sweep * 512), U64(acc)])
    out = g.zeros(len(sel))
    g.run("cap_page_sums", (128,), (256,), [U64(cr.base), U64(pp), ctypes.c_int32(len(sel)), U64(out)])
    cap_sums = g.read_u64(out, len(sel))
    if a.native == "gpu":
        nat = g.cu.mem_alloc(pages * PAGE)
        g.cu.memset_d8(nat, 0, pages * PAGE)
        g.run("cap_fill", (128,), (256,), [U64(nat), U64(pp), ctypes.c_int32(len(sel)), U64(a.seed)], native=True)
        o2 = g.zeros(len(sel))
        g.run("cap_page_sums", (128,), (256,), [U64(nat), U64(pp), ctypes.c_int32(len(sel)), U64(o2)], native=True)
        native = g.read_u64(o2, len(sel))
        g.cu.mem_free(nat)
    else:
        import numpy as np
        from hbfcommon.capacity import page_checksums, splitmix64
        native = []
        for p in sel:
            w = np.arange(p * 512, p * 512 + 512, dtype=np.uint64)
            data = splitmix64(w ^ np.uint64(a.seed)).view(np.uint8).reshape(1, PAGE)
            native.append(int(page_checksums(np.array([p], np.uint64), data)[0]))
    equal = sum(int(x == y) for x, y in zip(cap_sums, native))
    return put({"logical_bytes": pages * PAGE, "frames_bytes": int(a.paper_frames_gib * GIB), "checksums": len(sel),
                "checksums_equal": equal, "native": a.native})


def part_generated(g: "Gpu", a, tmp: Path, put) -> dict:
    from concurrent.futures import ThreadPoolExecutor
    from hbfd.capacity import kernels
    from hbfd.capacity.backing import GeneratedStore
    pages = (a.gen_gib * GIB) // PAGE
    cr = g.s.register_capacity_range(None, pages * PAGE, perms=1, n_frames=int(a.gen_frames_gib * GIB) // PAGE,
                                     store="generated", seed=a.seed, policy=a.gen_policy)
    ref = GeneratedStore(a.seed, pages)
    kernels.warm()             # the checksum twin loaded before the clock (HBFD_ACCEL; numpy without numba)
    # compiled: a quarter of the cores' threads is plenty (~0.3 us a page); numpy: processes (its threads barely
    # scale), half the cores, beside hbfd's fills
    cores = os.cpu_count() or 2
    ref_par = {"threads": max(1, cores // 4)} if kernels.compiled() else {"jobs": max(1, cores // 2)}
    chunk = int(a.chunk_gib * GIB) // PAGE
    rows = []
    # a chunk's CPU reference (from the seed alone) is computed on threads while the GPU streams that chunk
    cpu = ThreadPoolExecutor(1, thread_name_prefix="gen-ref")
    refs = {}
    t_all = time.perf_counter()
    for first in range(0, pages, chunk):
        n = min(chunk, pages - first)
        refs[first] = cpu.submit(ref.span_checksum, first, n, **ref_par)
        acc = g.zeros(1)
        if a.gen_kernel == "pages":
            sec = g.run("cap_sum_pages", (a.gen_blocks,), (256,), [U64(cr.base), U64(first), U64(n), U64(acc)])
        else:
            sec = g.run("cap_sum", (2048,), (256,), [U64(cr.base), U64(first * 512), U64(n * 512), U64(acc)])
        got = g.read_u64(acc, 1)[0]
        t = time.perf_counter()
        want = refs.pop(first).result()
        rows.append({"first_page": first, "pages": n, "equal": got == want, "seconds": sec,
                     "GB_per_s": n * PAGE / sec / 1e9, "pages_per_s": n / sec,
                     "ref_wait_s": round(time.perf_counter() - t, 3)})
        put({"chunks": rows, "bytes_done": (first + n) * PAGE, "all_equal": all(r["equal"] for r in rows),
             "wall_s": round(time.perf_counter() - t_all, 1)})
    cpu.shutdown()
    return put({"logical_bytes": pages * PAGE, "frames_bytes": int(a.gen_frames_gib * GIB), "chunks": rows,
                "all_equal": all(r["equal"] for r in rows), "kernel": a.gen_kernel, "policy": a.gen_policy,
                "wall_s": round(time.perf_counter() - t_all, 1)})


def part_rw(g: "Gpu", a, tmp: Path, put) -> dict:
    from hbfd.capacity.backing import SparseFileStore
    import numpy as np
    from hbfcommon.capacity import page_checksums
    nbytes = a.rw_gib * GIB
    words = nbytes // 8
    path = tmp / "rw.bin"
    cr = g.s.register_capacity_range(None, nbytes, perms=3, n_frames=int(a.rw_frames_gib * GIB) // PAGE,
                                     store="sparse", path=str(path), policy="none")
    nat = g.cu.mem_alloc(nbytes)
    g.cu.memset_d8(nat, 0, nbytes)
    secs = []
    for k in range(a.rw_passes):
        args = lambda base: [U64(base), U64(words), U64(a.rw_stride), U64(a.seed + k)]   # noqa: E731
        # the same kernel on the capacity range and on the native buffer: the final bytes must be equal
        kern, grid = ("cap_rmw_pages", (a.rw_blocks,)) if a.rw_kernel == "pages" else ("cap_rmw", (4096,))
        secs.append(g.run(kern, grid, (256,), args(cr.base)))
        g.run(kern, grid, (256,), args(nat), native=True)
        put({"passes_done": k + 1, "seconds": secs})
    acc = g.zeros(1)
    g.run("cap_sum", (4096,), (256,), [U64(nat), U64(0), U64(words), U64(acc)], native=True)
    native_sum = g.read_u64(acc, 1)[0]
    g.cu.mem_free(nat)
    g.s.unregister(cr.range_id)                      # every dirty frame written back first
    st = SparseFileStore(path, nbytes // PAGE, create=False)
    total = np.uint64(0)
    for first in range(0, nbytes // PAGE, 1 << 16):
        n = min(1 << 16, nbytes // PAGE - first)
        with np.errstate(over="ignore"):
            total += page_checksums(np.arange(first, first + n, dtype=np.uint64), st.read_pages(first, n)).sum(
                dtype=np.uint64)
    st.close()
    return put({"logical_bytes": nbytes, "frames_bytes": int(a.rw_frames_gib * GIB), "passes": a.rw_passes,
                "final_bytes_checksum_equal_native": int(total) == native_sum, "seconds": secs,
                "kernel": a.rw_kernel, "pages_per_s": [(nbytes // PAGE) / x for x in secs]})


def part_stress(g: "Gpu", a, tmp: Path, put) -> dict:
    hot, iters = 8, 16
    cr = g.s.register_capacity_range(None, (hot + 1) * PAGE, perms=7, n_frames=32, store="sparse",
                                     path=str(tmp / "stress.bin"), policy="next:1")
    threads = a.stress_warps * 32
    g.run("cap_stress", (threads // 256,), (256,), [U64(cr.base), ctypes.c_uint32(hot), ctypes.c_uint32(iters)])
    import numpy as np
    want = np.zeros((hot + 1, 1024), np.uint64)
    for w in range(a.stress_warps):
        for k in range(iters):
            pg = (w + k) % hot
            want[pg, :32] += 1
            want[pg + 1, :32] += 1
    g.s.unregister(cr.range_id)
    got = np.fromfile(tmp / "stress.bin", np.uint32).reshape(-1, 1024)[:hot + 1].astype(np.uint64)
    return put({"warps": a.stress_warps, "hot_pages": hot, "iters": iters, "counts_equal": bool((got == want).all()),
                "atomics": int(want.sum())})


def part_moe(g: "Gpu", a, tmp: Path, put, policy: str) -> dict:
    from hbfd.capacity.streams import moe_stream
    pages = moe_stream()
    n = int(pages.max()) + 1
    cr = g.s.register_capacity_range(None, n * PAGE, perms=1, n_frames=256, store="generated", seed=a.seed,
                                     policy=policy)
    before = g.s.capacity_counters()
    pp = g.dev_u64([int(x) for x in pages])
    acc = g.zeros(1)
    sec = g.run("cap_stream", (1,), (32,), [U64(cr.base), U64(pp), ctypes.c_int32(len(pages)), U64(a.moe_gap_ns),
                                           U64(acc)])
    after = g.s.capacity_counters()
    dev = {k: after[k] - before[k] for k in after}
    return put({"policy": policy, "accesses": len(pages), "distinct_pages": n, "seconds": sec, "device": dev,
                "no_wait_fraction": dev["no_wait"] / dev["accesses"] if dev["accesses"] else None})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--profile", default="ocp-sg1")
    ap.add_argument("--paper-gib", type=int, default=110)
    ap.add_argument("--paper-frames-gib", type=float, default=2)
    ap.add_argument("--native", choices=("gpu", "cpu"), default="gpu")
    ap.add_argument("--gen-gib", type=int, default=200)
    ap.add_argument("--gen-frames-gib", type=float, default=8)
    ap.add_argument("--chunk-gib", type=float, default=8)
    ap.add_argument("--gen-kernel", default="pages", help="generated: pages (a warp per page) or words")
    ap.add_argument("--gen-blocks", type=int, default=1056, help="generated: blocks of 256 threads (8 warps each) "
                    "of cap_sum_pages (grid-stride; 1056 = 8 per SM of the H200's 132)")
    ap.add_argument("--gen-policy", default="next:64", help="generated: the range's prefetch policy")
    ap.add_argument("--cap-workers", type=int, default=0, help="hbfd's fill threads per capacity range "
                    "($HBFD_CAPACITY_WORKERS; 0: hbfd's default, the host's cores)")
    ap.add_argument("--rw-gib", type=int, default=32)
    ap.add_argument("--rw-frames-gib", type=float, default=4)
    ap.add_argument("--rw-passes", type=int, default=2)
    ap.add_argument("--rw-stride", type=int, default=64, help="words between two RMW'd words (64: 8 per page)")
    ap.add_argument("--rw-kernel", default="pages", help="rw: pages (cap_rmw_pages: a warp per page, one miss "
                    "request per page) or words (cap_rmw: a thread per word, 8 lanes per page at stride 64)")
    ap.add_argument("--rw-blocks", type=int, default=1056, help="rw: blocks of 256 threads of cap_rmw_pages "
                    "(grid-stride; 1056 = 8 per SM of the H200's 132)")
    ap.add_argument("--stress-warps", type=int, default=4096)
    ap.add_argument("--moe-gap-ns", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=20261205)
    ap.add_argument("--max-host-gib", type=float, default=100)
    ap.add_argument("--work", default="")
    ap.add_argument("--dry-run", action="store_true", help="check the arguments and build the kernels (CPU)")
    ap.add_argument("--out", default=str(ROOT / "bench/results/capacity_gpu.json"))
    a = ap.parse_args()
    try:
        warnings = check_args(a)
    except ConfigError as e:                      # one line naming the argument, not a traceback
        ap.error(str(e))
    for w in warnings:
        print("warning:", w, flush=True)
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="capgpu-"))
    built = build(work)
    print("built:", built["capacity_admitted"], flush=True)
    doc = {"what": "issue 16: capacity mode on the GPU (bench/capacity_gpu.py)", "date": datetime.date.today().isoformat(),
           "host": platform.node(), "command": " ".join(["bench/capacity_gpu.py"] + sys.argv[1:]),
           "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True).stdout.strip(), "warnings": warnings, "build": built, "parts": {}}
    if a.dry_run:
        print("dry run: arguments checked, kernels built and capacity-admitted; nothing launched")
        return 0
    if os.environ.get("HBF_CAPACITY_DEVICE") != "1":
        raise SystemExit("set HBF_CAPACITY_DEVICE=1 (the unverified capacity device path)")
    from runtime_cuda import cudrv
    if not cudrv.gpu_available():
        raise SystemExit("no GPU: use --dry-run")
    doc["card"] = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                 text=True).stdout.strip()
    jobs = [(p, None) for p in a.parts.split(",") if p != "moe"]
    if "moe" in a.parts.split(","):
        jobs += [("moe", "next:8"), ("moe", "moe:8,16,4")]
    for name, pol in jobs:
        key = name if pol is None else f"{name}[{pol}]"
        tmp = work / key.replace(":", "_").replace(",", "_").replace("[", "_").replace("]", "")
        tmp.mkdir(parents=True, exist_ok=True)

        def put(res: dict, _k=key) -> dict:
            doc["parts"][_k] = dict(doc["parts"].get(_k, {}), **res)
            atomic_write_json(a.out, doc, end="\n")
            return res
        t0 = time.time()
        g = None
        try:
            g = Gpu(tmp, built, a.profile, a.cap_workers)
            fn = {"paper110": part_paper110, "generated": part_generated, "rw": part_rw, "stress": part_stress}
            res = part_moe(g, a, tmp, put, pol) if name == "moe" else fn[name](g, a, tmp, put)
            print(key, json.dumps(res)[:400], flush=True)
        except Exception as e:   # a part that fails is recorded and the next one runs
            put({"error": f"{type(e).__name__}: {e}"})
            print(key, "FAILED:", e, flush=True)
        finally:
            if g is not None:
                try:
                    put(g.close())
                except Exception as e:   # noqa: BLE001
                    put({"close_error": f"{type(e).__name__}: {e}"})
            put({"seconds": round(time.time() - t0, 1)})
    print("->", a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
