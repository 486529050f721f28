#!/usr/bin/env python3
"""TensorMap decoding and the tile split (issue 15 items 2-3): what it costs, and whether it is right on a GPU.

    python3 bench/tma_tensormap.py cpu [--out bench/results/tma_tensormap_cpu.json]
        CPU only. ptxas (sm_90a) registers / stack / spills of small kernels calling hb_tmap_decode, hb_tmap_lookup,
        hb_tmap_box_runs and hb_tmap_split; the host cost per call of the same header (nvcc host build,
        bench/src/tma_tensormap_cpu.cu) on representative tiles (median and spread over repetitions).

    python3 bench/tma_tensormap.py gpu [--out bench/results/tma_tensormap_gpu.json]
                                       [--encodings bench/results/tma_tensormap_encodings.json.gz] [--random 3000]
        NEEDS an sm_90 GPU (the H200). Run 2026-12-05 twice: up to step 1 (r1, the fit's fixture), then steps 1-4
        (r2; device decode 2746/2747: the one left was descriptor 0 read from freed host memory by cudrv.htod, fixed)
        with step 5 faulting ILLEGAL_INSTRUCTION at its first load (the case generator's innermost coordinate was not
        16-byte aligned: fixed, and every launch is now checked by tm.copy_problems first). Steps 4-5 since NOT re-run.
        1. the real cuTensorMapEncodeTiled (cuda.bindings.driver; cuda.cuda as a fallback) over a field-combination
           matrix -- every dtype, ranks 1-5, interleave, swizzle, l2promo, fill, strides, boxes, elementStrides, and
           the documented error cases -- recording inputs, the driver's result and the raw 128 bytes into
           --encodings (written as it goes; tests/tma/test_tensormap.py consumes it in CI once it exists);
        2. the layout by differential probing (hbfcommon/tensormap.py discover_layout) against the driver: per field
           confirmed / mismatched, with the observed bit positions and stored values; and whether the driver
           writes bits that depend on the allocation behind the address (it does on Blackwell, per NVIDIA's 595
           driver notes): the same maps at a small and a large real allocation and at an unallocated address;
        2b. im2col maps (cuTensorMapEncodeIm2col): which bits mark one, and that decode() refuses them;
        3. decode() of every real encoding and encode() byte equality; driver-rejected inputs vs encode()'s rules;
        4. the device: hb_tmap_decode run on the GPU over the same descriptors, compared with the Python twin;
        5. the box semantics on the TMA unit itself: real cp.async.bulk.tensor loads (bench/src/tma_load_kernel.cu;
           1D-5D, negative and past-the-end coordinates, elementStrides > 1, swizzled and interleaved maps) with
           mbarrier expect_tx = hb_tmap_box_bytes, retried with the descriptor's BOX_BYTES when it does not complete
           (the floor-vs-ceil question); the barrier must complete (and, as a negative control, not with one byte
           more), and
           every shared-memory element must hold the global element the model says (or zero for an out-of-bounds
           one) -- exactly for plain maps, as a multiset for swizzled/interleaved ones (placement permuted): so
           swizzle/interleave are checked not to change WHICH global bytes are read.
        Writes a summary to --out (fields confirmed / mismatched, counts of every check).
"""
from __future__ import annotations

import argparse
import ctypes
import dataclasses
import datetime as _dt
import gzip
import json
import logging
import math
import random
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hbfcommon import tensormap as tm  # noqa: E402
from hbfcommon.fsutil import atomic_write_bytes, atomic_write_json  # noqa: E402

log = logging.getLogger(__name__)
INC = [f"-I{REPO / 'runtime_cuda' / 'include'}", f"-I{REPO / 'runtime_cuda' / 'src'}"]
RESULTS = REPO / "bench" / "results"


def _tool(name: str) -> str:
    """The real CUDA tool hbfcc itself would run (hbfcc.toolchain: knobs, PATH, CUDA_HOME)."""
    from hbfcc.toolchain import find_real_nvcc, find_real_ptxas  # noqa: PLC0415
    return {"nvcc": find_real_nvcc, "ptxas": find_real_ptxas}[name]()


def _stamp() -> dict:
    rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "commit": rev.stdout.strip(), "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "layout_verified": tm.LAYOUT_VERIFIED}


