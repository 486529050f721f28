#!/usr/bin/env python3
"""TMA on the H200 (issue 15, item 5): semantic identity, the paper's increment experiment, native cost.

Ran on an H100 on 2026-12-05 (docs/RESULTS.md "Stop 38", "Stop 40": load/store/reduce semantics 57/57; the
increment then had a bench error, fixed since; multicast, bulk_copy and cp.async-mbarrier checks not yet run).
`--build-only` runs on the CPU (nvcc + hbfcc build of the templates, their admission); everything else needs a GPU.

Templates (CUDA C++ with inline PTX, built twice: nvcc = plain, hbfcc as nvcc = instrumented), each a kernel
that loops `iters` times over one mbarrier (phase reuse) or bulk group:
  load_1d .. load_5d  cp.async.bulk.tensor.Nd load (host cuTensorMapEncodeTiled map, __grid_constant__), the box
                      copied out of shared memory into `out` each iteration; the phases the waiters saw into `bar`
  load_mc             2-CTA cluster: rank 0 multicasts the box to both CTAs (.multicast::cluster, ctaMask 0b11)
  store_2d            cp.async.bulk.tensor.2d store (bulk_group, wait_group.read then wait_group 0)
  reduce_2d           cp.reduce.async.bulk.tensor.2d add into global (bulk_group)
  bulk_copy           cp.async.bulk load (mbarrier) + cp.async.bulk store (bulk_group), no descriptor
  cpasync_mbar        Ampere cp.async completing through cp.async.mbarrier.arrive.noinc
Checks (`--semantics`): per template and configuration (in-bounds / out-of-bounds coordinates; nothing / all /
half of the tensor registered, so a box straddles the HBM-HBF boundary): the instrumented build's outputs and
barrier observations are bit-identical to the plain build's, and the counters hold (tma_copies, HBF/HBM/OOB
bytes, tma_phases == tma_consumed + tma_stale + tma_leaked, no stale and no leaked object). >= 40 checks.

Increment experiment (`--increment`, the paper's Table: a fixed media delay of 1000 us vs 200 us, boxes of 256 B
and 8192 B, three amounts of work after the wait, 36 pairs per cell): each launch waits once for one TMA box; the
increment t(1000 us) - t(200 us) should be 800 us; error = |increment - 800 us| / 800 us per cell (median, p90).
The paper reports 0.152 % for TMA.

Native cost (`--native-cost`): nothing registered, plain vs instrumented launch time of the templates, 36
interleaved pairs each (goal <= 1.02x).

The decoder's bit layout is fitted to the H200 driver's encodings (bench/tma_layout_fit.py; hbf_tensormap.cuh
HB_TMAP_LAYOUT_VERIFIED 1 since 2026-12-05), so the default helpers decode tensor copies; `--trust-layout`
(-DHBF_TMA_TRUST_LAYOUT=1) only matters for a header with it 0. The decode has not yet been checked on the GPU
itself (bench/tma_tensormap.py gpu): these results are only as good as it. Partial results are written after
every case.

`--mc-debug` builds the helpers with -DHBF_TMA_MC_DEBUG=1 (hbf_tma.cuh): each load_mc check then carries
`mc_debug`, what both CTAs recorded and looked up in their completion tables (__hb_tma_dbg: per record, the
destination rank, its table address through mapa, the key, the entry and the parity word after the put; per warp
of each wait, the waiter's table, barrier address, key, the entry it found and the word before its take) and each
CTA's table at exit (keys and phase words).

    python3 bench/tma_semantics.py --build-only                       # CPU: build + admission
    python3 bench/tma_semantics.py --build-only --mc-debug            # CPU: the same with the debug helpers
    python3 bench/tma_semantics.py --semantics --increment --native-cost --out bench/results   # H200
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _p in (str(ROOT), str(ROOT / "bench")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from hbfcc.toolchain import cli_wrapper  # noqa: E402
from hbfcommon import abi  # noqa: E402
from hbfcommon.fsutil import atomic_write_json  # noqa: E402

TEMPLATES = ["load_1d", "load_2d", "load_3d", "load_4d", "load_5d", "load_mc", "store_2d", "reduce_2d",
             "bulk_copy", "cpasync_mbar"]
PAIRS = 36
BACK_TO_BACK = 20      # native cost: launches queued between two events
DELAYS_NS = (1_000_000, 200_000)
BOX_BYTES = (256, 8192)
WORK_NS = (0, 100_000, 1_000_000)

SOURCE = r'''
#include <cuda.h>
#include <stdint.h>
#define DEV static __device__ __forceinline__
DEV uint32_t sa(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
DEV void bar_init(uint64_t* b, uint32_t n) { asm volatile("mbarrier.init.shared.b64 [%0], %1;" :: "r"(sa(b)), "r"(n)); }
DEV void expect(uint64_t* b, uint32_t tx) {
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" :: "r"(sa(b)), "r"(tx) : "memory");
}
DEV uint32_t wait_parity(uint64_t* b, uint32_t par) {      // returns the try_wait calls it took
    uint32_t done = 0, n = 0;
    while (!done) {
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done) : "r"(sa(b)), "r"(par) : "memory");
        ++n;
    }
    return n;
}
DEV void spin_ns(uint64_t ns) {
    uint64_t t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
template <int R> DEV void tma_load(void* dst, const CUtensorMap* tm, const int* c, uint64_t* b) {
    const uint64_t m = (uint64_t)tm;
    if (R == 1) asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2}], [%3];"
                             :: "r"(sa(dst)), "l"(m), "r"(c[0]), "r"(sa(b)) : "memory");
    if (R == 2) asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                             :: "r"(sa(dst)), "l"(m), "r"(c[0]), "r"(c[1]), "r"(sa(b)) : "memory");
    if (R == 3) asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
                             :: "r"(sa(dst)), "l"(m), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(sa(b)) : "memory");
    if (R == 4) asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];"
                             :: "r"(sa(dst)), "l"(m), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(sa(b)) : "memory");
    if (R == 5) asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], [%7];"
                             :: "r"(sa(dst)), "l"(m), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]), "r"(sa(b)) : "memory");
}
__shared__ __align__(128) unsigned char tile[16384];
__shared__ __align__(8) uint64_t bar;

// one box per iteration into shared memory (phase reuse of one barrier), copied out; bars[it] = try_wait calls
template <int R> DEV void load_body(const CUtensorMap* tm, int c0, int c1, int c2, int c3, int c4, uint32_t box_bytes,
                                    int iters, uint64_t work_ns, uint32_t* out, uint32_t* bars) {
    const int c[5] = {c0, c1, c2, c3, c4};
    if (threadIdx.x == 0) bar_init(&bar, 1);
    __syncthreads();
    for (int it = 0; it < iters; ++it) {
        if (threadIdx.x == 0) { expect(&bar, box_bytes); tma_load<R>(tile, tm, c, &bar); }
        const uint32_t n = wait_parity(&bar, it & 1);
        if (threadIdx.x == 0) bars[it] = n > 0 ? 1u : 0u;
        for (uint32_t i = threadIdx.x; i < box_bytes / 4; i += blockDim.x) out[it * (box_bytes / 4) + i] = ((uint32_t*)tile)[i];
        if (work_ns) spin_ns(work_ns);
        __syncthreads();
    }
}
#define LOADK(R) extern "C" __global__ void load_##R##d(const __grid_constant__ CUtensorMap tm, int c0, int c1, int c2, int c3, \
    int c4, uint32_t box_bytes, int iters, uint64_t work_ns, uint32_t* out, uint32_t* bars) { \
    load_body<R>(&tm, c0, c1, c2, c3, c4, box_bytes, iters, work_ns, out, bars); }
LOADK(1) LOADK(2) LOADK(3) LOADK(4) LOADK(5)

extern "C" __global__ void __cluster_dims__(2, 1, 1) load_mc(const __grid_constant__ CUtensorMap tm, int c0, int c1,
                                                            uint32_t box_bytes, int iters, uint32_t* out, uint32_t* bars,
                                                            uint64_t late_ns) {
    uint32_t rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    if (threadIdx.x == 0) bar_init(&bar, 1);
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    for (int it = 0; it < iters; ++it) {
        if (threadIdx.x == 0) expect(&bar, box_bytes);
        asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
        if (threadIdx.x == 0 && rank == 0)
            asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                         " [%0], [%1, {%2, %3}], [%4], %5;" :: "r"(sa(tile)), "l"((uint64_t)&tm), "r"(c0), "r"(c1),
                         "r"(sa(&bar)), "h"((uint16_t)3) : "memory");
        if (rank != 0 && late_ns) spin_ns(late_ns);           // the destination rank waits late (a diagnostic)
        const uint32_t n = wait_parity(&bar, it & 1);
        if (threadIdx.x == 0) bars[rank * iters + it] = n > 0 ? 1u : 0u;
        for (uint32_t i = threadIdx.x; i < box_bytes / 4; i += blockDim.x)
            out[(rank * iters + it) * (box_bytes / 4) + i] = ((uint32_t*)tile)[i];
        asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    }
}

// the tile (box_bytes of shared memory, value = seed + index) stored / reduced into the tensor at (c0, c1)
extern "C" __global__ void store_2d(const __grid_constant__ CUtensorMap tm, int c0, int c1, uint32_t box_bytes, uint32_t seed) {
    for (uint32_t i = threadIdx.x; i < box_bytes / 4; i += blockDim.x) ((uint32_t*)tile)[i] = seed + i;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                     :: "l"((uint64_t)&tm), "r"(c0), "r"(c1), "r"(sa(tile)) : "memory");
        asm volatile("cp.async.bulk.commit_group;\n\tcp.async.bulk.wait_group.read 0;\n\tcp.async.bulk.wait_group 0;" ::: "memory");
    }
}
extern "C" __global__ void reduce_2d(const __grid_constant__ CUtensorMap tm, int c0, int c1, uint32_t box_bytes, uint32_t seed) {
    for (uint32_t i = threadIdx.x; i < box_bytes / 4; i += blockDim.x) ((uint32_t*)tile)[i] = seed + i;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2}], [%3];"
                     :: "l"((uint64_t)&tm), "r"(c0), "r"(c1), "r"(sa(tile)) : "memory");
        asm volatile("cp.async.bulk.commit_group;\n\tcp.async.bulk.wait_group 0;" ::: "memory");
    }
}
// a descriptor-less bulk load (mbarrier) of `bytes` from src, then a bulk store of it to dst (bulk_group)
extern "C" __global__ void bulk_copy(const uint32_t* src, uint32_t* dst, uint32_t bytes, int iters, uint32_t* bars) {
    if (threadIdx.x == 0) bar_init(&bar, 1);
    __syncthreads();
    for (int it = 0; it < iters; ++it) {
        if (threadIdx.x == 0) {
            expect(&bar, bytes);
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         :: "r"(sa(tile)), "l"(src + it * (bytes / 4)), "r"(bytes), "r"(sa(&bar)) : "memory");
        }
        const uint32_t n = wait_parity(&bar, it & 1);
        if (threadIdx.x == 0) {
            bars[it] = n > 0 ? 1u : 0u;
            asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n\tcp.async.bulk.commit_group;\n\t"
                         "cp.async.bulk.wait_group.read 0;" :: "l"(dst + it * (bytes / 4)), "r"(sa(tile)), "r"(bytes) : "memory");
        }
        __syncthreads();
    }
}
// Ampere cp.async, 16 B per thread, completion through cp.async.mbarrier.arrive.noinc (count = blockDim)
extern "C" __global__ void cpasync_mbar(const uint32_t* src, uint32_t* dst, int iters, uint32_t* bars) {
    if (threadIdx.x == 0) bar_init(&bar, blockDim.x);
    __syncthreads();
    for (int it = 0; it < iters; ++it) {
        const uint32_t* s = src + (it * blockDim.x + threadIdx.x) * 4;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(sa(tile + 16 * threadIdx.x)), "l"(s) : "memory");
        asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" :: "r"(sa(&bar)) : "memory");
        const uint32_t n = wait_parity(&bar, it & 1);
        if (threadIdx.x == 0) bars[it] = n > 0 ? 1u : 0u;
        for (int k = 0; k < 4; ++k) dst[(it * blockDim.x + threadIdx.x) * 4 + k] = ((uint32_t*)tile)[4 * threadIdx.x + k];
        __syncthreads();
    }
}
'''


def log(msg: str) -> None:
    print(f"[tma_semantics {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def build(work: Path, trust_layout: bool, mc_debug: bool = False) -> dict:
    """nvcc -cubin (plain) and hbfcc as nvcc (instrumented); the artifact's per-kernel admission."""
    work.mkdir(parents=True, exist_ok=True)
    src = work / "tma_sem.cu"
    src.write_text(SOURCE)
    wrap = cli_wrapper(work / "hbfcc")
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    flags = (["-DHBF_TMA_TRUST_LAYOUT=1"] if trust_layout else []) + (["-DHBF_TMA_MC_DEBUG=1"] if mc_debug else [])
    if flags:
        # a helper built with the flags: trust the unverified TensorMap layout (hbf_tma.cuh HBF_TMA_TRUST_LAYOUT),
        # record the multicast debug buffer (HBF_TMA_MC_DEBUG); rebuilt every time (the sources may have changed)
        hp = work / ("hbf_helpers" + ("_trust" if trust_layout else "") + ("_mcdbg" if mc_debug else "") + ".ptx")
        r = subprocess.run([sys.executable, "setup.py", "helper-ptx", "direct", str(hp)], cwd=ROOT,
                           env=dict(env, NVCC_APPEND_FLAGS=" ".join(flags)), capture_output=True, text=True)
        if r.returncode != 0:
            return {"error": f"helper build with {' '.join(flags)} failed: {r.stderr[-2000:]}"}
        env["HBFCC_HELPER_PTX"] = str(hp)
    out: dict = {}
    for tag, exe in (("plain", "nvcc"), ("hbf", str(wrap))):
        cub = work / f"tma_sem_{tag}.cubin"
        r = subprocess.run([exe, "-arch=sm_90a", "-O3", "-cubin", str(src), "-o", str(cub)], cwd=work, env=env,
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0 or not cub.is_file():
            return {"error": f"{tag} build failed (rc {r.returncode}): {(r.stderr or r.stdout)[-3000:]}"}
        out[tag] = str(cub)
    art = work / "tma_sem_hbf.cubin.hbfcc.json"
    out["artifact"] = str(art) if art.is_file() else None
    out["helper"] = env.get("HBFCC_HELPER_PTX", "default")
    if art.is_file():
        doc = json.loads(art.read_text())
        mods = doc.get("modules") or [doc]
        kern = {}
        for m in mods:
            for k in m.get("kernels", []):
                kern[k["name"]] = {"admitted": k.get("admitted"), "reasons": k.get("not_admitted_reasons"),
                                   "tma": k.get("tma"), "tma_hooks": k.get("tma_hooks"),
                                   "registers_plain_instrumented": [(k.get("ptxas_before") or {}).get("registers"),
                                                                    (k.get("ptxas_after") or {}).get("registers")]}
        out["kernels"] = kern
    return out


# ------------------------------------------------------------------------------------------------- GPU
class CUtensorMap(ctypes.Structure):
    _pack_ = 64
    _fields_ = [("opaque", ctypes.c_uint64 * 16)]


def encode_tiled(base: int, dims: list[int], box: list[int], elem: int = 4) -> CUtensorMap:
    """cuTensorMapEncodeTiled for a dense row-major uint32 tensor (dims innermost first), through
    bench/tma_tensormap.py's encode_tiled_raw (the one call of the driver's encoder)."""
    from cuda.bindings import driver as cu
    from tma_tensormap import encode_tiled_raw  # noqa: PLC0415
    strides, s = [], elem
    for d in dims[:-1]:
        s *= d
        strides.append(s)
    rc, name, raw = encode_tiled_raw(cu, {"base": base, "dtype": 2, "dims": list(dims), "gstrides": strides,
                                          "box": list(box), "estrides": [1] * len(dims), "interleave": 0,
                                          "swizzle": 0, "l2promo": 0, "fill": 0})     # dtype 2: UINT32
    if rc != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled: {name}")
    out = CUtensorMap()
    for i in range(16):
        out.opaque[i] = int.from_bytes(raw[8 * i:8 * i + 8], "little")
    return out


# rank -> (tensor dims (innermost first), box): a box of 4 KiB or less; tensors large enough for OOB cases
SHAPES = {1: ([4096], [256]), 2: ([256, 128], [32, 16]), 3: ([64, 32, 16], [16, 8, 4]),
          4: ([32, 16, 8, 4], [8, 4, 4, 2]), 5: ([16, 8, 8, 4, 4], [4, 4, 2, 2, 2])}


INNER_UNIT = 16 // 4      # uint32 elements per 16 bytes: the innermost coordinate must be a multiple (tm.INNER_COORD_ALIGN)


def _configs(rank: int) -> list[tuple[str, list[int]]]:
    """In bounds / partly out below / partly out above. The innermost coordinate is rounded toward zero to a multiple
    of 16 bytes: the TMA unit faults (ILLEGAL_INSTRUCTION) on any other (rank 5's box of 4 elements had -2 and 14;
    tests/tma/test_tma_load_kernel.py checks every configuration with hbfcommon.tensormap.copy_problems)."""
    dims, box = SHAPES[rank]

    def inner(c: list[int]) -> list[int]:
        return [int(c[0] / INNER_UNIT) * INNER_UNIT, *c[1:]]
    inb = inner([d // 4 for d in dims])
    oob_lo = inner([-(b // 2) for b in box])
    oob_hi = inner([d - b // 2 for d, b in zip(dims, box)])
    return [("inbounds", inb), ("oob_low", oob_lo), ("oob_high", oob_hi)]


REGISTRATIONS = ("none", "all", "half")


def decode_mc_debug(words) -> dict:
    """The multicast debug buffer (hbf_abi.h HBF_TMA_DBG_*, written by a -DHBF_TMA_MC_DEBUG=1 helper) as JSON:
    events (kind "record": the issuer's put into destination rank `dst`'s table; "take": a waiter's lookup in its
    own table), each CTA's table at exit (its non-free entries), and how many events did not fit."""
    w = [int(x) for x in words]
    if len(w) != abi.HBF_TMA_DBG_WORDS:
        raise ValueError(f"debug buffer of {len(w)} words, expected {abi.HBF_TMA_DBG_WORDS}")

    def phase(lo, hi):
        v = lo | hi << 32
        return {"deadline_ns": v & ((1 << 62) - 1), "waited": bool(v >> 62 & 1), "closed": bool(v >> 63 & 1)} if v else None
    nev, ntab = w[0], w[1]
    events = []
    for i in range(min(nev, abi.HBF_TMA_DBG_EVENTS)):
        e = w[abi.HBF_TMA_DBG_HDR + i * abi.HBF_TMA_DBG_EV_WORDS:][:abi.HBF_TMA_DBG_EV_WORDS]
        events.append({"kind": {1: "record", 2: "take"}.get(e[0], e[0]), "rank": e[1], "ctaid": e[2], "tid": e[3],
                       "table": hex(e[4]), "mbar": hex(e[5]), "parity": e[6], "key": hex(e[7]),
                       "dst": None if e[8] == 0xFFFFFFFF else e[8], "entry": hex(e[9]), "word": phase(e[10], e[11])})
    tables = []
    base = abi.HBF_TMA_DBG_HDR + abi.HBF_TMA_DBG_EVENTS * abi.HBF_TMA_DBG_EV_WORDS
    for i in range(min(ntab, abi.HBF_TMA_DBG_CTAS)):
        t = w[base + i * abi.HBF_TMA_DBG_CTA_WORDS:][:abi.HBF_TMA_DBG_CTA_WORDS]
        tw = t[4:]
        entries = []
        for k in range(abi.HBF_TMA_TABLE_ENTRIES):
            e = tw[2 + 6 * k:][:6]          # {u32 key, u32 pad, u64 word[2]} after the 8-byte header
            if e[0]:
                entries.append({"slot": k, "key": hex(e[0]), "parity0": phase(e[2], e[3]), "parity1": phase(e[4], e[5])})
        tables.append({"rank": t[0], "ctaid": t[1], "table": hex(t[2]), "exited": tw[0], "entries": entries})
    return {"events_seen": nev, "events_dropped": max(0, nev - abi.HBF_TMA_DBG_EVENTS), "events": events,
            "tables": tables}


def register_part(s, base: int, nbytes: int, reg: str):
    """``reg`` of the buffer [base, base + nbytes) as a timing range: "none" (None), "all", or "half" (the upper
    half: a box across it straddles the HBM-HBF boundary). Returns the range (None for "none")."""
    if reg == "none":
        return None
    if reg == "all":
        return s.register_timing_range(base, nbytes)
    return s.register_timing_range(base + nbytes // 2, nbytes // 2)


def semantics(args, out_path: Path, res: dict) -> None:
    import numpy as np
    from runtime_cuda import cudrv, session as S
    from devpath_common import hbfd_daemon, source_profile
    from devpath_common import SOURCES as SRC
    SRC["fixed5us"] = ("fixed", 5_000)
    work = Path(args.work)
    b = res["build"]
    checks = res.setdefault("checks", [])

    def check(name, ok, **info):
        checks.append({"name": name, "ok": bool(ok), **info})
        atomic_write_json(out_path, res)
        log(f"{'PASS' if ok else 'FAIL'} {name}")

    with hbfd_daemon(work, source_profile(work, "fixed5us")) as sock:
        s = S.attach(sock)
        mp = cudrv.module_load_data(Path(b["plain"]).read_bytes())
        mh = cudrv.module_load_data(Path(b["hbf"]).read_bytes())
        binding = s.bind_module(mh, artifact=b["artifact"])
        fp = {n: cudrv.module_function(mp, n) for n in TEMPLATES}
        fh = {}
        for n in TEMPLATES:
            fh[n] = cudrv.module_function(mh, n)
            s.note_function(fh[n], binding, n)
        dbg = cudrv.module_global(mh, abi.TMA_DBG_GLOBAL) if getattr(args, "mc_debug", False) else None
        if getattr(args, "mc_debug", False) and dbg is None:
            raise RuntimeError(f"--mc-debug: the instrumented module has no {abi.TMA_DBG_GLOBAL} (helper {b.get('helper')})")

        def run(fn, grid, block, argv, hbf: bool):
            if hbf:
                s.launch(fn, grid, block, argv)
            else:
                cudrv.launch(fn, grid, block, argv)
            s.synchronize() if hbf else cudrv.ctx_synchronize()

        iters = 4
        for rank in range(1, 6):
            dims, box = SHAPES[rank]
            n = int(np.prod(dims))
            nbytes = n * 4
            src = cudrv.mem_alloc(nbytes)
            host = (np.arange(n, dtype=np.uint64) * np.uint64(2654435761) % np.uint64(1 << 32)).astype(np.uint32)
            cudrv.htod(src, host.astype(np.uint32).ctypes.data, nbytes)
            box_bytes = int(np.prod(box)) * 4
            tm = encode_tiled(src, dims, box)
            outs = {t: cudrv.mem_alloc(iters * box_bytes) for t in ("p", "h")}
            bars = {t: cudrv.mem_alloc(iters * 4) for t in ("p", "h")}
            for reg in REGISTRATIONS:
                rng = register_part(s, src, nbytes, reg)
                for cname, coords in _configs(rank):
                    c = list(coords) + [0] * (5 - rank)
                    before = s.counters()
                    for t, fns, hbf in (("p", fp, False), ("h", fh, True)):
                        cudrv.memset_d8(outs[t], 0, iters * box_bytes)
                        argv = [tm] + [ctypes.c_int32(x) for x in c] + [ctypes.c_uint32(box_bytes), ctypes.c_int32(iters),
                                                                         ctypes.c_uint64(0), ctypes.c_uint64(outs[t]),
                                                                         ctypes.c_uint64(bars[t])]
                        run(fns[f"load_{rank}d"], (1,), (128,), argv, hbf)
                    after = s.counters()
                    a = np.empty(iters * box_bytes // 4, np.uint32)
                    bb = np.empty_like(a)
                    cudrv.dtoh(a.ctypes.data, outs["p"], iters * box_bytes)
                    cudrv.dtoh(bb.ctypes.data, outs["h"], iters * box_bytes)
                    k = (after.get("kernels") or {}).get(f"load_{rank}d", {})
                    kb = (before.get("kernels") or {}).get(f"load_{rank}d", {})
                    d = {f: k.get(f, 0) - kb.get(f, 0) for f in ("tma_copies", "tma_hbf_bytes", "tma_hbm_bytes", "tma_oob_bytes",
                                                                  "tma_phases", "tma_consumed", "tma_stale", "tma_leaked")}
                    ok_cnt = d["tma_phases"] == d["tma_consumed"] + d["tma_stale"] + d["tma_leaked"] and \
                        d["tma_stale"] == 0 and d["tma_leaked"] == 0 and (reg == "none" or d["tma_copies"] == iters)
                    check(f"load_{rank}d/{reg}/{cname}", bytes(a) == bytes(bb) and ok_cnt, counters=d)
                if rng is not None:
                    s.unregister(rng)
            for t in ("p", "h"):
                cudrv.mem_free(outs[t])
                cudrv.mem_free(bars[t])
            cudrv.mem_free(src)
        # store / reduce: the tensor after the kernel, plain vs instrumented, registered and not
        dims, box = SHAPES[2]
        n = dims[0] * dims[1]
        box_bytes = box[0] * box[1] * 4
        for kname in ("store_2d", "reduce_2d"):
            for reg in REGISTRATIONS:
                # no box partly below the tensor: the PLAIN build's tensor store at (-16, -8) ended in
                # CUDA_ERROR_ILLEGAL_INSTRUCTION on an H100 (2026-12-05, docs/RESULTS.md "Stop 38"), after 46/46 load
                # checks and the in-bounds store passed -- a program error on the hardware, so nothing to model
                for cname, coords in [c for c in _configs(2) if c[0] != "oob_low"]:
                    got = {}
                    for t, fns, hbf in (("p", fp, False), ("h", fh, True)):
                        dst = cudrv.mem_alloc(n * 4)
                        cudrv.memset_d8(dst, 1, n * 4)
                        tm = encode_tiled(dst, dims, box)
                        rng = register_part(s, dst, n * 4, reg) if hbf else None
                        run(fns[kname], (1,), (128,), [tm, ctypes.c_int32(coords[0]), ctypes.c_int32(coords[1]),
                                                       ctypes.c_uint32(box_bytes), ctypes.c_uint32(7)], hbf)
                        h = np.empty(n, np.uint32)
                        cudrv.dtoh(h.ctypes.data, dst, n * 4)
                        got[t] = bytes(h)
                        if rng is not None:
                            s.unregister(rng)
                        cudrv.mem_free(dst)
                    check(f"{kname}/{reg}/{cname}", got["p"] == got["h"])
        # multicast, descriptor-less bulk copies and Ampere cp.async through an mbarrier: outputs and barrier
        # observations of both builds, nothing / all / half of the source registered (stop 40: these three were
        # built but not launched by the first GPU runs)
        def tma_counts(kname, before, after):
            k = (after.get("kernels") or {}).get(kname, {})
            kb = (before.get("kernels") or {}).get(kname, {})
            return {f: k.get(f, 0) - kb.get(f, 0) for f in ("tma_copies", "tma_hbf_bytes", "tma_hbm_bytes", "tma_oob_bytes",
                                                            "tma_phases", "tma_consumed", "tma_stale", "tma_leaked")}

        def lifecycle_ok(d):
            return d["tma_phases"] == d["tma_consumed"] + d["tma_stale"] + d["tma_leaked"] and not d["tma_stale"] \
                and not d["tma_leaked"]

        def compare(kname, src_bytes, out_bytes, grid, argv_of, configs, label=""):
            try:
                _compare(kname, src_bytes, out_bytes, grid, argv_of, configs, label)
            except Exception as e:  # noqa: BLE001 - a refusal or a launch error is this template's failed check
                check(f"{label or kname}/error", False, error=f"{type(e).__name__}: {e}")

        def _compare(kname, src_bytes, out_bytes, grid, argv_of, configs, label=""):
            src = cudrv.mem_alloc(src_bytes)
            host = (np.arange(src_bytes // 4, dtype=np.uint64) * np.uint64(2246822519) % np.uint64(1 << 32)).astype(np.uint32)
            cudrv.htod(src, host.ctypes.data, src_bytes)
            for reg in REGISTRATIONS:
                rng = register_part(s, src, src_bytes, reg)
                for cname, extra in configs:
                    outs = {t: cudrv.mem_alloc(out_bytes) for t in ("p", "h")}
                    bars = {t: cudrv.mem_alloc(2 * iters * 4) for t in ("p", "h")}
                    before = s.counters()
                    info = {}
                    for t, fns, hbf in (("p", fp, False), ("h", fh, True)):
                        cudrv.memset_d8(outs[t], 0, out_bytes)
                        cudrv.memset_d8(bars[t], 0, 2 * iters * 4)
                        if hbf and dbg is not None and kname == "load_mc":
                            cudrv.memset_d8(dbg[0], 0, dbg[1])
                        run(fns[kname], grid, (128,), argv_of(src, extra, outs[t], bars[t]), hbf)
                        if hbf and dbg is not None and kname == "load_mc":
                            dw = np.empty(dbg[1] // 4, np.uint32)
                            cudrv.dtoh(dw.ctypes.data, dbg[0], dbg[1])
                            info["mc_debug"] = decode_mc_debug(dw.tolist())
                    after = s.counters()
                    got = {}
                    for t in ("p", "h"):
                        a = np.empty(out_bytes // 4 + 2 * iters, np.uint32)
                        cudrv.dtoh(a.ctypes.data, outs[t], out_bytes)
                        cudrv.dtoh(a[out_bytes // 4:].ctypes.data, bars[t], 2 * iters * 4)
                        got[t] = bytes(a)
                        cudrv.mem_free(outs[t])
                        cudrv.mem_free(bars[t])
                    d = tma_counts(kname, before, after)
                    ok_cnt = lifecycle_ok(d) and (reg == "none" or kname == "cpasync_mbar" or d["tma_copies"] > 0)
                    check(f"{label or kname}/{reg}/{cname}", got["p"] == got["h"] and ok_cnt, counters=d,
                          values_equal=got["p"] == got["h"], lifecycle_ok=ok_cnt, **info)
                if rng is not None:
                    s.unregister(rng)
            cudrv.mem_free(src)

        dims, box = SHAPES[2]
        mc_box = box[0] * box[1] * 4
        tmaps = {}

        def mc_argv(src, coords, o, bars, late_ns=0):
            tm = tmaps.setdefault(src, encode_tiled(src, dims, box))
            return [tm, ctypes.c_int32(coords[0]), ctypes.c_int32(coords[1]), ctypes.c_uint32(mc_box),
                    ctypes.c_int32(iters), ctypes.c_uint64(o), ctypes.c_uint64(bars), ctypes.c_uint64(late_ns)]
        compare("load_mc", dims[0] * dims[1] * 4, 2 * iters * mc_box, (2,), mc_argv, _configs(2))
        # the same with the destination rank waiting 100 us late (stop 41: with a range registered rank 1 never marked
        # its phase objects waited; if rank 1 read its table before rank 0's records were visible, this one passes)
        compare("load_mc", dims[0] * dims[1] * 4, 2 * iters * mc_box, (2,),
                lambda src, c, o, bars: mc_argv(src, c, o, bars, 100_000), _configs(2), label="load_mc_late")
        for nb in (4096, 256):
            compare("bulk_copy", iters * nb, iters * nb, (1,),
                    lambda src, _x, o, bars, nb=nb: [ctypes.c_uint64(src), ctypes.c_uint64(o), ctypes.c_uint32(nb),
                                                     ctypes.c_int32(iters), ctypes.c_uint64(bars)], [(f"{nb}B", None)])
        compare("cpasync_mbar", iters * 128 * 16, iters * 128 * 16, (1,),
                lambda src, _x, o, bars: [ctypes.c_uint64(src), ctypes.c_uint64(o), ctypes.c_int32(iters),
                                          ctypes.c_uint64(bars)], [("16B_per_thread", None)])
        res["summary"] = {"checks": len(checks), "passed": sum(c["ok"] for c in checks),
                          "templates": sorted({c["name"].split("/")[0] for c in checks})}
        atomic_write_json(out_path, res)
        s.close()


@contextlib.contextmanager
def _fixed_delay_session(work: Path, b: dict, delay: int):
    """hbfd with the fixed source at ``delay`` ns (read = write), a session on it, the instrumented build's load_1d
    and load_2d bound: yields (session, {rank: function}); the session is closed at the end."""
    from runtime_cuda import cudrv, session as S
    from devpath_common import hbfd_daemon, source_profile, SOURCES as SRC
    SRC[f"fixed{delay}"] = ("fixed", delay)
    with hbfd_daemon(work, source_profile(work, f"fixed{delay}")) as sock:
        s = S.attach(sock)
        try:
            mh = cudrv.module_load_data(Path(b["hbf"]).read_bytes())
            binding = s.bind_module(mh, artifact=b["artifact"])
            fns = {r: cudrv.module_function(mh, f"load_{r}d") for r in (1, 2)}
            for r, fn in fns.items():
                s.note_function(fn, binding, f"load_{r}d")
            yield s, fns
        finally:
            s.close()


def increment(args, out_path: Path, res: dict) -> None:
    """Per cell (delay pair, box bytes, work): 36 launches at each delay (one daemon per delay), paired by index."""
    import numpy as np
    from runtime_cuda import cudrv
    work = Path(args.work)
    b = res["build"]
    cells = res.setdefault("increment", {})
    times: dict = {}
    dtimes: dict = {}
    stores: dict = {}
    for delay in DELAYS_NS:
        with _fixed_delay_session(work, b, delay) as (s, fns):
            for nbytes in BOX_BYTES:
                rank, dims, box = (1, [4096], [64]) if nbytes == 256 else (2, [256, 128], [64, 32])
                n = int(np.prod(dims))
                src = cudrv.mem_alloc(n * 4)
                # unregistered before src is freed: stop 40's first run left it registered, the next box's output
                # buffer was allocated where it had been, and its copy-out stores were charged as HBF stores (the
                # 8192 B cells' second delay)
                rng = s.register_timing_range(src, n * 4)
                tm = encode_tiled(src, dims, box)
                o = cudrv.mem_alloc(nbytes)
                bars = cudrv.mem_alloc(4)
                st0 = s.counters(publish=False)["totals"]["ops"]["store"]["requests"]
                for w in WORK_NS:
                    xs, ds = [], []
                    for _ in range(PAIRS):
                        argv = [tm] + [ctypes.c_int32(0)] * 5 + [ctypes.c_uint32(nbytes), ctypes.c_int32(1),
                                                                 ctypes.c_uint64(w), ctypes.c_uint64(o), ctypes.c_uint64(bars)]
                        t0 = time.perf_counter_ns()
                        s.launch(fns[rank], (1,), (128,), argv)
                        s.synchronize()
                        xs.append(time.perf_counter_ns() - t0)
                        # the kernel on the device (%globaltimer at block 0's enter .. the last block's exit): what
                        # the paper times; the host time adds the launch and the session's synchronize
                        k = s.counters(publish=False)["kernels"].get(f"load_{rank}d", {})
                        ds.append(int(k.get("kend_ns", 0)) - int(k.get("kstart_ns", 0)))
                    times[(delay, nbytes, w)] = xs
                    dtimes[(delay, nbytes, w)] = ds
                    log(f"delay {delay} ns, {nbytes} B, work {w} ns: median {statistics.median(xs) / 1e3:.1f} us host, "
                        f"{statistics.median(ds) / 1e3:.1f} us device")
                # the experiment charges only the box's loads: a store charged to HBF means a buffer in a range
                stores[(delay, nbytes)] = s.counters(publish=False)["totals"]["ops"]["store"]["requests"] - st0
                s.unregister(rng)
                for a in (src, o, bars):
                    cudrv.mem_free(a)
    hi, lo = DELAYS_NS

    def cell(tt, nbytes, w):
        inc = [a - c for a, c in zip(tt[(hi, nbytes, w)], tt[(lo, nbytes, w)])]
        err = [abs(x - (hi - lo)) / (hi - lo) * 100 for x in inc]
        return {"pairs": len(inc), "increment_ns_median": statistics.median(inc),
                "error_pct_median": statistics.median(err), "error_pct_p90": sorted(err)[int(0.9 * (len(err) - 1))]}
    for nbytes in BOX_BYTES:
        for w in WORK_NS:
            cells[f"{nbytes}B/work{w}"] = {**cell(times, nbytes, w), "paper_error_pct": 0.152,
                                           "device": cell(dtimes, nbytes, w),
                                           "hbf_store_requests": {str(dl): stores[(dl, nbytes)] for dl in DELAYS_NS}}
            atomic_write_json(out_path, res)


def increment_diag(args, out_path: Path, res: dict) -> None:
    """Where the increment's time goes (the 8192 B cell measured ~2x the delay, stop 40): per delay and box (1D 64
    elements; 2D 64 x rows, rows 1 .. 32), the median host time of 5 launches and the kernel's counters over one more
    (requests, modeled ns, issue overhead, wait calls / wall / lateness, kernel start..end on the device)."""
    import numpy as np
    from runtime_cuda import cudrv
    work = Path(args.work)
    b = res["build"]
    diag = res.setdefault("increment_diag", {})
    cases = [(1, [4096], [64])] + [(2, [256, 128], [64, r]) for r in (1, 2, 4, 8, 16, 17, 32)]
    for delay in DELAYS_NS:
        with _fixed_delay_session(work, b, delay) as (s, fns):
            for rank, dims, box in cases:
                n = int(np.prod(dims))
                nbytes = int(np.prod(box)) * 4
                src = cudrv.mem_alloc(n * 4)
                rng = s.register_timing_range(src, n * 4)
                tm = encode_tiled(src, dims, box)
                o = cudrv.mem_alloc(nbytes)
                bars = cudrv.mem_alloc(4)
                argv = [tm] + [ctypes.c_int32(0)] * 5 + [ctypes.c_uint32(nbytes), ctypes.c_int32(1),
                                                         ctypes.c_uint64(0), ctypes.c_uint64(o), ctypes.c_uint64(bars)]
                xs = []
                for _ in range(5):
                    t0 = time.perf_counter_ns()
                    s.launch(fns[rank], (1,), (128,), argv)
                    s.synchronize()
                    xs.append(time.perf_counter_ns() - t0)
                name = f"load_{rank}d"
                c0 = s.counters(publish=False)["kernels"].get(name, {})
                s.launch(fns[rank], (1,), (128,), argv)
                s.synchronize()
                c1 = s.counters(publish=False)["kernels"].get(name, {})
                op0, op1 = c0.get("ops", {}).get("cpasync", {}), c1.get("ops", {}).get("cpasync", {})   # TMA loads
                d = {f: op1.get(f, 0) - op0.get(f, 0) for f in ("requests", "bytes", "modeled_ns", "overhead_ns")}
                d["store_requests"] = (c1.get("ops", {}).get("store", {}).get("requests", 0)
                                       - c0.get("ops", {}).get("store", {}).get("requests", 0))
                for f in ("wait_calls", "wait_wall_ns", "wait_overhead_ns", "ready_waits", "slack_ns", "bias_clamps",
                          "refresh_claims", "thermal_waits", "tma_copies", "tma_hbf_bytes"):
                    d[f] = c1.get(f, 0) - c0.get(f, 0)
                d["kernel_device_ns"] = c1.get("kend_ns", 0) - c1.get("kstart_ns", 0)
                d["host_median_us"] = statistics.median(xs) / 1e3
                key = f"d{delay // 1000}us/{rank}d/{'x'.join(map(str, box))}"
                diag[key] = d
                log(f"diag {key}: {json.dumps(d)}")
                atomic_write_json(out_path, res)
                s.unregister(rng)
                for a in (src, o, bars):
                    cudrv.mem_free(a)


def native_cost(args, out_path: Path, res: dict) -> None:
    """Nothing registered: plain vs instrumented launch time, 36 interleaved pairs per template (load_2d, bulk_copy)."""
    import numpy as np
    from runtime_cuda import cudrv, session as S
    from devpath_common import hbfd_daemon, source_profile
    work = Path(args.work)
    b = res["build"]
    nc = res.setdefault("native_cost", {})
    with hbfd_daemon(work, source_profile(work, "fixed0")) as sock:
        s = S.attach(sock)
        mp = cudrv.module_load_data(Path(b["plain"]).read_bytes())
        mh = cudrv.module_load_data(Path(b["hbf"]).read_bytes())
        binding = s.bind_module(mh, artifact=b["artifact"])
        dims, box = SHAPES[2]
        src = cudrv.mem_alloc(dims[0] * dims[1] * 4)
        tm = encode_tiled(src, dims, box)
        box_bytes = box[0] * box[1] * 4
        o = cudrv.mem_alloc(64 * box_bytes)
        bars = cudrv.mem_alloc(64 * 4)
        fpl, fhb = cudrv.module_function(mp, "load_2d"), cudrv.module_function(mh, "load_2d")
        s.note_function(fhb, binding, "load_2d")
        argv = [tm] + [ctypes.c_int32(0)] * 5 + [ctypes.c_uint32(box_bytes), ctypes.c_int32(64), ctypes.c_uint64(0),
                                                 ctypes.c_uint64(o), ctypes.c_uint64(bars)]
        d = cudrv.drv()
        ev = [cudrv.check(d.cuEventCreate(0), "cuEventCreate") for _ in range(2)]
        pl, hb, gpl, ghb = [], [], [], []
        for _ in range(PAIRS):
            for fn, acc, gacc, via in ((fpl, pl, gpl, cudrv.launch), (fhb, hb, ghb, s.launch)):
                t0 = time.perf_counter_ns()
                via(fn, (132,), (128,), argv)
                cudrv.ctx_synchronize()
                acc.append(time.perf_counter_ns() - t0)
                # the kernels alone: BACK_TO_BACK launches between two events, queued faster than they run, so the
                # host's per-launch work (the session's launch selection) is hidden behind the GPU's
                cudrv.check(d.cuEventRecord(ev[0], d.CUstream(0)), "cuEventRecord")
                for _ in range(BACK_TO_BACK):
                    via(fn, (132,), (128,), argv)
                cudrv.check(d.cuEventRecord(ev[1], d.CUstream(0)), "cuEventRecord")
                cudrv.check(d.cuEventSynchronize(ev[1]), "cuEventSynchronize")
                gacc.append(float(cudrv.check(d.cuEventElapsedTime(ev[0], ev[1]), "cuEventElapsedTime")) * 1e3 / BACK_TO_BACK)
        for e in ev:
            d.cuEventDestroy(e)
        ratio = [h / p for h, p in zip(hb, pl)]
        gratio = [h / p for h, p in zip(ghb, gpl)]
        nc["load_2d"] = {"pairs": PAIRS, "ratio_median": statistics.median(ratio),
                         "ratio_p10_p90": [sorted(ratio)[3], sorted(ratio)[32]], "goal": "<= 1.02",
                         "what": "host: one launch + synchronize each (the session's host work included); "
                                 f"gpu: {BACK_TO_BACK} launches back to back between two events, per launch",
                         "plain_us_median": statistics.median(pl) / 1e3, "hbf_us_median": statistics.median(hb) / 1e3,
                         "gpu_ratio_median": statistics.median(gratio),
                         "gpu_ratio_p10_p90": [sorted(gratio)[3], sorted(gratio)[32]],
                         "gpu_plain_us_median": statistics.median(gpl), "gpu_hbf_us_median": statistics.median(ghb)}
        atomic_write_json(out_path, res)
        s.close()
        del np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"), help="folder for tma_semantics.json")
    ap.add_argument("--work", default="/tmp/hbf-tma-semantics", help="build and daemon folder")
    ap.add_argument("--build-only", action="store_true", help="CPU: build the templates and report their admission")
    ap.add_argument("--semantics", action="store_true")
    ap.add_argument("--increment", action="store_true")
    ap.add_argument("--native-cost", action="store_true")
    ap.add_argument("--increment-diag", action="store_true", help="where the increment's time goes (counters per box)")
    ap.add_argument("--trust-layout", action="store_true",
                    help="build the helpers with -DHBF_TMA_TRUST_LAYOUT=1 (only needed with HB_TMAP_LAYOUT_VERIFIED 0)")
    ap.add_argument("--mc-debug", action="store_true",
                    help="build the helpers with -DHBF_TMA_MC_DEBUG=1: each load_mc check carries both CTAs' table "
                         "records, lookups and exit tables (`mc_debug`)")
    a = ap.parse_args(argv)
    if not (a.build_only or a.semantics or a.increment or a.native_cost or a.increment_diag):
        ap.error("nothing to do: give --build-only, or --semantics / --increment / --native-cost on a GPU")
    # this bench IS the GPU validation of the TMA device path: it opts in (runtime_cuda/knobs.py tma_device);
    # without HBF_TMA_DEVICE=1 every instrumented TMA copy fails closed
    os.environ["HBF_TMA_DEVICE"] = "1"
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    out_path = out_dir / ("tma_semantics_build.json" if a.build_only else "tma_semantics.json")
    res: dict = {"what": "TMA semantic identity / increment experiment / native cost (issue 15)",
                 "date": time.strftime("%Y-%m-%d"), "command": " ".join(["python3", "bench/tma_semantics.py", *(argv or sys.argv[1:])]),
                 "trust_layout": a.trust_layout, "mc_debug": a.mc_debug}
    res["build"] = build(Path(a.work), a.trust_layout, a.mc_debug)
    atomic_write_json(out_path, res)
    if "error" in res["build"]:
        log(res["build"]["error"])
        return 1
    for k, v in sorted((res["build"].get("kernels") or {}).items()):
        log(f"{k}: admitted={v.get('admitted')} {v.get('reasons') or ''}")
    if a.build_only:
        log(f"wrote {out_path}")
        return 0
    from runtime_cuda.cudrv import gpu_available
    if not gpu_available():
        log("no GPU: only --build-only runs here")
        return 2
    res["card"] = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                 text=True).stdout.strip()
    if a.semantics:
        semantics(a, out_path, res)
    if a.increment:
        increment(a, out_path, res)
    if a.native_cost:
        native_cost(a, out_path, res)
    if a.increment_diag:
        increment_diag(a, out_path, res)
    log(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
