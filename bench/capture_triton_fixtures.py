#!/usr/bin/env python3
"""Capture the PTX of a varied set of Triton 3.6 kernels (plus torch.compile/inductor kernels) as
fixtures for the hbfcc PTX front end (tests/fixtures/triton/).

Two modes:
  --mode gpu  (on the H200): every kernel is really launched with torch tensors, so Triton specialises
              it the way real programs do (16-byte divisibility -> vector loads, host TMA descriptors,
              device descriptors with an allocator); then torch.compile runs a few small models and
              every PTX the inductor produced is collected from the Triton cache.
  --mode cpu  (no GPU): each kernel that has a signature is compiled with triton.compile for
              GPUTarget("cuda", 90, 32); host-descriptor and inductor kernels are skipped.

Output: OUT_DIR/<name>.ptx for every kernel and OUT_DIR/manifest.json (name, what it exercises,
mode, lines, errors). With --ptxas-timing, the manifest also records the time the real ptxas
(CUDA 13, -arch=sm_90a) takes on each captured PTX (median of 3), as the baseline for the rewrite
speed goal.

Usage on the device:   python3 bench/capture_triton_fixtures.py --mode gpu --out $OUT/ptx --ptxas-timing
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

CASES: list[dict] = []


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("gpu", "cpu"), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ptxas-timing", action="store_true")
    ap.add_argument("--deadline-s", type=float, default=230.0, help="stop starting new work after this")
    ap.add_argument("--only", default="", help="comma list of case names")
    ap.add_argument("--child-from", type=int, default=-1, help=argparse.SUPPRESS)
    ap.add_argument("--t0", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.child_from >= 0:
        return _child(args)
    # Parent: run the cases in a child process; a compiler abort (MLIR assertion) kills only the
    # child, which is restarted after the case that crashed.
    t0 = time.time()
    cache = tempfile.mkdtemp(prefix="hbf_tcache_")
    os.environ["TRITON_CACHE_DIR"] = cache
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, "inductor")
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    real_ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
    if args.mode == "gpu" and os.path.exists(real_ptxas):
        # Compile with the CUDA 13 ptxas (PTX 9.0), as an hbfcc-ptxas wrapper would present it.
        os.environ["TRITON_PTXAS_PATH"] = real_ptxas
    prog = os.path.join(args.out, "progress.jsonl")
    start = 0
    while True:
        argv = [sys.executable, os.path.abspath(__file__), "--mode", args.mode, "--out", args.out,
                "--deadline-s", str(args.deadline_s), "--only", args.only, "--child-from", str(start),
                "--t0", str(t0)]
        rc = subprocess.run(argv).returncode
        events = _read_progress(prog)
        if any(e.get("finished") for e in events):
            break
        started = [e["start"] for e in events if "start" in e]
        last = max(started) if started else start
        with open(prog, "a") as f:
            f.write(json.dumps({"crash": last, "rc": rc}) + "\n")
        start = last + 1
        if time.time() - t0 > args.deadline_s:
            break
    events = _read_progress(prog)
    manifest = {"mode": args.mode, "kernels": [e["kernel"] for e in events if "kernel" in e],
                "errors": [e["error"] for e in events if "error" in e],
                "crashes": [e for e in events if "crash" in e]}
    for e in events:
        if "triton" in e:
            manifest["triton"] = e["triton"]
    if args.ptxas_timing and os.path.exists(real_ptxas):
        _ptxas_timing(args.out, real_ptxas, manifest, t0, args.deadline_s + 40)
    manifest["elapsed_s"] = round(time.time() - t0, 2)
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    os.remove(prog)
    print(f"[capture] {len(manifest['kernels'])} kernels, {len(manifest['errors'])} errors, "
          f"{len(manifest['crashes'])} crashes, {manifest['elapsed_s']} s", flush=True)
    return 0


def _read_progress(path):
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    return out


def _child(args) -> int:
    import triton
    prog = os.path.join(args.out, "progress.jsonl")

    def emit(ev):
        with open(prog, "a") as f:
            f.write(json.dumps(ev) + "\n")
            f.flush()
            os.fsync(f.fileno())

    emit({"triton": triton.__version__})
    _define_cases()
    only = set(filter(None, args.only.split(",")))
    for idx, c in enumerate(CASES):
        if idx < args.child_from or (only and c["name"] not in only):
            continue
        if time.time() - args.t0 > args.deadline_s:
            emit({"error": {"name": c["name"], "error": "deadline"}})
            continue
        if args.mode == "cpu" and (c["gpu_only"] or c["sig"] is None):
            continue
        emit({"start": idx, "name": c["name"]})
        try:
            if args.mode == "gpu":
                k = c["launch"]()
                ptx = k.asm["ptx"]
            else:
                ptx = _cpu_compile(c)
            emit({"kernel": _save(args.out, c["name"], ptx, c["what"])})
        except Exception as e:  # keep going: one bad case must not lose the rest
            emit({"error": {"name": c["name"], "error": f"{type(e).__name__}: {e}"[:2000],
                            "tb": traceback.format_exc()[-3000:]}})
            print(f"[capture] {c['name']}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
    if args.mode == "gpu" and not only and time.time() - args.t0 < args.deadline_s:
        emit({"start": len(CASES), "name": "inductor"})
        try:
            for k in _inductor(args.out, os.environ["TRITON_CACHE_DIR"], args.t0, args.deadline_s):
                emit({"kernel": k})
        except Exception as e:
            emit({"error": {"name": "inductor", "error": f"{type(e).__name__}: {e}"[:2000],
                            "tb": traceback.format_exc()[-3000:]}})
    emit({"finished": True})
    return 0


def _save(out, name, ptx, what):
    path = os.path.join(out, f"{name}.ptx")
    with open(path, "w") as f:
        f.write(ptx)
    print(f"[capture] {name}: {ptx.count(chr(10))} lines", flush=True)
    return {"name": name, "what": what, "lines": ptx.count("\n"), "bytes": len(ptx)}


def _cpu_compile(c):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    sig = dict(c["sig"])
    for k in c["const"]:
        sig[k] = "constexpr"
    src = ASTSource(fn=c["fn"], signature=sig, constexprs=dict(c["const"]))
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                       options={k: v for k, v in c.get("opts", {}).items()})
    return k.asm["ptx"]


def _inductor(out, cache, t0, deadline):
    import torch
    import torch.nn.functional as F
    before = set(glob.glob(os.path.join(cache, "**", "*.ptx"), recursive=True))
    dev = "cuda"

    def m1(x, w, b):           # pointwise + reductions + layer norm
        y = F.layer_norm(x, (x.shape[-1],), w, b)
        return F.gelu(y) * torch.sigmoid(y).sum(-1, keepdim=True)

    def m2(x):                 # softmax, var_mean, cumsum
        s = torch.softmax(x, -1)
        v, m = torch.var_mean(x, dim=0)
        return s.cumsum(-1) + v + m

    def m3(src, idx, n: int):  # scatter-add -> atomic_add, index/gather
        out_ = torch.zeros(n, 64, device=src.device, dtype=src.dtype)
        out_.index_add_(0, idx, src)
        return out_[idx] * 2.0

    def m4(q, k, v):           # attention math decomposed by inductor (+ bmm via cuBLAS)
        a = (q @ k.transpose(-1, -2)) / 8.0
        return torch.softmax(a, -1) @ v

    x = torch.randn(256, 512, device=dev)
    w = torch.randn(512, device=dev)
    b = torch.randn(512, device=dev)
    torch.compile(m1)(x, w, b)
    if time.time() - t0 < deadline:
        torch.compile(m2)(torch.randn(384, 1000, device=dev))
    if time.time() - t0 < deadline:
        src = torch.randn(4096, 64, device=dev)
        idx = torch.randint(0, 300, (4096,), device=dev)
        torch.compile(m3)(src, idx, 300)
    if time.time() - t0 < deadline:
        q = torch.randn(4, 8, 128, 64, device=dev, dtype=torch.float16)
        torch.compile(m4)(q, q.clone(), q.clone())
    torch.cuda.synchronize()
    after = sorted(set(glob.glob(os.path.join(cache, "**", "*.ptx"), recursive=True)) - before)
    ind = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")
    if ind:
        after += sorted(p for p in glob.glob(os.path.join(ind, "**", "*.ptx"), recursive=True)
                        if p not in before and p not in after)
    kernels = []
    for i, p in enumerate(after):
        base = os.path.splitext(os.path.basename(p))[0]
        with open(p) as f:
            ptx = f.read()
        kernels.append(_save(out, f"inductor_{i:02d}_{base}"[:80], ptx,
                             "torch.compile (inductor) generated kernel"))
    return kernels


def _ptxas_timing(out, ptxas, manifest, t0, deadline):
    ver = subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout.strip()
    rows = []
    for k in manifest["kernels"]:
        if time.time() - t0 > deadline:
            break
        p = os.path.join(out, k["name"] + ".ptx")
        ts = []
        ok = True
        for _ in range(3):
            s = time.perf_counter()
            r = subprocess.run([ptxas, "-arch=sm_90a", "-lineinfo", "-v", p, "-o", os.devnull],
                               capture_output=True, text=True)
            ts.append(time.perf_counter() - s)
            if r.returncode != 0:
                ok = False
                k["ptxas_error"] = r.stderr[-1000:]
                break
        rows.append({"name": k["name"], "ok": ok, "median_s": statistics.median(ts), "samples_s": ts})
    manifest["ptxas_timing"] = {"ptxas": ptxas, "version": ver, "argv": "-arch=sm_90a -lineinfo -v",
                                "rows": rows}


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------

def _define_cases():  # noqa: C901  (one flat list of kernels)
    import triton
    import triton.language as tl
    try:
        import torch
        dev = "cuda"
    except ImportError:      # cpu mode without torch: only signatures are used
        torch = None
        dev = None

    def T(*shape, dtype=None):
        return torch.randn(*shape, device=dev, dtype=dtype or torch.float32)

    def reg(fn, name, what, sig, const, launch, gpu_only=False, opts=None):
        CASES.append(dict(name=name, what=what, sig=sig, const=const, launch=launch, fn=fn,
                          gpu_only=gpu_only, opts=opts or {}))

    # ---------------- elementwise ----------------
    @triton.jit
    def add_kernel(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)

    def l_add():
        x, y = T(100000), T(100000)
        o = torch.empty_like(x)
        return add_kernel[(triton.cdiv(100000, 1024),)](x, y, o, 100000, BLOCK=1024)
    reg(add_kernel, "vector_add_f32", "masked fp32 elementwise add; vectorised (v4) predicated loads/stores",
        {"x_ptr": "*fp32", "y_ptr": "*fp32", "o_ptr": "*fp32", "n": "i32"}, {"BLOCK": 1024}, l_add)

    def l_add_f16():
        x, y = T(100003, dtype=torch.float16), T(100003, dtype=torch.float16)
        o = torch.empty_like(x)
        return add_kernel[(triton.cdiv(100003, 2048),)](x, y, o, 100003, BLOCK=2048)
    reg(add_kernel, "vector_add_f16_unaligned", "fp16 add with n not a multiple of 16 (scalar b16 loads)",
        {"x_ptr": "*fp16", "y_ptr": "*fp16", "o_ptr": "*fp16", "n": "i32"}, {"BLOCK": 2048}, l_add_f16)

    @triton.jit
    def math_kernel(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m, other=1.0).to(tl.float32)
        y = tl.exp(x) + tl.log(tl.abs(x) + 1.0) + tl.sqrt(tl.abs(x)) + tl.rsqrt(tl.abs(x) + 1e-3)
        y = y + tl.sin(x) * tl.cos(x) + tl.math.erf(x) + tl.sigmoid(x)
        y = tl.where(x > 0, y, -y)
        tl.store(o_ptr + offs, y.to(tl.bfloat16), mask=m)

    def l_math():
        x = T(65536, dtype=torch.bfloat16)
        o = torch.empty_like(x)
        return math_kernel[(64,)](x, o, 65536, BLOCK=1024)
    reg(math_kernel, "math_bf16", "bf16 in/out, libdevice math (exp/log/sqrt/erf/sin), f32 math on .b32 regs, selp",
        {"x_ptr": "*bf16", "o_ptr": "*bf16", "n": "i32"}, {"BLOCK": 1024}, l_math)

    @triton.jit
    def gelu_swiglu(a_ptr, b_ptr, o_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        a = tl.load(a_ptr + offs, mask=m, eviction_policy="evict_first").to(tl.float32)
        b = tl.load(b_ptr + offs, mask=m, eviction_policy="evict_last").to(tl.float32)
        g = 0.5 * a * (1 + tl.math.erf(a * 0.7071067811865476))
        s = b * tl.sigmoid(b)
        tl.store(o_ptr + offs, (g * s).to(tl.float16), mask=m, cache_modifier=".cs")
    def l_gs():
        a, b = T(1 << 20, dtype=torch.float16), T(1 << 20, dtype=torch.float16)
        o = torch.empty_like(a)
        return gelu_swiglu[(1024,)](a, b, o, 1 << 20, BLOCK=1024)
    reg(gelu_swiglu, "gelu_swiglu_evict", "eviction-policy hints (L1::evict_first/evict_last), .cs store",
        {"a_ptr": "*fp16", "b_ptr": "*fp16", "o_ptr": "*fp16", "n": "i32"}, {"BLOCK": 1024}, l_gs)

    @triton.jit
    def cache_mods(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        a = tl.load(x_ptr + offs, mask=m, cache_modifier=".cg")
        b = tl.load(x_ptr + n + offs, mask=m, cache_modifier=".ca")
        c = tl.load(x_ptr + 2 * n + offs, mask=m, volatile=True)
        tl.store(o_ptr + offs, a + b + c, mask=m, cache_modifier=".wt")
        tl.store(o_ptr + n + offs, a * b, mask=m, cache_modifier=".cg")
    def l_cm():
        x = T(3 * 8192)
        o = torch.empty(2 * 8192, device=dev)
        return cache_mods[(8,)](x, o, 8192, BLOCK=1024)
    reg(cache_mods, "cache_modifiers_volatile", ".cg/.ca loads, ld.volatile, .wt/.cg stores",
        {"x_ptr": "*fp32", "o_ptr": "*fp32", "n": "i32"}, {"BLOCK": 1024}, l_cm)

    @triton.jit
    def dropout_kernel(x_ptr, o_ptr, n, p, seed, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m)
        r = tl.rand(seed, offs)
        tl.store(o_ptr + offs, tl.where(r > p, x / (1 - p), 0.0), mask=m)
    def l_do():
        x = T(50000)
        o = torch.empty_like(x)
        return dropout_kernel[(triton.cdiv(50000, 1024),)](x, o, 50000, 0.5, 1234, BLOCK=1024)
    reg(dropout_kernel, "dropout_philox", "tl.rand (philox: long integer chains, mul.hi/xor), masked store",
        {"x_ptr": "*fp32", "o_ptr": "*fp32", "n": "i32", "p": "fp32", "seed": "i32"}, {"BLOCK": 1024}, l_do)

    @triton.jit
    def gather_kernel(tab_ptr, idx_ptr, o_ptr, n, D: tl.constexpr, BLOCK: tl.constexpr):
        rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = rows < n
        idx = tl.load(idx_ptr + rows, mask=m, other=0).to(tl.int64)
        cols = tl.arange(0, D)
        v = tl.load(tab_ptr + idx[:, None] * D + cols[None, :], mask=m[:, None])
        tl.store(o_ptr + rows[:, None] * D + cols[None, :], v, mask=m[:, None])
    def l_g():
        tab = T(1000, 64)
        idx = torch.randint(0, 1000, (3000,), device=dev)
        o = torch.empty(3000, 64, device=dev)
        return gather_kernel[(triton.cdiv(3000, 32),)](tab, idx, o, 3000, D=64, BLOCK=32)
    reg(gather_kernel, "embedding_gather", "indirect (data-dependent) 64-bit addresses, int64 index loads",
        {"tab_ptr": "*fp32", "idx_ptr": "*i64", "o_ptr": "*fp32", "n": "i32"}, {"D": 64, "BLOCK": 32}, l_g)

    @triton.jit
    def transpose_kernel(x_ptr, o_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
        pm, pn = tl.program_id(0), tl.program_id(1)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        m = (rm[:, None] < M) & (rn[None, :] < N)
        x = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=m)
        tl.store(o_ptr + rn[:, None] * M + rm[None, :], tl.trans(x), mask=tl.trans(m))
    def l_t():
        x = T(1000, 700)
        o = torch.empty(700, 1000, device=dev)
        return transpose_kernel[(triton.cdiv(1000, 64), triton.cdiv(700, 64))](x, o, 1000, 700, BM=64, BN=64)
    reg(transpose_kernel, "transpose_2d", "2-D grid, tl.trans through shared memory (st/ld.shared, bar.sync)",
        {"x_ptr": "*fp32", "o_ptr": "*fp32", "M": "i32", "N": "i32"}, {"BM": 64, "BN": 64}, l_t)

    # ---------------- reductions / norms ----------------
    @triton.jit
    def softmax_kernel(o_ptr, x_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        m = cols < n_cols
        x = tl.load(x_ptr + row * in_stride + cols, mask=m, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        e = tl.exp(x)
        tl.store(o_ptr + row * out_stride + cols, e / tl.sum(e, axis=0), mask=m)
    def l_sm():
        x = T(512, 781)
        o = torch.empty_like(x)
        return softmax_kernel[(512,)](o, x, x.stride(0), o.stride(0), 781, BLOCK=1024, num_warps=4)
    reg(softmax_kernel, "softmax_row", "row softmax: warp shuffles (shfl.sync.bfly), shared-memory reductions",
        {"o_ptr": "*fp32", "x_ptr": "*fp32", "in_stride": "i32", "out_stride": "i32", "n_cols": "i32"},
        {"BLOCK": 1024}, l_sm)

    @triton.jit
    def softmax_loop(o_ptr, x_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
        start = tl.program_id(0)
        step = tl.num_programs(0)
        for row in tl.range(start, n_rows, step, num_stages=3):
            cols = tl.arange(0, BLOCK)
            m = cols < n_cols
            x = tl.load(x_ptr + row * n_cols + cols, mask=m, other=-float("inf"))
            x = x - tl.max(x, axis=0)
            e = tl.exp(x)
            tl.store(o_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=m)
    def l_sml():
        x = T(1024, 256)
        o = torch.empty_like(x)
        return softmax_loop[(132,)](o, x, 1024, 256, BLOCK=256, num_warps=4)
    reg(softmax_loop, "softmax_persistent_pipelined", "persistent row loop with tl.range(num_stages=3): cp.async-pipelined row loads",
        {"o_ptr": "*fp32", "x_ptr": "*fp32", "n_rows": "i32", "n_cols": "i32"}, {"BLOCK": 256}, l_sml)

    @triton.jit
    def layernorm_fwd(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, stride, N, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        x_ptr += row * stride
        y_ptr += row * stride
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + cols, mask=cols < N, other=0.).to(tl.float32)
        mean = tl.sum(acc, axis=0) / N
        acc2 = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + cols, mask=cols < N, other=0.).to(tl.float32)
            x = tl.where(cols < N, x - mean, 0.)
            acc2 += x * x
        rstd = 1 / tl.sqrt(tl.sum(acc2, axis=0) / N + eps)
        tl.store(mean_ptr + row, mean)
        tl.store(rstd_ptr + row, rstd)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            m = cols < N
            w = tl.load(w_ptr + cols, mask=m)
            b = tl.load(b_ptr + cols, mask=m)
            x = tl.load(x_ptr + cols, mask=m, other=0.).to(tl.float32)
            tl.store(y_ptr + cols, ((x - mean) * rstd * w + b).to(tl.float16), mask=m)
    def l_ln():
        M, N = 256, 4000
        x = T(M, N, dtype=torch.float16)
        y = torch.empty_like(x)
        w, b = T(N), T(N)
        mean, rstd = torch.empty(M, device=dev), torch.empty(M, device=dev)
        return layernorm_fwd[(M,)](x, y, w, b, mean, rstd, x.stride(0), N, 1e-5, BLOCK=1024)
    reg(layernorm_fwd, "layernorm_fwd", "layer norm forward: three loops over a row, scalar stores of mean/rstd",
        {"x_ptr": "*fp16", "y_ptr": "*fp16", "w_ptr": "*fp32", "b_ptr": "*fp32", "mean_ptr": "*fp32",
         "rstd_ptr": "*fp32", "stride": "i32", "N": "i32", "eps": "fp32"}, {"BLOCK": 1024}, l_ln)

    @triton.jit
    def layernorm_bwd_dx_lock(dx_ptr, dy_ptr, dw_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, lock_ptr, stride, N,
                              GROUP: tl.constexpr, BLOCK: tl.constexpr):
        # the Triton tutorial's fused backward: partial dW accumulated under a spin lock
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        m = cols < N
        x = tl.load(x_ptr + row * stride + cols, mask=m, other=0).to(tl.float32)
        dy = tl.load(dy_ptr + row * stride + cols, mask=m, other=0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=m).to(tl.float32)
        mean = tl.load(mean_ptr + row)
        rstd = tl.load(rstd_ptr + row)
        xhat = tl.where(m, (x - mean) * rstd, 0.)
        wdy = tl.where(m, w * dy, 0.)
        c1 = tl.sum(xhat * wdy, axis=0) / N
        c2 = tl.sum(wdy, axis=0) / N
        tl.store(dx_ptr + row * stride + cols, ((wdy - (xhat * c1 + c2)) * rstd).to(tl.float16), mask=m)
        lock_id = row % GROUP
        lock_ptr += lock_id
        count_ptr = lock_ptr + GROUP
        dw_ptr += lock_id * N + cols
        while tl.atomic_cas(lock_ptr, 0, 1) == 1:
            pass
        count = tl.load(count_ptr)
        pdw = (dy * xhat).to(w.dtype)
        if count == 0:
            tl.atomic_xchg(count_ptr, 1)
        else:
            pdw += tl.load(dw_ptr, mask=m)
        tl.store(dw_ptr, pdw, mask=m)
        tl.debug_barrier()
        tl.atomic_xchg(lock_ptr, 0)
    def l_lnb():
        M, N, G = 128, 1000, 16
        x = T(M, N, dtype=torch.float16)
        dy = T(M, N, dtype=torch.float16)
        dx = torch.empty_like(x)
        w = T(N)
        dw = torch.zeros(G, N, device=dev)
        mean, rstd = T(M), torch.rand(M, device=dev)
        lock = torch.zeros(2 * G, dtype=torch.int32, device=dev)
        return layernorm_bwd_dx_lock[(M,)](dx, dy, dw, x, w, mean, rstd, lock, x.stride(0), N, GROUP=G, BLOCK=1024)
    reg(layernorm_bwd_dx_lock, "layernorm_bwd_spinlock", "spin-wait on a lock (atom.cas loop), atomic_xchg release, divergent branch",
        {"dx_ptr": "*fp16", "dy_ptr": "*fp16", "dw_ptr": "*fp32", "x_ptr": "*fp16", "w_ptr": "*fp32",
         "mean_ptr": "*fp32", "rstd_ptr": "*fp32", "lock_ptr": "*i32", "stride": "i32", "N": "i32"},
        {"GROUP": 16, "BLOCK": 1024}, l_lnb)

    @triton.jit
    def rmsnorm(x_ptr, w_ptr, o_ptr, N, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        m = cols < N
        x = tl.load(x_ptr + row * N + cols, mask=m, other=0.).to(tl.float32)
        r = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
        w = tl.load(w_ptr + cols, mask=m, other=0.)
        tl.store(o_ptr + row * N + cols, (x * r * w).to(tl.bfloat16), mask=m)
    def l_rms():
        x = T(300, 2048, dtype=torch.bfloat16)
        o = torch.empty_like(x)
        return rmsnorm[(300,)](x, T(2048), o, 2048, 1e-6, BLOCK=2048, num_warps=8)
    reg(rmsnorm, "rmsnorm_bf16", "RMS norm, int64 row offsets, 8 warps",
        {"x_ptr": "*bf16", "w_ptr": "*fp32", "o_ptr": "*bf16", "N": "i32", "eps": "fp32"}, {"BLOCK": 2048}, l_rms)

    @triton.jit
    def cross_entropy(logits_ptr, tgt_ptr, loss_ptr, V, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        base = logits_ptr + row * V
        mx = tl.full([BLOCK], -float("inf"), tl.float32)
        for off in range(0, V, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            mx = tl.maximum(mx, tl.load(base + cols, mask=cols < V, other=-float("inf")).to(tl.float32))
        m = tl.max(mx, 0)
        s = tl.zeros([BLOCK], tl.float32)
        for off in range(0, V, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            s += tl.exp(tl.load(base + cols, mask=cols < V, other=-float("inf")).to(tl.float32) - m)
        t = tl.load(tgt_ptr + row)
        xt = tl.load(base + t).to(tl.float32)
        tl.store(loss_ptr + row, tl.log(tl.sum(s, 0)) + m - xt)
    def l_ce():
        lg = T(64, 32000, dtype=torch.float16)
        t = torch.randint(0, 32000, (64,), device=dev)
        return cross_entropy[(64,)](lg, t, torch.empty(64, device=dev), 32000, BLOCK=2048)
    reg(cross_entropy, "cross_entropy", "two-pass online reduction loops, data-dependent scalar load",
        {"logits_ptr": "*fp16", "tgt_ptr": "*i64", "loss_ptr": "*fp32", "V": "i32"}, {"BLOCK": 2048}, l_ce)

    @triton.jit
    def argmax_kernel(x_ptr, o_ptr, N, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=-float("inf"))
        tl.store(o_ptr + row, tl.argmax(x, axis=0))
    def l_am():
        return argmax_kernel[(100,)](T(100, 500), torch.empty(100, dtype=torch.int32, device=dev), 500, BLOCK=512)
    reg(argmax_kernel, "argmax", "argmax reduction (index/value pair reduce)",
        {"x_ptr": "*fp32", "o_ptr": "*i32", "N": "i32"}, {"BLOCK": 512}, l_am)

    @triton.jit
    def cumsum_kernel(x_ptr, o_ptr, N, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0)
        tl.store(o_ptr + row * N + cols, tl.cumsum(x, axis=0), mask=cols < N)
    def l_cs():
        x = T(64, 1000)
        return cumsum_kernel[(64,)](x, torch.empty_like(x), 1000, BLOCK=1024)
    reg(cumsum_kernel, "cumsum_scan", "associative scan (tl.cumsum): shuffles up, shared-memory carries",
        {"x_ptr": "*fp32", "o_ptr": "*fp32", "N": "i32"}, {"BLOCK": 1024}, l_cs)

    @triton.jit
    def sort_kernel(x_ptr, o_ptr, N: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, N)
        x = tl.load(x_ptr + row * N + cols)
        tl.store(o_ptr + row * N + cols, tl.sort(x, 0, descending=True))
    def l_so():
        x = T(32, 256)
        return sort_kernel[(32,)](x, torch.empty_like(x), N=256)
    reg(sort_kernel, "bitonic_sort", "tl.sort: bitonic network, many selp/shfl",
        {"x_ptr": "*fp32", "o_ptr": "*fp32"}, {"N": 256}, l_so)

    @triton.jit
    def _combine(a, b):
        return a * b + a
    @triton.jit
    def custom_reduce(x_ptr, o_ptr, N, BLOCK: tl.constexpr):
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + tl.program_id(0) * N + cols, mask=cols < N, other=0.0)
        tl.store(o_ptr + tl.program_id(0), tl.reduce(x, 0, _combine))
    def l_cr():
        return custom_reduce[(16,)](T(16, 300), torch.empty(16, device=dev), 300, BLOCK=512)
    reg(custom_reduce, "custom_reduce", "tl.reduce with a user combine function",
        {"x_ptr": "*fp32", "o_ptr": "*fp32", "N": "i32"}, {"BLOCK": 512}, l_cr)

    # ---------------- atomics / flags ----------------
    @triton.jit
    def histogram_kernel(x_ptr, h_ptr, n, NB: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        v = tl.load(x_ptr + offs, mask=m, other=0)
        b = (v % NB).to(tl.int32)
        tl.atomic_add(h_ptr + b, 1, mask=m)
    def l_h():
        x = torch.randint(0, 1 << 20, (100000,), device=dev, dtype=torch.int32)
        return histogram_kernel[(triton.cdiv(100000, 1024),)](x, torch.zeros(64, dtype=torch.int32, device=dev), 100000, NB=64, BLOCK=1024)
    reg(histogram_kernel, "atomic_histogram", "scattered tl.atomic_add with unused result (Triton emits atom.global.gpu.acq_rel.add), predicated",
        {"x_ptr": "*i32", "h_ptr": "*i32", "n": "i32"}, {"NB": 64, "BLOCK": 1024}, l_h)

    @triton.jit
    def atomic_sum(x_ptr, o_ptr, cnt_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        s = tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.), 0)
        tl.atomic_add(o_ptr, s, sem="relaxed")
        old = tl.atomic_add(cnt_ptr, 1, sem="acq_rel", scope="gpu")
        if old == tl.num_programs(0) - 1:
            tl.store(o_ptr + 1, tl.load(o_ptr, volatile=True) / n)
    def l_as():
        return atomic_sum[(50,)](T(50 * 512), torch.zeros(2, device=dev), torch.zeros(1, dtype=torch.int32, device=dev), 50 * 512, BLOCK=512)
    reg(atomic_sum, "atomic_reduce_lastblock", "fp32 atom.global.gpu.relaxed.add, acq_rel counter atom, last-block pattern with ld.volatile",
        {"x_ptr": "*fp32", "o_ptr": "*fp32", "cnt_ptr": "*i32", "n": "i32"}, {"BLOCK": 512}, l_as)

    @triton.jit
    def atomic_variety(p_ptr, v_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        v = tl.load(v_ptr + offs, mask=m, other=0)
        z = tl.zeros([BLOCK], tl.int32)
        a = tl.atomic_max(p_ptr + z, v, mask=m, sem="acquire", scope="sys")
        b = tl.atomic_min(p_ptr + 1 + z, v, mask=m, sem="release", scope="cta")
        c = tl.atomic_xchg(p_ptr + 2 + offs % 4, v, mask=m)
        d = tl.atomic_or(p_ptr + 6 + z, v, mask=m)
        e = tl.atomic_and(p_ptr + 7 + z, v, mask=m, sem="relaxed")
        f = tl.atomic_xor(p_ptr + 8 + z, v, mask=m)
        tl.store(v_ptr + offs, a + b + c + d + e + f, mask=m)
    def l_av():
        return atomic_variety[(4,)](torch.zeros(16, dtype=torch.int32, device=dev),
                                    torch.randint(0, 100, (4096,), dtype=torch.int32, device=dev), 4096, BLOCK=1024)
    reg(atomic_variety, "atomic_variety_scopes", "atom max/min/exch/or/and/xor with .acquire.sys/.release.cta/.relaxed scopes",
        {"p_ptr": "*i32", "v_ptr": "*i32", "n": "i32"}, {"BLOCK": 1024}, l_av)

    @triton.jit
    def flag_wait_cas(flag_ptr, data_ptr, o_ptr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        if pid == 0:
            tl.store(data_ptr + offs, offs.to(tl.float32) * 2)
            tl.atomic_xchg(flag_ptr, 1, sem="release", scope="gpu")
        else:
            while tl.atomic_cas(flag_ptr, 1, 1, sem="acquire", scope="gpu") != 1:
                pass
            tl.store(o_ptr + (pid - 1) * BLOCK + offs, tl.load(data_ptr + offs))
    def l_fw():
        return flag_wait_cas[(3,)](torch.zeros(1, dtype=torch.int32, device=dev), torch.zeros(256, device=dev),
                                   torch.zeros(2 * 256, device=dev), BLOCK=256)
    reg(flag_wait_cas, "spin_wait_flag_cas", "producer/consumer: release xchg, spin-wait on a flag with atom.cas.acquire loop",
        {"flag_ptr": "*i32", "data_ptr": "*fp32", "o_ptr": "*fp32"}, {"BLOCK": 256}, l_fw)

    @triton.jit
    def flag_wait_asm(flag_ptr, o_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        f = tl.inline_asm_elementwise(
            asm="""{
            .reg .pred %p_done;
            waitLoop:
            ld.acquire.gpu.global.u32 $0, [$1];
            setp.ne.u32 %p_done, $0, 0;
            @!%p_done nanosleep.u32 20;
            @!%p_done bra.uni waitLoop;
            }""",
            constraints="=r,l",
            args=[flag_ptr + offs * 0],
            dtype=tl.int32, is_pure=False, pack=1)
        tl.store(o_ptr + offs, f)
    def l_fa():
        return flag_wait_asm[(1,)](torch.ones(1, dtype=torch.int32, device=dev),
                                   torch.zeros(128, dtype=torch.int32, device=dev), BLOCK=128, num_warps=4)
    reg(flag_wait_asm, "spin_wait_inline_asm", "inline-asm spin loop (ld.acquire.gpu + nanosleep) with the label waitLoop repeated per element block",
        {"flag_ptr": "*i32", "o_ptr": "*i32"}, {"BLOCK": 128}, l_fa)

    @triton.jit
    def inline_asm_misc(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m, other=0)
        y = tl.inline_asm_elementwise("shf.l.wrap.b32 $0, $1, $2, $3;", "=r,r,r,r",
                                      [x, x, offs], dtype=tl.int32, is_pure=True, pack=1)
        z = tl.inline_asm_elementwise("{ .reg .b32 t; mul.lo.u32 t, $1, 3; add.u32 $0, t, $1; }", "=r,r",
                                      [y], dtype=tl.int32, is_pure=True, pack=1)
        tl.store(o_ptr + offs, z, mask=m)
    def l_iam():
        x = torch.randint(0, 1000, (4096,), device=dev, dtype=torch.int32)
        return inline_asm_misc[(4,)](x, torch.empty_like(x), 4096, BLOCK=1024)
    reg(inline_asm_misc, "inline_asm_blocks", "inline asm with nested { .reg } scopes reusing the name t",
        {"x_ptr": "*i32", "o_ptr": "*i32", "n": "i32"}, {"BLOCK": 1024}, l_iam)

    # ---------------- matmul ----------------
    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                      ACT: tl.constexpr):
        pid = tl.program_id(0)
        npm = tl.cdiv(M, BM)
        npn = tl.cdiv(N, BN)
        width = GROUP_M * npn
        gid = pid // width
        first = gid * GROUP_M
        gsz = min(npm - first, GROUP_M)
        pm = first + (pid % gsz)
        pn = (pid % width) // gsz
        rm = (pm * BM + tl.arange(0, BM)) % M
        rn = (pn * BN + tl.arange(0, BN)) % N
        rk = tl.arange(0, BK)
        a_ptrs = a_ptr + rm[:, None] * sam + rk[None, :] * sak
        b_ptrs = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            a = tl.load(a_ptrs, mask=rk[None, :] < K - k * BK, other=0.0)
            b = tl.load(b_ptrs, mask=rk[:, None] < K - k * BK, other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BK * sak
            b_ptrs += BK * sbk
        if ACT == "leaky":
            acc = tl.where(acc >= 0, acc, 0.01 * acc)
        c = acc.to(c_ptr.dtype.element_ty)
        om = pm * BM + tl.arange(0, BM)
        on = pn * BN + tl.arange(0, BN)
        tl.store(c_ptr + om[:, None] * scm + on[None, :] * scn, c, mask=(om[:, None] < M) & (on[None, :] < N))

    def mm_launch(dt, BM, BN, BK, stages, warps, act="none", M=512, N=512, K=512):
        def f():
            a = T(M, K, dtype=dt)
            b = T(K, N, dtype=dt)
            c = torch.empty(M, N, device=dev, dtype=torch.float16 if dt != torch.float32 else torch.float32)
            grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
            return matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                       c.stride(0), c.stride(1), BM=BM, BN=BN, BK=BK, GROUP_M=8, ACT=act,
                                       num_stages=stages, num_warps=warps)
        return f
    mm_sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32",
              "sam": "i32", "sak": "i32", "sbk": "i32", "sbn": "i32", "scm": "i32", "scn": "i32"}
    reg(matmul_kernel, "matmul_f16_s3", "fp16 matmul, num_stages=3: cp.async pipeline (commit/wait_group) + wgmma",
        mm_sig, {"BM": 128, "BN": 128, "BK": 64, "GROUP_M": 8, "ACT": "none"},
        mm_launch(torch.float16 if torch else None, 128, 128, 64, 3, 8), opts={"num_stages": 3, "num_warps": 8})
    reg(matmul_kernel, "matmul_f16_s4_leaky", "fp16 matmul, num_stages=4, 4 warps, leaky-relu epilogue",
        mm_sig, {"BM": 64, "BN": 128, "BK": 32, "GROUP_M": 8, "ACT": "leaky"},
        mm_launch(torch.float16 if torch else None, 64, 128, 32, 4, 4, "leaky"), opts={"num_stages": 4, "num_warps": 4})
    reg(matmul_kernel, "matmul_f32_tf32_s3", "fp32 (tf32) matmul, num_stages=3",
        dict(mm_sig, a_ptr="*fp32", b_ptr="*fp32", c_ptr="*fp32"), {"BM": 64, "BN": 64, "BK": 32, "GROUP_M": 8, "ACT": "none"},
        mm_launch(torch.float32 if torch else None, 64, 64, 32, 3, 4), opts={"num_stages": 3, "num_warps": 4})
    reg(matmul_kernel, "matmul_bf16_s5_small", "bf16 matmul 32x32 tiles (mma.sync path), num_stages=5",
        dict(mm_sig, a_ptr="*bf16", b_ptr="*bf16"), {"BM": 32, "BN": 32, "BK": 32, "GROUP_M": 8, "ACT": "none"},
        mm_launch(torch.bfloat16 if torch else None, 32, 32, 32, 5, 2), opts={"num_stages": 5, "num_warps": 2})

    @triton.jit
    def matmul_fp8(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pm, pn = tl.program_id(0), tl.program_id(1)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), tl.float32)
        for k in tl.range(0, K, BK, num_stages=3):
            a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
            b = tl.load(b_ptr + rn[:, None] * K + (k + rk)[None, :])
            acc = tl.dot(a, tl.trans(b), acc)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))
    def l_f8():
        a = T(256, 256).to(torch.float8_e4m3fn)
        b = T(256, 256).to(torch.float8_e4m3fn)
        c = torch.empty(256, 256, device=dev, dtype=torch.bfloat16)
        return matmul_fp8[(2, 2)](a, b, c, 256, 256, 256, BM=128, BN=128, BK=64, num_warps=8)
    reg(matmul_fp8, "matmul_fp8_e4m3", "fp8 e4m3 x fp8 -> wgmma f32, tl.range pipelining",
        {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "c_ptr": "*bf16", "M": "i32", "N": "i32", "K": "i32"},
        {"BM": 128, "BN": 128, "BK": 64}, l_f8, opts={"num_warps": 8})

    @triton.jit
    def bmm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        bz = tl.program_id(2)
        a_ptr += bz * M * K
        b_ptr += bz * K * N
        c_ptr += bz * M * N
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=rm[:, None] < M, other=0.)
            b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=rn[None, :] < N, other=0.)
            acc += tl.dot(a, b)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))
    def l_bmm():
        B, M, N, K = 4, 200, 200, 128
        a, b = T(B, M, K, dtype=torch.float16), T(B, K, N, dtype=torch.float16)
        c = torch.empty(B, M, N, device=dev, dtype=torch.float16)
        return bmm_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64), B)](a, b, c, M, N, K, BM=64, BN=64, BK=32, num_stages=3)
    reg(bmm_kernel, "bmm_3d_grid", "batched matmul, 3-D grid, masked tiles, default pipelining",
        {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32"},
        {"BM": 64, "BN": 64, "BK": 32}, l_bmm)

    @triton.jit
    def int8_dot(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm = tl.arange(0, BM)
        rn = tl.arange(0, BN)
        rk = tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
        b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
        tl.store(c_ptr + rm[:, None] * BN + rn[None, :], tl.dot(a, b, out_dtype=tl.int32))
    def l_i8():
        a = torch.randint(-8, 8, (64, 64), dtype=torch.int8, device=dev)
        b = torch.randint(-8, 8, (64, 64), dtype=torch.int8, device=dev)
        return int8_dot[(1,)](a, b, torch.empty(64, 64, dtype=torch.int32, device=dev), BM=64, BN=64, BK=64)
    reg(int8_dot, "dot_int8", "int8 dot -> int32 (integer wgmma/mma), single tile",
        {"a_ptr": "*i8", "b_ptr": "*i8", "c_ptr": "*i32"}, {"BM": 64, "BN": 64, "BK": 64}, l_i8)

    # ---------------- attention ----------------
    @triton.jit
    def attn_fwd(Q, K, V, O, sm_scale, N_CTX, H: tl.constexpr, D: tl.constexpr,
                 BM: tl.constexpr, BN: tl.constexpr, CAUSAL: tl.constexpr):
        start_m = tl.program_id(0)
        off_hz = tl.program_id(1)
        base = off_hz.to(tl.int64) * N_CTX * D
        offs_m = start_m * BM + tl.arange(0, BM)
        offs_d = tl.arange(0, D)
        q = tl.load(Q + base + offs_m[:, None] * D + offs_d[None, :])
        m_i = tl.full([BM], -float("inf"), tl.float32)
        l_i = tl.full([BM], 1.0, tl.float32)
        acc = tl.zeros([BM, D], tl.float32)
        qk_scale = sm_scale * 1.44269504
        hi = (start_m + 1) * BM if CAUSAL else N_CTX
        for start_n in tl.range(0, hi, BN, num_stages=3):
            offs_n = start_n + tl.arange(0, BN)
            k = tl.load(K + base + offs_n[None, :] * D + offs_d[:, None])
            qk = tl.dot(q, k)
            if CAUSAL:
                qk = tl.where(offs_m[:, None] >= offs_n[None, :], qk, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
            p = tl.math.exp2(qk)
            alpha = tl.math.exp2(m_i - m_ij)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None]
            v = tl.load(V + base + offs_n[:, None] * D + offs_d[None, :])
            acc = tl.dot(p.to(tl.float16), v, acc)
            m_i = m_ij
        acc = acc / l_i[:, None]
        tl.store(O + base + offs_m[:, None] * D + offs_d[None, :], acc.to(tl.float16))
    def attn_launch(causal, D, BM, BN, warps):
        def f():
            Z, H, N = 2, 4, 512
            q = T(Z, H, N, D, dtype=torch.float16)
            k, v = T(Z, H, N, D, dtype=torch.float16), T(Z, H, N, D, dtype=torch.float16)
            o = torch.empty_like(q)
            return attn_fwd[(N // BM, Z * H)](q, k, v, o, 0.125, N, H=H, D=D, BM=BM, BN=BN, CAUSAL=causal,
                                              num_warps=warps)
        return f
    at_sig = {"Q": "*fp16", "K": "*fp16", "V": "*fp16", "O": "*fp16", "sm_scale": "fp32", "N_CTX": "i32"}
    reg(attn_fwd, "flash_attn_fwd_d64", "flash-attention forward, head dim 64, two dots per iteration, exp2, pipelined K/V",
        at_sig, {"H": 4, "D": 64, "BM": 128, "BN": 64, "CAUSAL": False}, attn_launch(False, 64, 128, 64, 8), opts={"num_warps": 8})
    reg(attn_fwd, "flash_attn_fwd_causal_d128", "flash-attention forward, causal mask, head dim 128",
        at_sig, {"H": 4, "D": 128, "BM": 64, "BN": 64, "CAUSAL": True}, attn_launch(True, 128, 64, 64, 4), opts={"num_warps": 4})

    # ---------------- TMA ----------------
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except Exception:  # pragma: no cover
        TensorDescriptor = None

    @triton.jit
    def tma_copy_host(in_desc, out_desc, BM: tl.constexpr, BN: tl.constexpr):
        pm, pn = tl.program_id(0), tl.program_id(1)
        x = in_desc.load([pm * BM, pn * BN])
        out_desc.store([pm * BM, pn * BN], x * 2.0)
    def l_tmah():
        x = T(256, 256)
        o = torch.empty_like(x)
        di = TensorDescriptor.from_tensor(x, [64, 64])
        do = TensorDescriptor.from_tensor(o, [64, 64])
        return tma_copy_host[(4, 4)](di, do, BM=64, BN=64)
    reg(tma_copy_host, "tma_host_desc_copy", "host TensorDescriptor: .param .align 64 .b8 [128] tensor maps, cp.async.bulk.tensor load+store, mbarrier try_wait loop (repeated waitLoop)",
        None, {}, l_tmah, gpu_only=True)

    @triton.jit
    def tma_matmul_host(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pm, pn = tl.program_id(0), tl.program_id(1)
        acc = tl.zeros((BM, BN), tl.float32)
        for k in tl.range(0, K, BK, num_stages=3):
            a = a_desc.load([pm * BM, k])
            b = b_desc.load([pn * BN, k])
            acc = tl.dot(a, b.T, acc)
        c_desc.store([pm * BM, pn * BN], acc.to(tl.float16))
    def l_tmam():
        M = N = K = 512
        a, b = T(M, K, dtype=torch.float16), T(N, K, dtype=torch.float16)
        c = torch.empty(M, N, device=dev, dtype=torch.float16)
        da = TensorDescriptor.from_tensor(a, [128, 64])
        db = TensorDescriptor.from_tensor(b, [128, 64])
        dc = TensorDescriptor.from_tensor(c, [128, 128])
        return tma_matmul_host[(4, 4)](da, db, dc, K, BM=128, BN=128, BK=64, num_warps=8)
    reg(tma_matmul_host, "tma_matmul_host_desc_s3", "matmul with host TMA descriptors, num_stages=3, mbarrier expect_tx, wgmma",
        None, {}, l_tmam, gpu_only=True)

    @triton.jit
    def tma_copy_device(x_ptr, o_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
        din = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        dout = tl.make_tensor_descriptor(o_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        pm, pn = tl.program_id(0), tl.program_id(1)
        v = din.load([pm * BM, pn * BN])
        dout.store([pm * BM, pn * BN], v + 1.0)
    def _alloc():
        def alloc_fn(size, alignment, stream):
            return torch.empty(size, device=dev, dtype=torch.int8)
        triton.set_allocator(alloc_fn)
    def l_tmad():
        _alloc()
        x = T(256, 256)
        return tma_copy_device[(4, 4)](x, torch.empty_like(x), 256, 256, BM=64, BN=64)
    reg(tma_copy_device, "tma_device_desc_copy", "device tl.make_tensor_descriptor: tensormap.replace, tensormap.cp_fenceproxy, fence.proxy.tensormap, TMA load/store",
        {"x_ptr": "*fp32", "o_ptr": "*fp32", "M": "i32", "N": "i32"}, {"BM": 64, "BN": 64}, l_tmad)

    @triton.jit
    def tma_matmul_device(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        da = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
        db = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
        dc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        pm, pn = tl.program_id(0), tl.program_id(1)
        acc = tl.zeros((BM, BN), tl.float32)
        for k in tl.range(0, K, BK, num_stages=4):
            acc = tl.dot(da.load([pm * BM, k]), db.load([pn * BN, k]).T, acc)
        dc.store([pm * BM, pn * BN], acc.to(tl.float16))
    def l_tmamd():
        _alloc()
        a, b = T(512, 512, dtype=torch.float16), T(512, 512, dtype=torch.float16)
        c = torch.empty(512, 512, device=dev, dtype=torch.float16)
        return tma_matmul_device[(4, 4)](a, b, c, 512, 512, 512, BM=128, BN=128, BK=64, num_warps=8)
    reg(tma_matmul_device, "tma_matmul_device_desc_s4", "matmul with device-built TMA descriptors, num_stages=4",
        {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32"},
        {"BM": 128, "BN": 128, "BK": 64}, l_tmamd, opts={"num_warps": 8})

    # ---------------- control flow ----------------
    @triton.jit
    def while_loop(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        v = tl.load(x_ptr + pid)
        i = 0
        while v > 1:
            v = tl.where(v % 2 == 0, v // 2, 3 * v + 1)
            i += 1
        offs = tl.arange(0, BLOCK)
        tl.store(o_ptr + pid * BLOCK + offs, i + offs, mask=offs < n)
    def l_wl():
        x = torch.randint(1, 1000, (64,), device=dev, dtype=torch.int32)
        return while_loop[(64,)](x, torch.empty(64 * 128, dtype=torch.int32, device=dev), 100, BLOCK=128)
    reg(while_loop, "while_collatz", "data-dependent while loop (uniform back edge), predicated stores",
        {"x_ptr": "*i32", "o_ptr": "*i32", "n": "i32"}, {"BLOCK": 128}, l_wl)

    @triton.jit
    def branchy(x_ptr, o_ptr, mode, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m)
        if mode == 0:
            y = x * 2
        elif mode == 1:
            y = tl.load(x_ptr + n - 1 - offs, mask=m) + x
        else:
            y = -x
        if tl.program_id(0) % 2 == 0:
            tl.store(o_ptr + offs, y, mask=m)
        else:
            tl.store(o_ptr + offs, y + 1, mask=m)
    def l_br():
        x = T(8192)
        return branchy[(8,)](x, torch.empty_like(x), 1, 8192, BLOCK=1024)
    reg(branchy, "branches_scalar_if", "scalar if/elif/else chains and a diamond around stores",
        {"x_ptr": "*fp32", "o_ptr": "*fp32", "mode": "i32", "n": "i32"}, {"BLOCK": 1024}, l_br)

    @triton.jit
    def int64_index(x_ptr, o_ptr, stride, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0).to(tl.int64)
        offs = pid * stride + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + offs, mask=tl.arange(0, BLOCK) < n)
        tl.store(o_ptr + pid * BLOCK + tl.arange(0, BLOCK), v.to(tl.float64) * 3.0, mask=tl.arange(0, BLOCK) < n)
    def l_i64():
        x = T(64 * 1000)
        return int64_index[(64,)](x, torch.empty(64 * 512, device=dev, dtype=torch.float64), 1000, 500, BLOCK=512)
    reg(int64_index, "fp64_int64_stride", "64-bit strides, fp64 stores (.f64/0d immediates)",
        {"x_ptr": "*fp32", "o_ptr": "*fp64", "stride": "i64", "n": "i32"}, {"BLOCK": 512}, l_i64)

    @triton.jit
    def histogram_tl(x_ptr, o_ptr, n, NB: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0)
        h = tl.histogram(x, NB)
        tl.atomic_add(o_ptr + tl.arange(0, NB), h)
    def l_ht():
        x = torch.randint(0, 32, (8192,), device=dev, dtype=torch.int32)
        return histogram_tl[(8,)](x, torch.zeros(32, dtype=torch.int32, device=dev), 8192, NB=32, BLOCK=1024)
    reg(histogram_tl, "tl_histogram", "tl.histogram (atom.shared.add) then global atom.global.gpu.acq_rel.add",
        {"x_ptr": "*i32", "o_ptr": "*i32", "n": "i32"}, {"NB": 32, "BLOCK": 1024}, l_ht)

    @triton.jit
    def multi_output_2d(x_ptr, s_ptr, m_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        acc = tl.zeros([BM], tl.float32)
        mx = tl.full([BM], -float("inf"), tl.float32)
        for off in tl.range(0, N, BN, num_stages=4):
            rn = off + tl.arange(0, BN)
            x = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=(rm[:, None] < M) & (rn[None, :] < N), other=0.)
            acc += tl.sum(x, 1)
            mx = tl.maximum(mx, tl.max(x, 1))
        tl.store(s_ptr + rm, acc, mask=rm < M)
        tl.store(m_ptr + rm, mx, mask=rm < M)
    def l_mo():
        x = T(1000, 3000)
        return multi_output_2d[(triton.cdiv(1000, 16),)](x, torch.empty(1000, device=dev), torch.empty(1000, device=dev), 1000, 3000, BM=16, BN=256)
    reg(multi_output_2d, "row_sum_max_pipelined", "2-D tile reduction loop with tl.range(num_stages=4) (cp.async ca/cg with zero-fill src-size)",
        {"x_ptr": "*fp32", "s_ptr": "*fp32", "m_ptr": "*fp32", "M": "i32", "N": "i32"}, {"BM": 16, "BN": 256}, l_mo)


if __name__ == "__main__":
    sys.exit(main())