def _stats(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


# ---- CPU --------------------------------------------------------------------------------------------------------------
DEVICE_KERNELS = REPO / "bench" / "src" / "tma_tensormap_kernels.cu"


def ptxas_resources(tmp: Path) -> dict:
    subprocess.run([_tool("nvcc"), "-ptx", "-arch=sm_90a", "-std=c++17", *INC, str(DEVICE_KERNELS), "-o",
                    str(tmp / "k.ptx")], check=True, capture_output=True, text=True)
    r = subprocess.run([_tool("ptxas"), "-arch=sm_90a", "-v", str(tmp / "k.ptx"), "-o", str(tmp / "k.o")],
                       check=True, capture_output=True, text=True)
    out = {}
    for m in re.finditer(r"Function properties for (\w+)\n\s+(\d+) bytes stack frame, (\d+) bytes spill stores.*?\n"
                         r".*?Used (\d+) registers", r.stdout + r.stderr, flags=re.S):
        out[m.group(1)] = {"stack_bytes": int(m.group(2)), "spill_store_bytes": int(m.group(3)),
                           "registers": int(m.group(4))}
    return out


def cpu_tiles() -> list[tuple[str, tm.TensorMap, tuple[int, ...]]]:
    big = tm.TensorMap(base=1 << 30, dtype=6, dims=(4096, 4096), gstrides=(8192,), box=(128, 128), estrides=(1, 1))
    dense = tm.TensorMap(base=1 << 30, dtype=6, dims=(128, 4096), gstrides=(256,), box=(128, 128), estrides=(1, 1))
    five = tm.TensorMap(base=1 << 30, dtype=7, dims=(64, 16, 8, 4, 2), gstrides=(256, 4096, 32768, 131072),
                        box=(32, 8, 4, 2, 2), estrides=(1, 1, 1, 1, 1))
    il = tm.TensorMap(base=1 << 30, dtype=6, dims=(8, 64, 64), gstrides=(16, 1024), box=(8, 64, 8),
                      estrides=(2, 2, 1), interleave=1)
    return [("fp16_128x128_inner", big, (256, 512)), ("fp16_128x128_dense_rows", dense, (0, 512)),
            ("fp16_128x128_edge_oob", big, (4096 - 64, -32)), ("fp32_5d_32x8x4x2x2", five, (16, 12, 6, 3, 1)),
            ("fp16_interleaved_estride2", il, (0, 0, 0))]


def run_cpu(args) -> None:
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        res = ptxas_resources(tmp)
        exe = tmp / "cpu"
        subprocess.run([_tool("nvcc"), "-x", "cu", "-std=c++17", "-O2", *INC,
                        str(REPO / "bench" / "src" / "tma_tensormap_cpu.cu"), "-o", str(exe)],
                       check=True, capture_output=True, text=True)
        lines = [f"{name} {tm.encode(m).hex()} {m.rank} {' '.join(map(str, c))}" for name, m, c in cpu_tiles()]
        r = subprocess.run([str(exe), str(args.reps), str(args.iters)], input="\n".join(lines) + "\n",
                           capture_output=True, text=True, check=True, timeout=600)
    tiles = []
    for line, (name, m, c) in zip(r.stdout.splitlines(), cpu_tiles()):
        o = json.loads(line)
        runs, oob = tm.box_runs(m, c)
        assert o["runs"] == len(runs), (name, o["runs"], len(runs))
        tiles.append({"name": name, "rank": m.rank, "box": list(m.box), "coords": list(c), "runs": o["runs"],
                      "inbounds_bytes": o["inbounds_bytes"], "oob_bytes": oob, "box_bytes": m.box_bytes,
                      **{k: _stats(o[k]) for k in ("decode_ns", "box_runs_ns", "split_ns")}})
    doc = {**_stamp(), "card": "CPU (this 2-core box, shared)", "reps": args.reps, "iters_per_rep": args.iters,
           "ptxas_sm90a": res, "host_cost": tiles}
    atomic_write_json(args.out, doc)
    print(json.dumps(doc, indent=1))


# ---- GPU --------------------------------------------------------------------------------------------------------------
class Driver:
    """cuTensorMapEncodeTiled through cuda.bindings.driver (cuda-python >= 12.6), or cuda.cuda (older)."""

    def __init__(self) -> None:
        try:
            from cuda.bindings import driver as d  # noqa: PLC0415
            self.api = "cuda.bindings.driver"
        except ImportError:
            from cuda import cuda as d  # type: ignore  # noqa: PLC0415
            self.api = "cuda.cuda"
        self.d = d
        try:
            err = d.cuInit(0)[0]
        except Exception as e:  # noqa: BLE001 -- no driver library on this machine
            raise SystemExit(f"no CUDA driver here ({type(e).__name__}): the gpu part needs the H200") from None
        if int(err) != 0:
            raise SystemExit(f"cuInit failed ({err}): the gpu part needs a GPU")
        _, dev = d.cuDeviceGet(0)
        _, self.ctx = d.cuDevicePrimaryCtxRetain(dev)
        d.cuCtxSetCurrent(self.ctx)
        _, name = d.cuDeviceGetName(128, dev)
        self.name = name.split(b"\0")[0].decode()

    @staticmethod
    def rank1_strides(inp: dict) -> list[int]:
        """The globalStrides array passed for a rank-1 map: cuda-python turns an empty list into a NULL pointer,
        and the H200's driver refused every rank-1 map given one (2026-12-05, r1 fixture); the array has
        rank - 1 = 0 meaningful entries, so one entry -- the row's bytes rounded up to 16, as Triton's 1D
        descriptors pass -- is passed and recorded ("rank1_strides_passed")."""
        e = tm.DTYPE_BYTES[inp["dtype"]] if 0 <= inp["dtype"] < len(tm.DTYPE_BYTES) else 0
        return [max(16, -(-inp["dims"][0] * max(e, 1) // 16) * 16)] if len(inp["dims"]) == 1 and inp["dims"] else []

    def encode_raw(self, inp: dict) -> tuple[int, str, bytes | None]:
        return encode_tiled_raw(self.d, inp)

    def encode(self, m: tm.TensorMap) -> bytes:
        rc, name, b = self.encode_raw(_inputs(m))
        if rc:
            raise tm.TensorMapError("RULE", f"the driver refused: {name}")
        return b


def encode_tiled_raw(d, inp: dict) -> tuple[int, str, bytes | None]:
    """cuTensorMapEncodeTiled through the driver bindings ``d`` (cuda.bindings.driver or cuda.cuda) for the inputs
    ``inp`` (``_inputs``' keys): (0, "CUDA_SUCCESS", the 128 bytes), or the driver's / the binding's refusal. The
    array entries go in as cuuint64_t / cuuint32_t (cuda-python 13 takes no plain ints there); a rank-1 map gets
    ``Driver.rank1_strides``."""
    r = len(inp["dims"])
    gstrides = inp["gstrides"] if r != 1 else Driver.rank1_strides(inp)
    try:
        u64, u32 = d.cuuint64_t, d.cuuint32_t
        res = d.cuTensorMapEncodeTiled(
            d.CUtensorMapDataType(inp["dtype"]), r, inp["base"], [u64(x) for x in inp["dims"]],
            [u64(x) for x in gstrides], [u32(x) for x in inp["box"]], [u32(x) for x in inp["estrides"]],
            d.CUtensorMapInterleave(inp["interleave"]), d.CUtensorMapSwizzle(inp["swizzle"]),
            d.CUtensorMapL2promotion(inp["l2promo"]), d.CUtensorMapFloatOOBfill(inp["fill"]))
    except Exception as e:  # noqa: BLE001 -- the binding refused a value itself (range, rank): recorded
        return -1, f"binding: {type(e).__name__}: {e}", None
    err, tmap = res
    if int(err) != 0:
        return int(err), d.cuGetErrorName(err)[1].decode(), None
    words = [int(x) for x in tmap.opaque]
    return 0, "CUDA_SUCCESS", b"".join(w.to_bytes(8, "little") for w in words)


def _inputs(m: tm.TensorMap) -> dict:
    return {"base": m.base, "dtype": m.dtype, "dims": list(m.dims), "gstrides": list(m.gstrides), "box": list(m.box),
            "estrides": list(m.estrides), "interleave": m.interleave, "swizzle": m.swizzle, "l2promo": m.l2promo,
            "fill": m.fill}


def matrix(n_random: int, seed: int = 15) -> list[dict]:
    """The field-combination matrix: single-field sweeps from a valid base, random valid maps, documented errors."""
    rng = random.Random(seed)
    base = dict(base=0x7F0000000000, dtype=6, dims=[256, 64, 8, 4, 2], gstrides=[512, 32768, 262144, 1048576],
                box=[64, 16, 4, 2, 2], estrides=[1, 1, 1, 1, 1], interleave=0, swizzle=0, l2promo=0, fill=0)

    def rank(r: int, **kw) -> dict:
        x = {**base, "dims": base["dims"][:r], "gstrides": base["gstrides"][:r - 1], "box": base["box"][:r],
             "estrides": base["estrides"][:r]}
        x.update(kw)
        return x
    out: list[dict] = []
    for r in range(1, 6):
        out.append(rank(r))
        for dt in range(16):                                       # every dtype, packed ones included
            box0 = 128 if dt >= 13 else 16        # 16 elements: a multiple of 16 bytes for every modeled size
            out.append(rank(r, dtype=dt, box=[box0, *base["box"][1:r]]))
        for sw in range(7):
            out.append(rank(r, swizzle=sw, box=[16, *base["box"][1:r]]))
        for l2 in range(4):
            out.append(rank(r, l2promo=l2))
        out.append(rank(r, fill=1))
        for k in range(r):
            for es in range(1, 9):
                e = list(base["estrides"][:r])
                e[k] = es
                out.append(rank(r, estrides=e))
        if r >= 3:
            for il, sw in ((1, 0), (1, 1), (1, 3), (2, 1), (2, 0)):
                out.append(rank(r, interleave=il, swizzle=sw, box=[8, *base["box"][1:r]], dims=[8, *base["dims"][1:r]],
                                gstrides=[64, *base["gstrides"][1:r - 1]]))
    # documented error cases
    out += [rank(2, box=[64, 0]), rank(2, box=[64, 257]), rank(2, estrides=[1, 0]), rank(2, estrides=[1, 9]),
            rank(2, base=base["base"] + 8), rank(2, gstrides=[520]), rank(2, gstrides=[1 << 40]),
            rank(2, dims=[0, 64]), rank(2, dims=[(1 << 32) + 1, 64]), rank(2, box=[4, 16]),
            rank(2, swizzle=1, box=[64, 16]), rank(2, interleave=1), rank(3, interleave=2, swizzle=0),
            rank(2, dtype=0, fill=1), rank(2, dtype=13, box=[64, 16]), rank(2, dtype=14, dims=[100, 64]),
            {**rank(1), "dims": [], "gstrides": [], "box": [], "estrides": []},
            {**rank(5), "dims": [*base["dims"], 2], "gstrides": [*base["gstrides"], 1 << 22], "box": [*base["box"], 1],
             "estrides": [1] * 6}]
    # random valid maps (the test generator's rules)
    while n_random > 0:
        r = rng.randint(1, 5)
        dt = rng.randrange(13)
        e = tm.DTYPE_BYTES[dt]
        dims = [rng.randint(1, 5000) for _ in range(r)]
        box = [rng.randint(1, 256) for _ in range(r)]
        unit = 16 // math.gcd(16, e)
        box[0] = max(unit, box[0] // unit * unit)
        gs, acc = [], dims[0] * e
        for k in range(1, r):
            s = -(-acc // 16) * 16 + 16 * rng.choice([0, 1, 4])
            gs.append(s)
            acc = s * dims[k]
        sw = rng.choice([0, 0, 1, 2, 3, 4, 5, 6])
        if sw and box[0] * e > tm.SWIZZLE_SPAN[sw]:
            sw = 0
        x = dict(base=rng.randrange(0, 1 << 48) // 16 * 16, dtype=dt, dims=dims, gstrides=gs, box=box,
                 estrides=[rng.randint(1, 8) for _ in range(r)], interleave=0, swizzle=sw, l2promo=rng.randint(0, 3),
                 fill=rng.choice([0, 1]) if dt in tm.FLOAT_DTYPES else 0)
        if acc < 1 << 40:
            out.append(x)
            n_random -= 1
    return out


def _ours(inp: dict) -> tuple[str, bytes | None, tm.TensorMap | None]:
    try:
        m = tm.TensorMap(base=inp["base"], dtype=inp["dtype"], dims=tuple(inp["dims"]),
                         gstrides=tuple(inp["gstrides"]), box=tuple(inp["box"]), estrides=tuple(inp["estrides"]),
                         interleave=inp["interleave"], swizzle=inp["swizzle"], l2promo=inp["l2promo"],
                         fill=inp["fill"])
        return "OK", tm.encode(m), m
    except tm.TensorMapError as e:
        return e.reason, None, None


TMA_LOAD_KERNEL = REPO / "bench" / "src" / "tma_load_kernel.cu"
# its shared-memory layout (one definition: compiled into the kernel with -D, checked by copy_problems before every
# launch and against the kernel's PTX by tests/tma/test_tma_load_kernel.py): the mbarrier at the dynamic block's
# first byte, the box 1 KiB in (1024-byte aligned: any swizzle's pattern repeat; 128 without one)
TMA_MBAR_OFF, TMA_BOX_OFF = 0, 1024
TMA_SMEM_SLACK = 1024      # bytes allocated past the reserved region (a write beyond it stays in the CTA's memory)
PREFILL = 0xA5             # the kernel's byte in the reserved region before the copy
SMEM_OPTIN_MAX = 232448    # dynamic shared memory one block may opt in to on sm_90 (227 KiB)


def tma_load_defines() -> list[str]:
    return [f"-DTMA_MBAR_OFF={TMA_MBAR_OFF}", f"-DTMA_BOX_OFF={TMA_BOX_OFF}", f"-DTMA_PREFILL={PREFILL:#x}"]


DECODE_KERNEL = r"""
#include "hbf_tensormap.cuh"
extern "C" __global__ void k_decode(const uint64_t* d, hb_tmap* out, int* rc, unsigned n) {
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) rc[i] = hb_tmap_decode(d + 16 * i, out + i);
}
"""


def _compile_cubin(src: str, tmp: Path, name: str, extra: list[str] | None = None) -> bytes:
    (tmp / f"{name}.cu").write_text(src)
    subprocess.run([_tool("nvcc"), "-cubin", "-arch=sm_90a", "-std=c++17", *INC, *(extra or []),
                    str(tmp / f"{name}.cu"), "-o", str(tmp / f"{name}.cubin")], check=True, capture_output=True,
                   text=True)
    return (tmp / f"{name}.cubin").read_bytes()


def device_decode(drv: Driver, descs: list[bytes], tmp: Path) -> list[tuple[int, bytes]]:
    """hb_tmap_decode on the GPU: (rc, the hb_tmap bytes) per descriptor."""
    from runtime_cuda import cudrv  # noqa: PLC0415
    mod = cudrv.module_load_data(_compile_cubin(DECODE_KERNEL, tmp, "dec"))
    fn = cudrv.module_function(mod, "k_decode")
    n = len(descs)
    d_in, d_out, d_rc = cudrv.mem_alloc(128 * n), cudrv.mem_alloc(tm.HB_TMAP_SIZE * n), cudrv.mem_alloc(4 * n)
    buf = b"".join(descs)
    src = (ctypes.c_uint8 * len(buf)).from_buffer_copy(buf)        # kept referenced until the copy returns
    cudrv.htod(d_in, src, len(buf))
    back = (ctypes.c_uint8 * len(buf))()
    cudrv.dtoh(back, d_in, len(buf))
    if bytes(back) != buf:   # the 2026-12-05 disagreement was descriptor 0 read from freed host memory (cudrv.htod)
        bad = [i for i in range(n) if bytes(back)[128 * i:128 * i + 128] != descs[i]]
        raise SystemExit(f"device_decode: the input did not arrive intact: descriptors {bad[:10]} differ")
    cudrv.launch(fn, ((n + 127) // 128,), (128,), [ctypes.c_uint64(d_in), ctypes.c_uint64(d_out),
                                                   ctypes.c_uint64(d_rc), ctypes.c_uint32(n)])
    cudrv.ctx_synchronize()
    out = (ctypes.c_uint8 * (tm.HB_TMAP_SIZE * n))()
    rc = (ctypes.c_int32 * n)()
    cudrv.dtoh(out, d_out, tm.HB_TMAP_SIZE * n)
    cudrv.dtoh(rc, d_rc, 4 * n)
    for p in (d_in, d_out, d_rc):
        cudrv.mem_free(p)
    raw = bytes(out)
    return [(rc[i], raw[i * tm.HB_TMAP_SIZE:(i + 1) * tm.HB_TMAP_SIZE]) for i in range(n)]


def semantic_cases(rng: random.Random) -> list[tuple[tm.TensorMap, tuple[int, ...]]]:
    """Small tiles (box <= 16 KiB) over a 4 MiB buffer: 1D-5D, OOB before/after, elementStrides, swizzles, and a
    few interleaved maps (where the elementStride of dim 0 is honoured: inferred, this is its check). The innermost
    coordinate is a multiple of 16 bytes (tm.INNER_COORD_ALIGN): the 2026-12-05 generator drew any integer, and its
    first case (rank 1, bf16, c0 = -9: -18 B) is one the TMA unit faults on (ILLEGAL_INSTRUCTION at the first
    launch, twice on the H200)."""
    out = []
    while len(out) < 200:
        r = rng.randint(1, 5)
        dt = rng.choice([0, 1, 2, 4, 6, 7, 9])
        e = tm.DTYPE_BYTES[dt]
        dims = [rng.randint(1, 40) for _ in range(r)]
        box = [rng.randint(1, 32) for _ in range(r)]
        unit = 16 // math.gcd(16, e)
        box[0] = max(unit, box[0] // unit * unit)
        gs, acc = [], dims[0] * e
        for _ in range(1, r):
            s = -(-acc // 16) * 16 + 16 * rng.choice([0, 1])
            gs.append(s)
            acc = s * dims[len(gs)]
        sw = rng.choice([0, 0, 0, 1, 2, 3])
        if sw and box[0] * e > tm.SWIZZLE_SPAN[sw]:
            sw = 0
        il = 0
        if r >= 3 and rng.random() < 0.15:         # interleaved (NC/8HWC8-like): 16 B of dim 0 per chunk
            il, sw = 1, rng.choice([0, 1])
            dims[0] = box[0] = 16 // e if e <= 16 else 1
            gs = []
            acc = 16
            for k in range(1, r):
                gs.append(acc)
                acc *= dims[k]
        try:
            m = tm.TensorMap(base=0, dtype=dt, dims=tuple(dims), gstrides=tuple(gs), box=tuple(box),
                             estrides=tuple(rng.choice([1, 1, 2, 3]) for _ in range(r)), swizzle=sw, interleave=il)
            tm.check_rules(m)
        except tm.TensorMapError:
            continue
        if m.box_bytes > 16384 or m.extent > (4 << 20) - 4096:
            continue
        cu = tm.INNER_COORD_ALIGN // math.gcd(tm.INNER_COORD_ALIGN, e)      # elements per 16 B
        c0 = cu * rng.randint(-(-(-box[0] - 1) // cu), dims[0] // cu)
        c = (c0, *(rng.randint(-box[k] - 1, dims[k]) for k in range(1, r)))
        out.append((m, c))
    return out


def expected_smem(m: tm.TensorMap, c: tuple[int, ...], gmem: bytes) -> bytes:
    """The box in shared memory per the documented semantics, unswizzled: elements in traversal
    order (dim 0 fastest), an in-bounds element holds its global bytes, an OOB one zero (fill NONE)."""
    steps = [m._step(k) for k in range(m.rank)]
    counts = m.counts()
    e = m.elem_bytes
    out = bytearray()
    idx = [0] * m.rank
    for _ in range(math.prod(counts)):
        g = [c[k] + idx[k] * steps[k] for k in range(m.rank)]
        if all(0 <= g[k] < m.dims[k] for k in range(m.rank)):
            off = sum(g[k] * m.strides[k] for k in range(m.rank))
            out += gmem[off:off + e]
        else:
            out += bytes(e)
        k = 0
        while k < m.rank:
            idx[k] += 1
            if idx[k] < counts[k]:
                break
            idx[k] = 0
            k += 1
    return bytes(out)


def _check_arrived(m: tm.TensorMap, got: bytes, want: bytes, reserve: int) -> tuple[str, bool]:
    """Compare the reserved shared-memory region after a completed load with the model: byte for byte for a plain
    map (the box, then nothing written past it); for a swizzled or interleaved map (placement permuted) the region's
    elements as a multiset against the model's elements plus PREFILL elements for the bytes the box does not cover
    -- so the SAME global elements arrived and nothing else was written."""
    e = m.elem_bytes
    if not (m.swizzle or m.interleave):
        return "exact", got[:len(want)] == want and got[len(want):reserve] == bytes([PREFILL]) * (reserve - len(want))
    pad = bytes([PREFILL]) * (reserve - len(want))
    elems = sorted(got[i:i + e] for i in range(0, reserve - reserve % e, e))
    model = sorted((want + pad)[i:i + e] for i in range(0, reserve - reserve % e, e))
    return "multiset", elems == model


def wholly_outside(m: tm.TensorMap, c) -> bool:
    """The box lies wholly outside the tensor in some dimension (coordinate + box <= 0, or coordinate >= dim).
    On the H200 (2026-12-05, docs/RESULTS.md "Stop 37") every anomaly of the real loads was such a box in
    dimension 0: two barriers that completed with neither candidate count, one that completed with the
    descriptor's BOX_BYTES instead of the model's count, and the CUDA_ERROR_ILLEGAL_ADDRESS that ended the run
    (4 of the 9 boxes wholly outside in dimension 0 among the 49 cases that ran; all 3 whose coordinate was at or
    past the end, 1 of 6 that ended before 0)."""
    return any(ci + bi <= 0 or ci >= di for ci, bi, di in zip(c, m.box, m.dims))


def outside_candidates(m: tm.TensorMap) -> list[tuple[str, int]]:
    """The transaction counts a wholly-outside box is tried with, in order (each in its own launch): the model's
    count, the descriptor's BOX_BYTES, and the whole box's bytes (elementStrides ignored), duplicates dropped."""
    full = tm.DTYPE_BYTES[m.dtype]
    for b in m.box:
        full *= b
    out: list[tuple[str, int]] = []
    for name, n in (("model", m.box_bytes), ("descriptor", tm.desc_box_bytes(m)), ("full_box", full)):
        if n not in [v for _, v in out]:
            out.append((name, n))
    return out


def semantic_order(cases: list) -> list:
    """The cases with every box that lies wholly outside the tensor moved to the end (stable): such a box ended
    the 2026-12-05 run with a fault that loses the context, so the others (and the negative control) run first."""
    return [x for x in cases if not wholly_outside(*x)] + [x for x in cases if wholly_outside(*x)]


class TmaRig:
    """One context's setup for real TMA loads: the 4 MiB random global pattern (seeded), the case list, the test
    kernel (bench/src/tma_load_kernel.cu) and the output buffers. ``run_case`` loads one box with each count to try
    in its own launch, then checks the bytes that arrived. Used in-process for the boxes that lie in the tensor,
    and by ``tma-case`` children for the boxes wholly outside it (one child per case: a fault there loses only
    that child's context)."""

    def __init__(self, drv: Driver, tmp: Path, seed: int, cubin: bytes | None = None) -> None:
        from runtime_cuda import cudrv  # noqa: PLC0415
        self.cudrv, self.drv = cudrv, drv
        rng = random.Random(seed)
        nbytes = 4 << 20
        self.pattern = rng.randbytes(nbytes)
        self.cases = semantic_order(semantic_cases(rng))
        smem_need = [TMA_BOX_OFF + tm.smem_reserve(m) + TMA_SMEM_SLACK for m, _ in self.cases]
        self.smem_max = min(max(smem_need), SMEM_OPTIN_MAX)
        self.cubin = cubin or _compile_cubin(TMA_LOAD_KERNEL.read_text(), tmp, "tma", tma_load_defines())
        mod = cudrv.module_load_data(self.cubin)
        self.fn = cudrv.module_function(mod, "tma_load")
        cudrv.func_set_max_dynamic_shared(self.fn, self.smem_max)
        self.gbuf = cudrv.mem_alloc(nbytes + 4096)
        self.gbase = (self.gbuf + 1023) // 1024 * 1024
        src = (ctypes.c_uint8 * nbytes).from_buffer_copy(self.pattern)  # kept referenced until the copy returns
        cudrv.htod(self.gbase, src, nbytes)
        back = (ctypes.c_uint8 * 4096)()
        cudrv.dtoh(back, self.gbase, 4096)
        if bytes(back) != self.pattern[:4096]:
            raise SystemExit("tma_semantics: the global pattern did not arrive intact (host->device copy)")
        self.out_max = max(tm.smem_reserve(m) for m, _ in self.cases)
        self.d_out, self.d_st = cudrv.mem_alloc(self.out_max), cudrv.mem_alloc(8)

    def free(self) -> None:
        for p in (self.gbuf, self.d_out, self.d_st):
            self.cudrv.mem_free(p)

    def load(self, arg, rank: int, cc: list[int], expect: int, reserve: int, shared: int) -> int:
        """One launch; the kernel's status word: 1 the barrier completed, 2 it timed out."""
        cudrv = self.cudrv
        cudrv.launch(self.fn, (1,), (32,), [arg, ctypes.c_int32(rank), *[ctypes.c_int32(x) for x in cc],
                                            ctypes.c_uint32(expect), ctypes.c_uint32(reserve),
                                            ctypes.c_uint64(self.d_out), ctypes.c_uint64(self.d_st)], shared=shared)
        cudrv.ctx_synchronize()
        v = ctypes.c_uint64()
        cudrv.dtoh(v, self.d_st, 8)
        return v.value

    def prepare(self, m: tm.TensorMap, c) -> tuple[dict, str | None, tuple | None]:
        """(the case's record, why it is refused before launch or None, the launch arguments)."""
        mm = dataclasses.replace(m, base=self.gbase)
        reserve = tm.smem_reserve(mm)
        shared = TMA_BOX_OFF + reserve + TMA_SMEM_SLACK
        case = {"inputs": {**_inputs(mm), "base": "gbase"}, "coords": list(c), "model_count": mm.box_bytes,
                "descriptor_count": tm.desc_box_bytes(mm), "reserve": reserve}
        why = tm.copy_problems(mm, c, smem_offset=TMA_BOX_OFF, mbar_offset=TMA_MBAR_OFF,
                               smem_bytes=min(shared, self.smem_max))
        if why:
            return case, why, None
        arg = Tmap()
        ctypes.memmove(arg.b, self.drv.encode(mm), 128)
        return case, None, (mm, arg, list(c) + [0] * (5 - len(c)), reserve, shared)

    def run_case(self, m: tm.TensorMap, c, launch: tuple, rec: dict, flush=None) -> None:
        """Load the box with each count to try (in order, each in its own launch) until its barrier completes;
        fills ``rec`` (``tried``, ``completed_with``, ``values``, ``values_equal``). A fault raises (after
        ``flush``, so the record says which count was in flight)."""
        mm, arg, cc, reserve, shared = launch
        outside = wholly_outside(m, c)
        tries = outside_candidates(mm) if outside else \
            [("model", mm.box_bytes)] + ([("descriptor", tm.desc_box_bytes(mm))]
                                         if tm.desc_box_bytes(mm) != mm.box_bytes else [])
        rec["tries"] = [[k, v] for k, v in tries]
        rec.setdefault("tried", [])
        rec["completed_with"] = None
        for name, n in tries:
            rec["tried"].append(name)
            if flush is not None:
                flush()
            self.cudrv.memset_d8(self.d_out, 0, self.out_max)
            if self.load(arg, mm.rank, cc, n, reserve, shared) == 1:
                rec["completed_with"] = name
                break
        if rec["completed_with"] is None:
            return
        got = (ctypes.c_uint8 * reserve)()
        self.cudrv.dtoh(got, self.d_out, reserve)
        rec["values"], rec["values_equal"] = _check_arrived(mm, bytes(got), expected_smem(mm, c, self.pattern),
                                                            reserve)


class Tmap(ctypes.Structure):
    _fields_ = [("b", ctypes.c_uint8 * 128)]


def case_record(drv, tmp: Path, seed: int, cubin: bytes, index: int, progress=None) -> dict:
    """Case ``index`` of a fresh rig (the ``tma-case`` child's whole work): its record, with ``error`` set when the
    launch faulted."""
    rig = TmaRig(drv, tmp, seed, cubin)
    if not 0 <= index < len(rig.cases):
        raise SystemExit(f"tma-case: --index {index} is not a case of seed {seed} (0..{len(rig.cases) - 1})")
    m, c = rig.cases[index]
    case, why, launch = rig.prepare(m, c)
    rec: dict[str, Any] = {**case, "index": index}
    if why:
        rec["refused"] = why
        return rec
    try:
        rig.run_case(m, c, launch, rec, flush=progress and (lambda: progress(rec["tried"])))
    except Exception as e:  # noqa: BLE001 -- a fault: recorded, the context is lost with this process
        rec["error"] = f"{type(e).__name__}: {e}"
        return rec
    rig.free()
    return rec


def run_tma_case(args) -> None:
    """``tma-case``: one case in this process's own context; prints its progress and its record as JSON lines (the
    parent reads them; after a fault it goes on with the next case in a fresh child)."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    with tempfile.TemporaryDirectory() as td:
        rec = case_record(Driver(), Path(td), args.seed, Path(args.cubin).read_bytes(), args.index,
                          progress=lambda tried: print(json.dumps({"progress": tried}), flush=True))
    print(json.dumps({"record": rec}), flush=True)


def _case_in_child(index: int, seed: int, cubin: Path, timeout_s: float) -> dict:
    """Run case ``index`` in a ``tma-case`` child; its record, or what is known when it died or hung."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "tma-case", "--index", str(index), "--seed", str(seed),
           "--cubin", str(cubin)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        out, rc = r.stdout, r.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc, r = None, None
    tried: list = []
    for line in out.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if "record" in doc:
            return doc["record"]
        tried = doc.get("progress", tried)
    why = f"child timed out after {timeout_s:.0f} s" if rc is None else \
        f"child exited {rc}: {(r.stderr or '').strip()[-400:]}"
    return {"index": index, "tried": tried, "completed_with": None, "error": why}


def tma_semantics(drv: Driver, tmp: Path, seed: int, res: dict, flush) -> None:
    """Real tiled loads on the TMA unit, filling ``res`` as it goes (``flush()`` after every case: a fault leaves
    everything before it recorded). Every launch is first checked by tm.copy_problems against the kernel's
    shared-memory layout; a refused case is recorded, never launched. A load whose barrier does not complete with
    the model's count (cuda.h: ceil, elementStrides[0] ignored) is retried with the descriptor's BOX_BYTES word
    (floor, elementStrides[0] included): which count completes answers the floor-vs-ceil question. The boxes wholly
    outside the tensor (every anomaly of the 2026-12-05 run) come last, after the negative control, each in its own
    child process with the model's count, the descriptor's and the whole box's bytes tried in turn."""
    rig = TmaRig(drv, tmp, seed)
    cubin = tmp / "tma_load.cubin"
    cubin.write_bytes(rig.cubin)
    res.update({"cases": 0, "refused_before_launch": 0, "completed": 0, "completed_model_count": 0,
                "completed_descriptor_count": 0, "completed_full_box_count": 0, "timeouts": 0, "values_checked": 0,
                "values_equal": 0,
                "floor_ne_ceil_cases": 0, "negative_controls": 0, "negative_timed_out": 0, "failures": [],
                "refusals": [], "wholly_outside_cases": sum(wholly_outside(m, c) for m, c in rig.cases),
                "wholly_outside": [], "wholly_outside_faults": 0})
    negative = None

    def negative_control() -> bool:
        """One byte more than the count that completed must never complete, so completing with the model's count
        means the TMA moved exactly that many bytes. False when it faulted (the context is gone)."""
        if negative is None or res["negative_controls"]:
            return True
        res["negative_controls"] += 1
        try:
            res["negative_timed_out"] += rig.load(*negative) == 2
        except Exception as e:  # noqa: BLE001 -- recorded: the context is gone after this
            res["negative_error"] = f"{type(e).__name__}: {e}"
            flush()
            return False
        flush()
        return True

    from tqdm import tqdm  # noqa: PLC0415
    for index, (m, c) in enumerate(tqdm(rig.cases, desc="tma loads")):
        outside = wholly_outside(m, c)
        if outside and not negative_control():
            return
        case, why, launch = rig.prepare(m, c)
        if why:
            res["refused_before_launch"] += 1
            res["refusals"].append({**case, "why": why})
            continue
        res["cases"] += 1
        res["floor_ne_ceil_cases"] += case["model_count"] != case["descriptor_count"]
        if outside:
            rec = _case_in_child(index, seed, cubin, 60.0)
            rec = {**case, **rec}
            res["wholly_outside"].append(rec)
            if rec.get("error"):
                res["wholly_outside_faults"] += 1
                flush()
                continue
        else:
            rec = dict(case)
            try:
                rig.run_case(m, c, launch, rec)
            except Exception as e:  # noqa: BLE001 -- a fault loses the context: record the case that caused it, stop
                res["error"] = {**case, "error": f"{type(e).__name__}: {e}"}
                flush()
                return
        used = rec["completed_with"]
        if used is None:
            res["timeouts"] += 1
            res["failures"].append({**case, "why": "barrier completed with none of the counts tried (" +
                                    ", ".join(f"{k} {v}" for k, v in rec["tries"]) + ")"})
            flush()
            continue
        res["completed"] += 1
        res[f"completed_{used}_count"] += 1
        if used != "model":
            res["failures"].append({**case, "why": f"completed with the {used} count, not the model's"})
        res["values_checked"] += 1
        res[f"checked_{rec['values']}"] = res.get(f"checked_{rec['values']}", 0) + 1
        if rec["values_equal"]:
            res["values_equal"] += 1
        else:
            res["failures"].append({**case, "why": f"shared-memory bytes differ from the model ({rec['values']})"})
        if negative is None and used == "model" and not outside:
            mm, arg, cc, reserve, shared = launch
            negative = (arg, mm.rank, cc, mm.box_bytes + 1, reserve, shared)
        flush()
    res["failures"] = res["failures"][:20]
    res["refusals"] = res["refusals"][:20]
    if not negative_control():          # (no wholly-outside case came: the control runs here)
        return
    rig.free()
    flush()


def allocation_dependence(drv: Driver, layout: dict) -> dict:
    """Does the driver write bits that depend on the ALLOCATION behind globalAddress, not only on the encode inputs?
    (NVIDIA's 595.71.05 driver notes describe such a bit on Blackwell -- qword 1 bit 21, set for allocations under
    128 KiB that are not dense non-overlapping tensors -- "specific to Blackwell's tensor map descriptor layout".)
    The same maps are encoded at a real small allocation, a real large one, and an unallocated address; bits that
    differ outside the address field are reported."""
    from runtime_cuda import cudrv  # noqa: PLC0415
    lo = layout.get("ADDR", {}).get("lo")
    addr_bits = set(range(lo, lo + 64)) if lo is not None else set()
    small, large = cudrv.mem_alloc(64 << 10), cudrv.mem_alloc(8 << 20)
    fake = 0x7E0000000000
    maps = [tm.TensorMap(base=0, dtype=6, dims=(64, 64), gstrides=(128,), box=(64, 8), estrides=(1, 1)),
            tm.TensorMap(base=0, dtype=6, dims=(64, 64), gstrides=(256,), box=(64, 8), estrides=(1, 1)),   # padded
            tm.TensorMap(base=0, dtype=7, dims=(16, 16, 16), gstrides=(64, 64), box=(16, 4, 4), estrides=(1, 1, 1))]
    out = {"cases": [], "bits_outside_address": []}
    extra: set[int] = set()
    for m in maps:
        encs = {}
        for name, base in (("small_alloc", small), ("large_alloc", large), ("unallocated", fake)):
            try:
                encs[name] = drv.encode(tm.TensorMap(**{**_inputs(m), "base": base, "dims": m.dims,
                                                        "gstrides": m.gstrides, "box": m.box, "estrides": m.estrides}))
            except tm.TensorMapError as e:
                encs[name] = None
                out["cases"].append({"map": _inputs(m), "where": name, "refused": str(e)})
        # the reference: the unallocated address where the driver takes one, else the large allocation
        rname = "unallocated" if encs.get("unallocated") is not None else "large_alloc"
        ref = encs.get(rname)
        for name, enc in encs.items():
            if enc is None or ref is None or name == rname:
                continue
            d = tm._diff_bits(ref, enc) - addr_bits
            extra |= d
            out["cases"].append({"map": _inputs(m), "where": name, "bits_outside_address": sorted(d)})
    out["bits_outside_address"] = sorted(extra)
    for p in (small, large):
        cudrv.mem_free(p)
    return out


def im2col_probe(drv: Driver) -> dict:
    """Which bits mark an im2col map? The r1 fixture holds tiled maps only, so hb_tmap_decode treats every descriptor
    as tiled and refuses an im2col one only if it sets a bit outside the tiled fields (RESERVED). A few im2col maps
    (ranks 3-5, fp16) are encoded with cuTensorMapEncodeIm2col; per map: the bits it sets that no tiled field holds,
    and decode()'s verdict. decode_accepted > 0 means decode would take an im2col map for a tiled one: fail open."""
    d = drv.d
    u64, u32 = d.cuuint64_t, d.cuuint32_t
    out: dict[str, Any] = {"cases": [], "decode_accepted": 0}
    for rank in (3, 4, 5):
        dims = [64, 16, 16, 4, 2][:rank]
        gs, acc = [], dims[0] * 2
        for k in range(1, rank):
            gs.append(acc)
            acc *= dims[k]
        case: dict[str, Any] = {"rank": rank, "dims": dims, "gstrides": gs}
        try:
            err, tmap = d.cuTensorMapEncodeIm2col(
                d.CUtensorMapDataType(6), rank, tm.BASELINE_BASE, [u64(x) for x in dims], [u64(x) for x in gs],
                [-1] * (rank - 2), [1] * (rank - 2), 64, 32, [u32(1)] * rank, d.CUtensorMapInterleave(0),
                d.CUtensorMapSwizzle(0), d.CUtensorMapL2promotion(0), d.CUtensorMapFloatOOBfill(0))
        except Exception as e:  # noqa: BLE001 -- the binding refused the call: recorded
            case["error"] = f"binding: {type(e).__name__}: {e}"
            out["cases"].append(case)
            continue
        if int(err) != 0:
            case["error"] = d.cuGetErrorName(err)[1].decode()
            out["cases"].append(case)
            continue
        raw = b"".join(int(x).to_bytes(8, "little") for x in tmap.opaque)
        n = int.from_bytes(raw, "little")
        case["bytes"] = raw.hex()
        case["bits_outside_tiled_fields"] = [b for b in range(1024) if (n & tm.RESERVED_MASK) >> b & 1]
        try:
            tm.decode(raw)
            case["decode"] = "OK"
            out["decode_accepted"] += 1
        except tm.TensorMapError as e:
            case["decode"] = e.reason
        out["cases"].append(case)
    return out


def run_gpu(args) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    drv = Driver()
    summary: dict[str, Any] = {**_stamp(), "card": drv.name, "api": drv.api}
    enc_path = Path(args.encodings)
    records: list[dict] = []

    def flush() -> None:
        doc = {**_stamp(), "card": drv.name, "records": records}
        atomic_write_bytes(enc_path, gzip.compress(json.dumps(doc).encode()))

    from tqdm import tqdm  # noqa: PLC0415
    from runtime_cuda import cudrv  # noqa: PLC0415
    # Does the driver take a global address that no allocation holds? (The first H200 run, 2026-12-05, found the
    # baseline at 0x7F0000000000 refused with CUDA_ERROR_INVALID_VALUE.) If not, every probe is moved into one
    # real allocation: 1.5 GiB with a 512 MiB-aligned base inside, so address probes of bits 4..28 stay in it.
    arena = cudrv.mem_alloc(3 << 29)
    real = (arena + (1 << 29) - 1) >> 29 << 29
    accept = {}
    for nm, b in (("unallocated_0x7F0000000000", tm.BASELINE_BASE), ("null", 0), ("allocation", real)):
        rc, name, _ = drv.encode_raw(_inputs(tm._baseline(base=b)))
        accept[nm] = name
    rebase = accept["unallocated_0x7F0000000000"] != "CUDA_SUCCESS" and accept["allocation"] == "CUDA_SUCCESS"
    summary["driver_address_check"] = {"baseline_encode": accept, "probes_moved_into_allocation": rebase,
                                       "allocation": hex(real) if rebase else None}
    atomic_write_json(args.out, summary)
    logging.info("driver address check: %s", summary["driver_address_check"])
    if args.semantics_only:
        with tempfile.TemporaryDirectory() as td:
            summary["tma_semantics"] = {}
            tma_semantics(drv, Path(td), 15, summary["tma_semantics"], lambda: atomic_write_json(args.out, summary))
        atomic_write_json(args.out, summary)
        cudrv.mem_free(arena)
        print(json.dumps(summary["tma_semantics"], indent=1))
        return
    cases = matrix(args.random)
    if rebase:
        cases = [{**c, "base": real + (c["base"] % (1 << 28))} for c in cases]
    counts = {"driver_ok": 0, "driver_refused": 0, "ours_agree_accept": 0, "packed_not_modeled": 0,
              "ours_refuse_driver_accepts": 0, "ours_accept_driver_refuses": 0, "encode_equal": 0, "decode_equal": 0}
    for i, inp in enumerate(tqdm(cases, desc="cuTensorMapEncodeTiled")):
        rc, name, raw = drv.encode_raw(inp)
        reason, ours, m = _ours(inp)
        rec = {"inputs": inp, "driver_rc": rc, "driver_err": name, "bytes": raw.hex() if raw else None,
               "ours": reason}
        if len(inp["dims"]) == 1:
            rec["rank1_strides_passed"] = drv.rank1_strides(inp)
        if rc == 0:
            counts["driver_ok"] += 1
            if reason == "PACKED":
                counts["packed_not_modeled"] += 1
            elif ours is None:
                counts["ours_refuse_driver_accepts"] += 1
            else:
                counts["ours_agree_accept"] += 1
                rec["encode_equal"] = ours == raw
                counts["encode_equal"] += ours == raw
                try:
                    rec["decode_equal"] = tm.decode(raw) == m
                except tm.TensorMapError as e:
                    rec["decode_equal"] = False
                    rec["decode_error"] = e.reason
                counts["decode_equal"] += rec["decode_equal"]
        else:
            counts["driver_refused"] += 1
            counts["ours_accept_driver_refuses"] += ours is not None
        records.append(rec)
        if i % 200 == 199:
            flush()
    flush()
    summary["encodings"] = {"file": str(enc_path.relative_to(REPO)) if enc_path.is_relative_to(REPO) else str(enc_path),
                            "cases": len(records), **counts}
    atomic_write_json(args.out, summary)
    logging.info("matrix: %s", summary["encodings"])
    layout = tm.discover_layout(drv.encode, base_address=real if rebase else tm.BASELINE_BASE)
    summary["layout"] = {k: {kk: v[kk] for kk in ("lo", "agrees", "probes", "bits", "stored") if kk in v}
                         for k, v in layout.items()}
    summary["fields_confirmed"] = sorted(k for k, v in layout.items() if v["agrees"])
    summary["fields_mismatched"] = sorted(k for k, v in layout.items() if not v["agrees"])
    atomic_write_json(args.out, summary)
    summary["allocation_dependence"] = allocation_dependence(drv, layout)
    atomic_write_json(args.out, summary)
    summary["im2col_probe"] = im2col_probe(drv)
    atomic_write_json(args.out, summary)
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        ok = [bytes.fromhex(r["bytes"]) for r in records if r["bytes"]]
        dev = device_decode(drv, ok, tmp)
        agree, dis = 0, []
        for i, (d, (rc, raw)) in enumerate(zip(ok, dev)):
            try:
                py = (0, tm.c_struct(tm.decode(d)))
            except tm.TensorMapError as e:
                py = (tm.E_CODES[e.reason][0], None)
            same = rc == py[0] and (rc != 0 or raw == py[1])
            agree += same
            if not same:
                dis.append({"index": i, "bytes": d.hex(), "device_rc": rc, "python_rc": py[0]})
        summary["device_decode"] = {"descriptors": len(ok), "agree_with_python": agree, "disagree": dis[:5]}
        atomic_write_json(args.out, summary)
        summary["tma_semantics"] = {}
        tma_semantics(drv, tmp, 15, summary["tma_semantics"], lambda: atomic_write_json(args.out, summary))
    atomic_write_json(args.out, summary)
    cudrv.mem_free(arena)
    print(json.dumps({k: v for k, v in summary.items() if k != "layout"}, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cpu", help="ptxas resources and host cost (CPU only)")
    c.add_argument("--out", default=str(RESULTS / "tma_tensormap_cpu.json"))
    c.add_argument("--reps", type=int, default=9)
    c.add_argument("--iters", type=int, default=20000)
    g = sub.add_parser("gpu", help="validation against the real driver and TMA unit (needs the H200)")
    g.add_argument("--out", default=str(RESULTS / "tma_tensormap_gpu.json"))
    g.add_argument("--encodings", default=str(RESULTS / "tma_tensormap_encodings.json.gz"))
    g.add_argument("--random", type=int, default=3000)
    g.add_argument("--semantics-only", action="store_true",
                   help="only step 5 (real TMA loads): the encodings, layout and device decode steps are skipped")
    t = sub.add_parser("tma-case", help="(internal) one case of step 5 in its own process")
    t.add_argument("--index", type=int, required=True)
    t.add_argument("--seed", type=int, default=15)
    t.add_argument("--cubin", required=True)
    a = ap.parse_args()
    {"cpu": run_cpu, "gpu": run_gpu, "tma-case": run_tma_case}[a.cmd](a)


if __name__ == "__main__":
    main()
