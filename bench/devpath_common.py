"""Shared pieces of the issue-13 device-path benches (bench/devpath_matrix.py, bench/devpath_cost.py).

Toolchain, profiles and the daemon come from bench/runtime_triton.py (imported, not copied):
``toolchain_env`` (hbfcc-ptxas wrapper + private Triton/hbfcc caches), ``derived_profile``,
``use_ptxas``, ``import_source``; hbfd is started and stopped only in :func:`hbfd_daemon` (the lead
switches that one function to the single runner when it lands).

What lives here:

* the Triton kernels of both benches (one source text, instantiated twice: ``<name>_plain`` built
  with CUDA's ptxas, ``<name>_hbf`` with hbfcc-ptxas) and the nvcc kernels (built with nvcc and with
  hbfcc as nvcc, bound with ``Session.bind_module(module, artifact=...)``);
* the supervisor: a bench's cases run in a CHILD process that announces each case on stdout
  (``@@ <i> start|phase|end|fault <json>``); the parent kills the child's process group when a case
  does not end in time (``hang``), records a child that dies inside a case (``fault``), and starts a
  new child at the next case;
* pure helpers with CPU tests (tests/bench/test_devpath_bench.py): counter differences and totals,
  occupancy by registers/threads/shared memory, Little's-law prediction, statistics.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import queue
import signal
import statistics
import subprocess
import tempfile
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

ROOT = Path(__file__).resolve().parent.parent
for _p in (str(ROOT), str(ROOT / "bench")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from runtime_triton import (derived_profile, log, real_ptxas, start_hbfd,  # noqa: E402,F401
                            toolchain_env, use_ptxas)

from workloads.triton_kernels import import_text as import_source  # noqa: E402

from hbfcc.toolchain import cli_wrapper  # noqa: E402
from hbfcommon.fsutil import atomic_write_json  # noqa: E402

# ------------------------------------------------------------------------------------------------
# timing sources (hbfd profiles)
# ------------------------------------------------------------------------------------------------
SOURCES = {  # name -> (timing_source, fixed read_ns = write_ns or None for the profile's own)
    "fixed0": ("fixed", 0),
    "fixed2us": ("fixed", 2_000),
    "fixed20us": ("fixed", 20_000),
    "fast": ("fast", None),
}


def source_profile(tmp: Path, source: str) -> Path:
    """profiles/nominal.json with the named timing source (runtime_triton.derived_profile), fixed
    read_ns = write_ns set for the fixed sources."""
    if source not in SOURCES:
        raise SystemExit(f"unknown timing source {source!r} (known: {', '.join(SOURCES)})")
    kind, ns = SOURCES[source]
    p = derived_profile(tmp / f"profile-{source}.json", kind)
    if ns is not None:
        d = json.loads(p.read_text())
        for k in ("read_ns", "write_ns"):
            d["timing_model"]["fixed"][k] = {"value": int(ns), "provenance": "assumed",
                                            "source": f"devpath bench: fixed {ns} ns"}
        d["name"] = f"nominal-{source}"
        p.write_text(json.dumps(d, indent=1))
    return p


@contextlib.contextmanager
def hbfd_daemon(tmp: Path, profile: Path):
    """The real hbfd on a private socket for one child; yields the socket path. The ONE place these
    benches start and stop the daemon (runtime_triton.start_hbfd / stop_hbfd)."""
    hb = start_hbfd(tmp, profile)
    try:
        yield str(hb.socket)
    finally:
        hb.stop()


def prepare_run(out_dir: str, name: str, work: str) -> tuple[Path, Path, Path, dict]:
    """A bench's output folder (created), its JSON path ``<out>/<name>.json``, its work folder (``work``,
    else a new temporary one) and the environment for its children: this process's, with the toolchain's
    variables applied (to both). A whole environment: a child given only the toolchain's variables has no PATH, and
    Triton cannot build its launcher there (l2_vs_ncu's children on the H200, 2026-12-05)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    wd = Path(work) if work else Path(tempfile.mkdtemp(prefix=f"hbf-{name}."))
    os.environ.update(toolchain_env(wd))
    return out, out / f"{name}.json", wd, dict(os.environ)


def gpu_info() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:  # noqa: BLE001
        return f"nvidia-smi failed: {e}"


def write_json(path: Path, obj: Any) -> None:
    atomic_write_json(path, obj, indent=1, default=str, end="\n")


# ------------------------------------------------------------------------------------------------
# Triton kernels (one text; <name>_plain and <name>_hbf)
# ------------------------------------------------------------------------------------------------
KERNEL_HEADER = r'''
import triton
import triton.language as tl


@triton.jit
def _stamp(dep):
    # %globaltimer, read only once `dep` (int32) is available: a predicate computed from it guards the read
    return tl.inline_asm_elementwise(
        "{ .reg .pred %hbp; setp.eq.u32 %hbp, $1, 0; @%hbp mov.u64 $0, %globaltimer; @!%hbp mov.u64 $0, %globaltimer; }",
        "=l,r", [dep], dtype=tl.int64, is_pure=False, pack=1)
'''

KERNEL_BODY = r'''

@triton.jit
def reduce_SFX(x, out, n, EPP: tl.constexpr, BLOCK: tl.constexpr):
    # streaming reduction: program p sums x[p*EPP, (p+1)*EPP) in chunks of BLOCK (fp32 accumulate)
    pid = tl.program_id(0)
    base = pid * EPP
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(0, EPP, BLOCK):
        offs = base + i + tl.arange(0, BLOCK)
        acc += tl.load(x + offs, mask=offs < n, other=0).to(tl.float32)
    tl.store(out + pid, tl.sum(acc, axis=0))


@triton.jit
def copy_SFX(x, y, n, EPP: tl.constexpr, BLOCK: tl.constexpr):
    base = tl.program_id(0) * EPP
    for i in range(0, EPP, BLOCK):
        offs = base + i + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y + offs, tl.load(x + offs, mask=m), mask=m)


@triton.jit
def hist_SFX(x, h, n, EPP: tl.constexpr, BLOCK: tl.constexpr, NB: tl.constexpr):
    # integer histogram with atomics: h[x % NB] += 1 (deterministic totals)
    base = tl.program_id(0) * EPP
    for i in range(0, EPP, BLOCK):
        offs = base + i + tl.arange(0, BLOCK)
        m = offs < n
        v = tl.load(x + offs, mask=m, other=0)
        tl.atomic_add(h + (v % NB), 1, mask=m)


@triton.jit
def asum_SFX(x, out, n, EPP: tl.constexpr, BLOCK: tl.constexpr):
    # int32 sum of every program's block, one atomic per program into out[0] (wraps; order-free)
    base = tl.program_id(0) * EPP
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for i in range(0, EPP, BLOCK):
        offs = base + i + tl.arange(0, BLOCK)
        acc += tl.load(x + offs, mask=offs < n, other=0)
    tl.atomic_add(out, tl.sum(acc, axis=0))


@triton.jit
def add4_SFX(a, b, c, d, o, n, EPP: tl.constexpr, BLOCK: tl.constexpr):
    # four independent loads in flight per thread before any is used
    base = tl.program_id(0) * EPP
    for i in range(0, EPP, BLOCK):
        offs = base + i + tl.arange(0, BLOCK)
        m = offs < n
        va = tl.load(a + offs, mask=m)
        vb = tl.load(b + offs, mask=m)
        vc = tl.load(c + offs, mask=m)
        vd = tl.load(d + offs, mask=m)
        tl.store(o + offs, ((va + vb) + vc) + vd, mask=m)


@triton.jit
def latprobe_SFX(x, t, vout, R: tl.constexpr):
    # one warp per program; R dependent rounds: stamp, load (its address depends on the stamp), stamp once
    # the value is there. t[(p*R+r)*32 + lane] = issue-to-use time of that warp-request (ns)
    pid = tl.program_id(0)
    lane = tl.arange(0, 32)
    acc = tl.zeros([32], dtype=tl.int32)
    for r in range(R):
        t0 = _stamp(acc)
        v = tl.load(x + (pid * R + r) * 32 + lane + (t0 >> 63).to(tl.int32))
        t1 = _stamp(v)
        acc += v
        tl.store(t + (pid * R + r) * 32 + lane, t1 - t0)
    tl.store(vout + pid * 32 + lane, acc)


@triton.jit(do_not_specialize=["iters"])
def consume_SFX(x, t, vout, iters, R: tl.constexpr):
    # issue a load, do `iters` rounds of independent integer work, then use the value:
    # t[3*i + 0] = work (stamp after work - stamp before issue), t[3*i + 1] = exposed (use - after work),
    # t[3*i + 2] = total (use - before issue); i = (p*R + r)*32 + lane
    pid = tl.program_id(0)
    lane = tl.arange(0, 32)
    acc = tl.zeros([32], dtype=tl.int32)
    for r in range(R):
        i = (pid * R + r) * 32 + lane
        t0 = _stamp(acc)
        v = tl.load(x + i + (t0 >> 63).to(tl.int32))
        y = t0
        for _k in range(iters):
            y = y * 6364136223846793005 + 1442695040888963407
        t1 = _stamp(y.to(tl.int32))
        t2 = _stamp(v)
        acc += v
        tl.store(t + 3 * i, t1 - t0)
        tl.store(t + 3 * i + 1, t2 - t1)
        tl.store(t + 3 * i + 2, t2 - t0)
    tl.store(vout + pid * 32 + lane, acc)
'''


def _unrolled(name: str) -> str:
    """The kernel ``name``_SFX of KERNEL_BODY with its loop unrolled by Triton (tl.static_range: a straight-line
    body), as ``s<name>_SFX``: one source text, so the two differ only in the unrolling."""
    i = KERNEL_BODY.index(f"@triton.jit\ndef {name}_SFX(")
    j = KERNEL_BODY.find("@triton.jit", i + 1)
    text = KERNEL_BODY[i:j if j > 0 else len(KERNEL_BODY)]
    assert text.count("in range(") == 1, name
    return "\n" + text.replace(f"def {name}_SFX(", f"def s{name}_SFX(").replace("in range(", "in tl.static_range(")


KERNEL_BODY += _unrolled("reduce") + _unrolled("copy")

# Triton signature types (for the CPU compile check) and torch dtypes (for warmup) per kernel argument
KERNEL_ARGS = {
    "reduce": (("x", "IN"), ("out", "*fp32"), ("n", "i32")),
    "copy": (("x", "IN"), ("y", "IN"), ("n", "i32")),
    "sreduce": (("x", "IN"), ("out", "*fp32"), ("n", "i32")),
    "scopy": (("x", "IN"), ("y", "IN"), ("n", "i32")),
    "hist": (("x", "*i32"), ("h", "*i32"), ("n", "i32")),
    "asum": (("x", "*i32"), ("out", "*i32"), ("n", "i32")),
    "add4": (("a", "IN"), ("b", "IN"), ("c", "IN"), ("d", "IN"), ("o", "IN"), ("n", "i32")),
    "latprobe": (("x", "*i32"), ("t", "*i64"), ("vout", "*i32")),
    "consume": (("x", "*i32"), ("t", "*i64"), ("vout", "*i32"), ("iters", "i32")),
}
TRITON_TYPES = {"int8": "*i8", "float16": "*fp16", "bfloat16": "*bf16", "float32": "*fp32", "int32": "*i32",
                "int64": "*i64"}


def kernel_source() -> str:
    return KERNEL_HEADER + KERNEL_BODY.replace("SFX", "plain") + KERNEL_BODY.replace("SFX", "hbf")


def load_kernels(work: Path):
    """The kernels module (Triton needs the source in a file): K.reduce_plain, K.reduce_hbf, ..."""
    return import_source(work / "tk_devpath.py", kernel_source(), "tk_devpath")


def triton_signature(kernel: str, dtype: str, constexprs: dict) -> dict:
    """Triton signature of one kernel specialization (IN = the case's element type)."""
    sig = {}
    for name, ty in KERNEL_ARGS[kernel]:
        sig[name] = TRITON_TYPES[dtype] if ty == "IN" else ty
    for k in constexprs:
        sig[k] = "constexpr"
    return sig


def spec_key(spec: dict) -> tuple:
    """What makes Triton compile another binary: kernel, element type, constexprs, num_warps and the
    specialization of the integer arguments (== 1, divisible by 16)."""
    ints = tuple(("one" if v == 1 else "d16" if v % 16 == 0 else "any") for v in spec.get("ints", ()))
    return (spec["kernel"], spec["dtype"], tuple(sorted(spec["const"].items())), spec["warps"], ints)


def warm(K, spec: dict, sfx: str):
    """Compile (or load from Triton's cache) one specialization without launching it
    (JITFunction.warmup with torch dtypes for the pointers and the case's integer values)."""
    import torch
    use_ptxas(sfx)
    args = []
    ints = list(spec.get("ints", ()))
    for _name, ty in KERNEL_ARGS[spec["kernel"]]:
        if ty == "IN":
            args.append(getattr(torch, spec["dtype"]))
        elif ty.startswith("*"):
            args.append({"*fp32": torch.float32, "*i32": torch.int32, "*i64": torch.int64, "*fp16": torch.float16,
                         "*bf16": torch.bfloat16, "*i8": torch.int8}[ty])
        else:
            args.append(int(ints.pop(0)))
    fn = getattr(K, f"{spec['kernel']}_{sfx}")
    return fn.warmup(*args, grid=(1,), num_warps=spec["warps"], **spec["const"])


def compile_all(jobs: dict[str, Callable[[str], Any]], *, threads: int = 8) -> dict:
    """Compile every job for both builds into Triton's cache in parallel threads (Triton's
    AsyncCompileMode; ptxas / hbfcc-ptxas run as subprocesses). jobs: {key: warm(sfx)} where warm
    calls a JITFunction's warmup (e.g. ``lambda sfx: warm(K, spec, sfx)``). One pass per build,
    because the ptxas choice is an environment variable read during the compile.
    Returns {key: {"plain": "ok" | "error: ...", "hbf": ...}}."""
    from concurrent.futures import ThreadPoolExecutor

    from triton.runtime._async_compile import AsyncCompileMode
    out: dict = {k: {} for k in jobs}
    for sfx in ("plain", "hbf"):
        t0 = time.time()
        futs = {}
        with ThreadPoolExecutor(max_workers=max(1, threads)) as ex:
            with AsyncCompileMode(ex, ignore_errors=True):
                use_ptxas(sfx)
                for k, job in jobs.items():
                    try:
                        futs[k] = job(sfx)
                    except Exception as e:  # noqa: BLE001
                        out[k][sfx] = f"error: {type(e).__name__}: {e}"[:600]
        for k, f in futs.items():
            fut = getattr(f, "future", None)
            exc = fut.exception() if fut is not None else None
            out[k][sfx] = f"error: {type(exc).__name__}: {exc}"[:600] if exc is not None else "ok"
        log(f"compile {sfx}: {len(jobs)} specializations in {time.time() - t0:.1f} s")
    return out


def cpu_triton_compile(K, spec: dict, sfx: str):
    """triton.compile of one spec for sm_90a WITHOUT a GPU (an explicit target, pointers and 16-divisible ints
    marked as the JIT marks them, as bench/native_version_sass.py does) with the ptxas TRITON_PTXAS_PATH names
    now; the compiled kernel (its ``asm``: ptx, cubin)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    fn = getattr(K, f"{spec['kernel']}_{sfx}")
    sig = triton_signature(spec["kernel"], spec["dtype"], spec["const"])
    names = list(sig)
    ints = list(spec.get("ints", ()))
    nospec = set(getattr(fn, "do_not_specialize", ()) or ())
    attrs = {}
    for i, (name, ty) in enumerate(KERNEL_ARGS[spec["kernel"]]):
        if ty.startswith("*") or ty == "IN":
            attrs[(names.index(name),)] = [["tt.divisibility", 16]]
        else:
            v = ints.pop(0)
            if name not in nospec and i not in nospec and v % 16 == 0:
                attrs[(names.index(name),)] = [["tt.divisibility", 16]]
    return triton.compile(ASTSource(fn=fn, signature=sig, constexprs=dict(spec["const"]), attrs=attrs),
                          target=GPUTarget("cuda", 90, 32), options={"num_warps": spec["warps"]})


def cpu_compile(K, spec: dict, sfx: str) -> dict:
    """:func:`cpu_triton_compile` through the plain or the hbfcc ptxas; returns what the hbfcc artifact says
    (admitted, ptxas before/after)."""
    import hashlib

    from hbfcommon import artifact as A
    use_ptxas(sfx)
    t = time.time()
    k = cpu_triton_compile(K, spec, sfx)
    art = A.lookup_by_ptx(k.asm["ptx"].encode())
    ka = (art or {}).get("kernels", [{}])[0] if art else {}
    return {"seconds": round(time.time() - t, 1), "has_hb_issue": b"__hb_issue" in k.asm["cubin"],
            "ptx_sha256": hashlib.sha256(k.asm["ptx"].encode()).hexdigest()[:16],
            "artifact": art is not None, "admitted": ka.get("admitted"),
            "reasons": (ka.get("not_admitted_reasons") or [])[:3], "ptxas_before": ka.get("ptxas_before"),
            "ptxas_after": ka.get("ptxas_after"), "occupancy_guard": ka.get("occupancy_guard"),
            "full_warp_auto": ka.get("full_warp_auto"), "group_prefetches": ka.get("group_prefetches"),
            "sites": ka.get("sites"), "waits": ka.get("waits"),
            "helper": Path(art["helper"]["path"]).name if art and art.get("helper") else None}


def cpu_check(K, specs: Iterable[dict]) -> dict:
    """cpu_compile of every distinct spec, both builds: {key: {"plain": .., "hbf": ..}}; the hbf build
    must be instrumented and admitted, the plain one not instrumented."""
    out = {}
    for key, s in {repr(spec_key(s)): s for s in specs}.items():
        r = {}
        for sfx in ("plain", "hbf"):
            try:
                r[sfx] = cpu_compile(K, s, sfx)
            except Exception as e:  # noqa: BLE001
                r[sfx] = {"error": f"{type(e).__name__}: {e}"[:1500]}
        r["ok"] = (r["hbf"].get("has_hb_issue") is True and r["hbf"].get("admitted") is True
                   and r["plain"].get("has_hb_issue") is False)
        out[key] = r
        hb = r["hbf"]
        log(f"cpu-check {key}: ok={r['ok']} hbf {hb.get('seconds')} s admitted={hb.get('admitted')} "
            f"before={hb.get('ptxas_before')} after={hb.get('ptxas_after')} {hb.get('error', '')}")
    return out


def spec_jobs(K, specs: Iterable[dict]) -> dict[str, Callable[[str], Any]]:
    """compile_all jobs for kernel specs (one per distinct spec_key)."""
    jobs: dict = {}
    for s in specs:
        jobs.setdefault(repr(spec_key(s)), lambda sfx, s=s: warm(K, s, sfx))
    return jobs


# ------------------------------------------------------------------------------------------------
# nvcc kernels: nvcc (plain) and hbfcc as nvcc (instrumented), -cubin
# ------------------------------------------------------------------------------------------------
NVCC_SOURCE = r'''
// devpath stress kernels (nvcc): grid-stride loops, float4 vectors, a scalar tail, int atomics,
// a shared-memory block reduction (up to 1024 threads), four independent loads in flight
extern "C" __global__ void nv_copy4(const float4* __restrict__ x, float4* __restrict__ y, long long n4) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x)
        y[i] = x[i];
}
extern "C" __global__ void nv_copy1(const float* __restrict__ x, float* __restrict__ y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = x[i] * 2.0f + 1.0f;
}
extern "C" __global__ void nv_hist(const unsigned* __restrict__ x, unsigned* h, long long n, unsigned nb) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        atomicAdd(&h[x[i] % nb], 1u);
}
extern "C" __global__ void nv_reduce(const float* __restrict__ x, float* out, long long n) {
    __shared__ float sh[1024];
    float s = 0.0f;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        s += x[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = sh[0];
}
extern "C" __global__ void nv_add4(const float4* __restrict__ a, const float4* __restrict__ b, const float4* __restrict__ c,
                                   const float4* __restrict__ d, float4* __restrict__ o, long long n4) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
        const float4 va = a[i], vb = b[i], vc = c[i], vd = d[i];
        o[i] = make_float4(((va.x + vb.x) + vc.x) + vd.x, ((va.y + vb.y) + vc.y) + vd.y,
                           ((va.z + vb.z) + vc.z) + vd.z, ((va.w + vb.w) + vc.w) + vd.w);
    }
}
'''
NVCC_KERNELS = ("nv_copy4", "nv_copy1", "nv_hist", "nv_reduce", "nv_add4")


def build_nvcc(work: Path, env: dict) -> dict:
    """nvcc -cubin (plain) and hbfcc -cubin (hbfcc as nvcc: the wrapper runs python -m hbfcc.cli);
    the artifact hbfcc writes is <cubin>.hbfcc.json. {"plain", "hbf", "artifact", "seconds"} or {"error"}."""
    d = work / "nvcc"
    d.mkdir(parents=True, exist_ok=True)
    src = d / "devpath_nv.cu"
    src.write_text(NVCC_SOURCE)
    wrap = cli_wrapper(d / "hbfcc")
    e = dict(os.environ, **env)
    for k in ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS"):
        e.pop(k, None)
    out: dict = {}
    try:
        t = time.time()
        for tag, exe in (("plain", "nvcc"), ("hbf", str(wrap))):
            cub = d / f"devpath_nv_{tag}.cubin"
            r = subprocess.run([exe, "-arch=sm_90a", "-O3", "-cubin", str(src), "-o", str(cub)], cwd=d, env=e,
                               capture_output=True, text=True, timeout=300)
            if r.returncode != 0 or not cub.is_file():
                return {"error": f"{tag} build failed (rc {r.returncode}): {(r.stderr or r.stdout)[-2000:]}"}
            out[tag] = str(cub)
        art = d / "devpath_nv_hbf.cubin.hbfcc.json"
        out["artifact"] = str(art) if art.is_file() else None
        out["seconds"] = round(time.time() - t, 1)
        out["hbf_has_hb_issue"] = b"__hb_issue" in Path(out["hbf"]).read_bytes()
    except (OSError, subprocess.TimeoutExpired) as ex:
        return {"error": f"{type(ex).__name__}: {ex}"}
    return out


def nvcc_module_doc(artifact_doc: dict, target: str = "sm_90a") -> dict | None:
    """The per-module admission document inside hbfcc's nvcc artifact (schema hbfcc.admission.nvcc:
    {"modules": [...]}) for the given ptxas target (else the first module)."""
    mods = artifact_doc.get("modules") or []
    for m in mods:
        if ((m.get("ptxas") or {}).get("target") or "") == target:
            return m
    return mods[0] if mods else None


def bind_nvcc(s, nv: dict) -> dict:
    """Load both cubins; bind the hbfcc one with Session.bind_module(module, artifact=<path hbfcc
    wrote>). Issue 13 item 6: that binds 0 kernels when the artifact is hbfcc's nvcc document; then the
    module's own admission document (the sm_90a entry of its "modules") is bound and the record says so.
    Returns {"plain": {name: CUfunction}, "hbf": {...}, "binding": ModuleBinding, "bind": {...}}."""
    from runtime_cuda import cudrv
    mp = cudrv.module_load_data(Path(nv["plain"]).read_bytes())
    mh = cudrv.module_load_data(Path(nv["hbf"]).read_bytes())
    b = s.bind_module(mh, artifact=nv["artifact"])
    info = {"artifact": nv["artifact"], "kernels_bound_from_path": sorted(b.kernels),
            "instrumented": bool(b.instrumented)}
    if not b.kernels and nv.get("artifact"):
        doc = nvcc_module_doc(json.loads(Path(nv["artifact"]).read_text()))
        if doc is not None:
            b = s.bind_module(mh, artifact=doc)
            info["fallback"] = "bound the sm_90a module document of the nvcc artifact (path bound 0 kernels)"
            info["kernels_bound_from_module_doc"] = sorted(b.kernels)
    info["admitted"] = {k: v.admitted for k, v in b.kernels.items()}
    fp = {n: cudrv.module_function(mp, n) for n in NVCC_KERNELS}
    fh = {}
    for n in NVCC_KERNELS:
        fh[n] = cudrv.module_function(mh, n)
        s.note_function(fh[n], b, n)
    return {"plain": fp, "hbf": fh, "binding": b, "bind": info}


# ------------------------------------------------------------------------------------------------
# counters (pure)
# ------------------------------------------------------------------------------------------------
_SKIP = ("kstart_ns", "kend_ns")


def cdiff(after: Any, before: Any) -> Any:
    """after - before for a counters dict (nested; missing keys in `before` count as 0)."""
    if isinstance(after, dict):
        b = before if isinstance(before, dict) else {}
        return {k: cdiff(v, b.get(k)) for k, v in after.items() if k not in _SKIP}
    if isinstance(after, bool) or not isinstance(after, (int, float)):
        return after
    return after - (before if isinstance(before, (int, float)) and not isinstance(before, bool) else 0)


def kernel_delta(before: dict, after: dict, names: Sequence[str]) -> dict:
    """Sum over kernel names of after - before (Session.counters()["kernels"] snapshots)."""
    tot: dict = {}
    for n in names:
        if n in after:
            _add(tot, cdiff(after[n], before.get(n, {})))
    return tot


def _add(tot: dict, d: dict) -> None:
    for k, v in d.items():
        if isinstance(v, dict):
            _add(tot.setdefault(k, {}), v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            tot[k] = tot.get(k, 0) + v


def csummary(d: dict) -> dict:
    """One kernel's counter delta in brief: per-op numeric fields summed over ops (whatever fields the
    runtime has), requests per op, every other numeric field as is, and per-request means."""
    if not d:
        return {}
    ops = d.get("ops") or {}
    tot: dict = {}
    for v in ops.values():
        for f, x in v.items():
            if isinstance(x, (int, float)) and not isinstance(x, bool):
                tot[f] = tot.get(f, 0) + x
    out = {"ops_total": tot, "requests_by_op": {op: v.get("requests", 0) for op, v in ops.items() if v.get("requests")}}
    for k, v in d.items():
        if k not in ("ops", "status") and isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = v
    if d.get("status"):
        out["status"] = d["status"]
    req = tot.get("requests", 0)
    if req:
        out["per_request"] = {f: tot[f] / req for f in tot if f != "requests"}
    if d.get("wait_calls"):
        out["per_wait"] = {f: d[f] / d["wait_calls"] for f in ("wait_wall_ns", "wait_overhead_ns") if f in d}
    return out


def explain_terms(cs: dict, launches: int, resident_warps: int) -> dict:
    """The explain rule (issue 13: the counters must explain instrumented - plain; bench/hbf_bandwidth.py,
    bench/explain_devpath.py): every warp's life is the plain kernel's work plus its simulator time -- the helpers'
    time at issue (``overhead_ns`` of the ops), the inline issue path's own time (``inline_ns``, helper ABI 8: 0 for
    kernels built without HBFCC_INLINE_TIME=1) and its exposed waits (``wait_wall_ns``) -- and the resident warps
    share the launch, so the counters account for

        counted = (overhead_ns + inline_ns + wait_wall_ns) / (launches x resident warps)

    ``cs``: a kernel's counter summary (csummary: ``ops_total`` and the kernel-level fields). The three terms and
    their shares of the sum are reported apart (the inline share is what HBFCC_INLINE_TIME adds)."""
    ot = cs.get("ops_total") or {}
    helper, inline = int(ot.get("overhead_ns") or 0), int(cs.get("inline_ns") or 0)
    waits = int(cs.get("wait_wall_ns") or 0)
    tot = helper + inline + waits
    share = (lambda x: x / tot if tot else None)  # noqa: E731
    n = max(1, int(launches)) * int(resident_warps)
    return {"helper_ns_total": helper, "inline_ns_total": inline, "exposed_wait_ns_total": waits,
            "counted_ns": tot / n if n > 0 else None, "helper_share": share(helper), "inline_share": share(inline),
            "wait_share": share(waits)}


# ------------------------------------------------------------------------------------------------
# occupancy, Little's law, statistics (pure)
# ------------------------------------------------------------------------------------------------
def blocks_per_sm(regs: int, threads: int, smem: int = 0, *, max_smem: int = 233472,
                  smem_reserved: int = 1024) -> int:
    """Resident blocks per SM of a kernel on sm_90: hbfcc's register/warp/block rule
    (hbfcc.occupancy.blocks_per_sm, the one the occupancy guard uses) and the shared-memory bound
    (228 KiB per SM, 1 KiB reserved per block). On the GPU the driver's answer is used
    (driver_blocks_per_sm); this is the CPU model of it."""
    from hbfcc.occupancy import blocks_per_sm as by_regs_and_warps
    if threads <= 0:
        raise ValueError("threads must be > 0")
    by_smem = by_regs_and_warps(0, threads) if smem <= 0 else max_smem // (smem + smem_reserved)
    return max(0, min(by_regs_and_warps(regs, threads), by_smem))


def driver_blocks_per_sm(function, threads: int, smem: int) -> int | None:
    """cuOccupancyMaxActiveBlocksPerMultiprocessor for a loaded function (an int handle, e.g. a Triton
    kernel's .function, or a CUfunction); None if it fails."""
    try:
        from runtime_cuda import cudrv
        d = cudrv.drv()
        fn = function if isinstance(function, d.CUfunction) else d.CUfunction(int(function))
        return int(cudrv.check(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(fn,
                                                                             int(threads), int(smem)),
                               "cuOccupancyMaxActiveBlocksPerMultiprocessor"))
    except Exception:  # noqa: BLE001
        return None


def resident_blocks_per_sm(k, threads: int) -> tuple[int, str]:
    """(blocks per SM, how it was decided) of a loaded Triton CompiledKernel: the driver's occupancy
    calculation, else the register/shared-memory model (blocks_per_sm) from the kernel's n_regs."""
    shared = int(getattr(k.metadata, "shared", 0) or 0)
    v = driver_blocks_per_sm(k.function, threads, shared)
    if v:
        return v, "driver"
    return blocks_per_sm(int(getattr(k, "n_regs", 0) or 0), threads, shared), "model"


def littles_law(*, total_requests: int, warps_in_flight: int, inflight_per_warp: float, latency_ns: float,
                bytes_per_request: float | None = None) -> dict:
    """Latency-bound time of a stream: every resident warp keeps `inflight_per_warp` requests in flight,
    each takes `latency_ns`, so requests complete at warps x inflight / latency per ns (Little's law:
    in flight = throughput x latency). time = total_requests / that rate."""
    if warps_in_flight <= 0 or inflight_per_warp <= 0 or latency_ns <= 0:
        raise ValueError("warps_in_flight, inflight_per_warp and latency_ns must be > 0")
    in_flight = warps_in_flight * inflight_per_warp
    rate = in_flight / latency_ns
    out = {"requests_in_flight": in_flight, "requests_per_ns": rate, "time_ns": total_requests / rate}
    if bytes_per_request:
        out["bytes_in_flight"] = in_flight * bytes_per_request
        out["bandwidth_GBps"] = in_flight * bytes_per_request / latency_ns   # bytes/ns == GB/s
    return out


def waves_time_ns(*, grid: int, resident_blocks: int, rounds_per_block: int, round_ns: float) -> float:
    """Discrete form: ceil(grid / resident) waves of blocks, each block `rounds_per_block` dependent
    rounds of `round_ns`."""
    if resident_blocks <= 0:
        raise ValueError("resident_blocks must be > 0")
    return math.ceil(grid / resident_blocks) * rounds_per_block * round_ns


def stats(xs: Sequence[float]) -> dict:
    """n, median, p10, p90, min, max (linear interpolation)."""
    v = sorted(float(x) for x in xs)
    if not v:
        return {"n": 0}

    def q(p):
        k = (len(v) - 1) * p
        lo, hi = int(k), min(int(k) + 1, len(v) - 1)
        return v[lo] + (v[hi] - v[lo]) * (k - lo)
    return {"n": len(v), "median": statistics.median(v), "p10": q(0.10), "p90": q(0.90), "p99": q(0.99),
            "min": v[0], "max": v[-1], "mean": sum(v) / len(v)}


# ------------------------------------------------------------------------------------------------
# supervisor: cases in a child process, a watchdog per case
# ------------------------------------------------------------------------------------------------
TAG = "@@"


def emit(idx: Any, kind: str, obj: dict | None = None) -> None:
    """Child side: one protocol line (``@@ <idx> <kind> <json>``), flushed."""
    print(f"{TAG} {idx} {kind} {json.dumps(obj or {}, default=str)}", flush=True)


def parse_line(line: str) -> tuple[Any, str, dict] | None:
    if not line.startswith(TAG + " "):
        return None
    parts = line.rstrip("\n").split(" ", 3)
    if len(parts) < 3:
        return None
    idx = int(parts[1]) if parts[1].lstrip("-").isdigit() else parts[1]
    try:
        obj = json.loads(parts[3]) if len(parts) > 3 and parts[3] else {}
    except json.JSONDecodeError:
        obj = {"unparsed": parts[3][:2000]}
    return idx, parts[2], obj


def _pump(stream, q: "queue.Queue") -> None:
    try:
        for line in iter(stream.readline, ""):
            q.put(line)
    finally:
        q.put(None)


def _kill_group(p: subprocess.Popen) -> None:
    """SIGKILL the child's process group (the child and the hbfd it started), then reap the child."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        pass


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def supervise(argv_for: Callable[[int], list[str]], *, n_cases: int | None, case_timeout: float,
              setup_timeout: float, on_record: Callable[[int, dict], None], err_dir: Path, tag: str,
              env: dict | None = None, echo: Callable[[str], None] | None = None,
              on_ready: Callable[[dict], None] | None = None, max_failures: int = 2,
              stop_at: float | None = None) -> dict:
    """Run cases [0, n) in child processes (``argv_for(start)`` starts a child at case `start`).

    Child protocol (stdout, see emit): ``@@ - ready {"n_cases": N, ...}`` after its setup; per case
    ``@@ i start {"timeout": s}``, optionally ``@@ i phase {"phase": .., "timeout": s}``, then
    ``@@ i end {record}`` or ``@@ i fault {record}`` (then it exits); ``@@ - done {}`` at the end.
    Other stdout lines go to `echo`; stderr goes to a file in err_dir.

    The watchdog: the deadline is reset by every protocol line (setup_timeout between cases, the
    line's "timeout" or case_timeout inside one). A case whose deadline passes -> {"status": "hang"},
    the child's process group is killed and a new child starts at the next case; a child that exits
    inside a case without a fault line -> {"status": "fault"} with its stderr tail, next case. A child
    that dies or stalls outside a case without progress counts as a failure; after `max_failures` in a
    row the remaining cases are recorded as {"status": "not_run"}. ``stop_at`` (a time.monotonic()
    value): the time budget; when it passes, the running child is killed, and the case it was in and
    every later one are recorded as {"status": "not_run"} (budget). Returns {"children": [...],
    "n_cases": N, "budget_hit": bool}."""
    echo = echo or (lambda s: print(s, end="" if s.endswith("\n") else "\n", flush=True))
    n = n_cases
    start = 0
    failures = 0
    children: list[dict] = []
    err_dir.mkdir(parents=True, exist_ok=True)
    budget_hit = False

    def not_run_from(i0: int, why: str) -> None:
        for i in range(i0, n or 0):
            on_record(i, {"status": "not_run", "detail": why})
    while n is None or start < n:
        if stop_at is not None and time.monotonic() >= stop_at:
            budget_hit = True
            not_run_from(start, "time budget (--budget-s) used up before the case")
            break
        errp = err_dir / f"{tag}.child{len(children)}.stderr"
        t_child = time.monotonic()
        with open(errp, "w") as ef:
            p = subprocess.Popen(argv_for(start), stdout=subprocess.PIPE, stderr=ef, text=True, env=env,
                                 start_new_session=True, bufsize=1)
        q: queue.Queue = queue.Queue()
        threading.Thread(target=_pump, args=(p.stdout, q), daemon=True).start()
        ch = {"start": start, "pid": p.pid, "stderr": str(errp)}
        children.append(ch)
        cur, phase, limit = None, None, setup_timeout
        deadline = time.monotonic() + setup_timeout
        progressed = ready = done = faulted = False
        outcome = None
        while True:
            until = deadline if stop_at is None else min(deadline, stop_at)
            try:
                line = q.get(timeout=max(0.05, until - time.monotonic()))
            except queue.Empty:
                if stop_at is not None and time.monotonic() >= stop_at and time.monotonic() < deadline:
                    _kill_group(p)
                    budget_hit, outcome = True, "budget"
                    if cur is not None:
                        on_record(cur, {"status": "not_run", "detail": f"time budget (--budget-s) used up during "
                                                                        f"the case (phase {phase}); child killed"})
                        start = cur + 1
                    break
                if time.monotonic() < deadline:
                    continue
                _kill_group(p)
                if cur is not None:
                    rec = {"status": "hang", "detail": f"no end within {limit:g} s (phase {phase}); child killed",
                           "phase": phase}
                    on_record(cur, rec)
                    start, progressed, outcome = cur + 1, True, "hang"
                else:
                    outcome = "done_teardown_timeout" if done else ("stalled" if ready else "setup_timeout")
                break
            if line is None:   # EOF: the child exited
                try:
                    rc = p.wait(30)
                except subprocess.TimeoutExpired:
                    _kill_group(p)
                    rc = "killed"
                ch["rc"] = rc
                _kill_group(p)   # what the child left in its group (its hbfd, after a fault exit)
                if cur is not None and not faulted:
                    rec = {"status": "fault", "detail": f"child exited (rc {rc}) inside the case (phase {phase})",
                           "phase": phase, "stderr_tail": _tail(errp)}
                    on_record(cur, rec)
                    start, progressed = cur + 1, True
                outcome = "done" if done else ("fault" if faulted or cur is not None else f"exit rc {rc}")
                break
            parsed = parse_line(line)
            if parsed is None:
                echo(line)
                continue
            idx, kind, obj = parsed
            now = time.monotonic()
            if kind == "ready":
                ready = True
                if obj.get("n_cases") is not None:
                    n = int(obj["n_cases"])
                if on_ready:
                    on_ready(obj)
                limit, deadline = setup_timeout, now + setup_timeout
            elif kind == "start":
                cur, phase = int(idx), "start"
                limit = float(obj.get("timeout", case_timeout))
                deadline = now + limit
            elif kind == "phase":
                phase = obj.get("phase")
                limit = float(obj.get("timeout", case_timeout))
                deadline = now + limit
            elif kind in ("end", "fault"):
                on_record(int(idx), obj)
                cur, start, progressed = None, int(idx) + 1, True
                faulted = kind == "fault"
                limit = 60.0 if faulted else setup_timeout
                deadline = now + limit
            elif kind == "done":
                done = True
                limit, deadline = 60.0, now + 60.0
        ch.update(outcome=outcome, seconds=round(time.monotonic() - t_child, 1), next_start=start)
        if outcome not in ("done", "hang", "fault", "budget"):
            ch["stderr_tail"] = _tail(errp, 2000)
        if done or (n is not None and start >= n):
            break
        if budget_hit:
            not_run_from(start, "time budget (--budget-s) used up before the case")
            break
        failures = 0 if progressed else failures + 1
        if failures >= max_failures:
            last = [ln for ln in _tail(errp, 2000).splitlines() if ln.strip()][-1:]
            why = f"{failures} children in a row made no progress (last: {outcome}" + (f": {last[0][:300]})" if last else ")")
            not_run_from(start, why)
            break
    return {"children": children, "n_cases": n, "budget_hit": budget_hit}


def classify_exception(e: BaseException) -> str:
    """fault (the CUDA context or the session is no longer usable: the child must end), refused
    (registration or launch refused by the runtime), or error (anything else: a bench problem)."""
    from hbfcommon.errors import CudaError, DaemonError, ErrorCode, HbfError
    name = type(e).__name__
    if isinstance(e, (CudaError, DaemonError)) or name in ("DeviceFailure", "AcceleratorError"):
        return "fault"
    if isinstance(e, HbfError) and (e.code == ErrorCode.LAUNCH_REFUSED or e.code.name.startswith("RANGE_")):
        return "refused"
    msg = str(e)
    if any(t in msg for t in ("CUDA error", "[CUDA]", "CUDA_ERROR", "illegal memory access", "unspecified launch failure")):
        return "fault"
    return "error"


def exc_record(e: BaseException) -> dict:
    import traceback
    r = {"error": f"{type(e).__name__}: {e}"[:3000], "traceback": traceback.format_exc()[-3000:]}
    fields = getattr(e, "fields", None)
    if fields:
        r["fields"] = {k: str(v)[:500] for k, v in fields.items()}
    code = getattr(e, "code", None)
    if code is not None and hasattr(code, "name"):
        r["code"] = code.name
    return r


# ------------------------------------------------------------------------------------------------
# GPU-side helpers (torch + runtime_cuda; imported lazily)
# ------------------------------------------------------------------------------------------------
def event_times(launch: Callable[[], Any], reps: int, sync: Callable[[], None], *, n: int = 1,
                sleep_cycles: int | None = None) -> list[float]:
    """CUDA-event times (ms) per launch, ``reps`` times: a torch.cuda._sleep first keeps the host's launch work
    (Triton's launcher, the session's launch hook) out of the events, then ``n`` launches between the events,
    the mean per launch. ``n`` = 1: one launch after an idle GPU. ``n`` > 1: launches back to back, queued
    behind a sleep long enough for the host to queue them all (default ~2 ms instead of ~0.5): a workload's
    launch train, each later launch finding what the earlier left (a fresh thermal snapshot among it)."""
    import torch
    if sleep_cycles is None:
        sleep_cycles = 1_000_000 if n == 1 else 4_000_000
    ms = []
    for _ in range(reps):
        torch.cuda._sleep(sleep_cycles)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(n):
            launch()
        e1.record()
        sync()
        ms.append(float(e0.elapsed_time(e1)) / n)
    return ms


def pairs(run_plain: Callable[[], Any], run_hbf: Callable[[], Any], reps: int, sync: Callable[[], None], *,
          after_pair: Callable[[int], None] | None = None, sleep_cycles: int = 1_000_000) -> dict:
    """Interleaved A/B timing (as bench/triton_matmul_overhead.py): per pair a torch.cuda._sleep, then
    both launches between CUDA events, order alternating (AB, BA, ...). Per-pair ratios hbf/plain."""
    import torch
    ms: dict = {"plain": [], "hbf": []}
    for i in range(reps):
        order = ("plain", "hbf") if i % 2 == 0 else ("hbf", "plain")
        torch.cuda._sleep(sleep_cycles)
        evs = []
        for b in order:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            (run_plain if b == "plain" else run_hbf)()
            e1.record()
            evs.append((b, e0, e1))
        sync()
        for b, e0, e1 in evs:
            ms[b].append(float(e0.elapsed_time(e1)))
        if after_pair is not None:
            after_pair(i)
    ratios = [h / p for h, p in zip(ms["hbf"], ms["plain"]) if p > 0]
    mp, mh = statistics.median(ms["plain"]), statistics.median(ms["hbf"])
    return {"reps": reps, "plain_ms": stats(ms["plain"]), "hbf_ms": stats(ms["hbf"]), "pair_ratio": stats(ratios),
            "ratio_of_medians": mh / mp if mp else None, "raw_ms": {k: [round(x, 5) for x in v] for k, v in ms.items()}}


def kernel_info(s, k, threads: int) -> dict:
    """Binding, admission, registers/spills, the artifact's ptxas numbers and the resident blocks per SM
    of a launched Triton CompiledKernel."""
    from runtime_cuda.session import triton_artifact
    b, info = s.functions.get(int(k.function), (None, None))
    art = triton_artifact(k.metadata_group)
    ka = (art or {}).get("kernels", [{}])[0] if art else {}
    shared = int(getattr(k.metadata, "shared", 0) or 0)
    return {"bound": b is not None, "instrumented": bool(b and b.instrumented),
            "admitted": bool(info and info.admitted), "reasons": (info.reasons[:3] if info else None),
            "has_hb_issue": b"__hb_issue" in k.asm["cubin"], "n_regs": getattr(k, "n_regs", None),
            "n_spills": getattr(k, "n_spills", None), "shared": shared,
            "artifact_found": art is not None, "ptxas_before": ka.get("ptxas_before"),
            "ptxas_after": ka.get("ptxas_after"), "occupancy_guard": ka.get("occupancy_guard"),
            "full_warp_auto": ka.get("full_warp_auto"), "group_prefetches": ka.get("group_prefetches"),
            "helper": Path(art["helper"]["path"]).name if art and art.get("helper") else None,
            # HBFCC_LINK=separate asked: the route that built it, the caps and how they were chosen
            "link": {x: v for x, v in art["link"].items() if x not in ("ptxas_c_argv", "nvlink")}
            if art and art.get("link") else None,
            "blocks_per_sm": driver_blocks_per_sm(k.function, threads, shared),
            "blocks_per_sm_model": blocks_per_sm(int(getattr(k, "n_regs", 0) or 0), threads, shared)}


def bytes_equal(a, b) -> bool:
    import torch
    return bool(torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)))
