"""The Triton kernels that the benches and tests compile, one definition each.

Triton compiles a ``@triton.jit`` function from the text of the file it is defined in
(``inspect.getsource``), and keeps one compiled-kernel cache per function object. A script that
compiles the same kernel twice in one process -- once through the plain ptxas, once through
hbfcc-ptxas -- therefore needs two functions that differ in their names (the name is also what the
runtime's per-kernel counters and hbfd's summary report). So the kernels live here as source
templates, ``KNAME`` standing for the function's name, and :func:`load` writes the module a caller
asks for (which kernel under which names) to a file and imports it.

This module imports no Triton; the module :func:`load` writes does (``import triton,
triton.language as tl``), so call it only where Triton is installed.

    from workloads import triton_kernels as tk
    K = tk.load(work / "tk_bench.py", {"add_plain": "add", "add_hbf": "add"})
    K.add_hbf[(grid,)](x, y, o, n, B=1024)
"""
from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from hbfcommon.errors import ConfigError
from hbfcommon.fsutil import atomic_write_text

HEADER = "import triton, triton.language as tl\n"

#: kernel kind -> source template (``KNAME`` is replaced by the function's name)
KERNELS: dict[str, str] = {
    # o = 2 x + y, masked (1-D grid of blocks of B)
    "add": '''
@triton.jit
def KNAME(x, y, o, n, B: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    m = offs < n
    tl.store(o + offs, tl.load(x + offs, mask=m) * 2.0 + tl.load(y + offs, mask=m), mask=m)
''',
    # row softmax, one program per row (ncols <= B)
    "softmax": '''
@triton.jit
def KNAME(x, o, ncols, stride, B: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, B)
    m = offs < ncols
    v = tl.load(x + row * stride + offs, mask=m, other=-float("inf"))
    v = v - tl.max(v, axis=0)
    e = tl.exp(v)
    tl.store(o + row * stride + offs, e / tl.sum(e, axis=0), mask=m)
''',
    # fp16 matmul, 2-D grid of BM x BN tiles, no masks (M, N, K multiples of the tiles); with
    # num_stages > 1 Triton pipelines the loads with cp.async
    "matmul": '''
@triton.jit
def KNAME(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm = tl.program_id(0); pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM); rn = pn * BN + tl.arange(0, BN); rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        av = tl.load(a + rm[:, None] * sam + (k * BK + rk)[None, :] * sak)
        bv = tl.load(b + (k * BK + rk)[:, None] * sbk + rn[None, :] * sbn)
        acc += tl.dot(av, bv)
    tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.float16))
''',
    # the Triton tutorial's matmul: grouped program order, masked K loop, fp32 accumulate, output in
    # C's element type (1-D grid)
    "matmul_grouped": '''
@triton.jit
def KNAME(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    num_pid_in_group = GM * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GM
    group_size_m = min(num_pid_m - first_pid_m, GM)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BM + tl.arange(0, BM)) % M
    offs_bn = (pid_n * BN + tl.arange(0, BN)) % N
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + (offs_am[:, None] * sam + offs_k[None, :] * sak)
    b_ptrs = b_ptr + (offs_k[:, None] * sbk + offs_bn[None, :] * sbn)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK * sak
        b_ptrs += BK * sbk
    c = acc.to(c_ptr.dtype.element_ty)
    offs_cm = pid_m * BM + tl.arange(0, BM)
    offs_cn = pid_n * BN + tl.arange(0, BN)
    c_ptrs = c_ptr + scm * offs_cm[:, None] + scn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)
''',
    # integer histogram with tl.atomic_add (result unused)
    "hist": '''
@triton.jit
def KNAME(x, h, n, BINS: tl.constexpr, B: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    m = offs < n
    v = tl.load(x + offs, mask=m, other=0)
    tl.atomic_add(h + (v % BINS), 1, mask=m)
''',
    # layer norm, one program per row (ncols <= B)
    "layernorm": '''
@triton.jit
def KNAME(x, w, bias, y, ncols, eps, B: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, B)
    m = offs < ncols
    v = tl.load(x + row * ncols + offs, mask=m, other=0.0).to(tl.float32)
    mean = tl.sum(v, axis=0) / ncols
    d = tl.where(m, v - mean, 0.0)
    var = tl.sum(d * d, axis=0) / ncols
    r = 1.0 / tl.sqrt(var + eps)
    out = d * r * tl.load(w + offs, mask=m) + tl.load(bias + offs, mask=m)
    tl.store(y + row * ncols + offs, out, mask=m)
''',
    # a copy with an ``applypriority.global`` in inline asm: hbfcc refuses that operation, so the
    # kernel comes out instrumented but NOT admitted (the launch gate's test case)
    "prio": r'''
@triton.jit
def KNAME(x, o, n, B: tl.constexpr):
    # applypriority.global changes the state of global memory lines: hbfcc refuses it (not admitted)
    offs = tl.program_id(0) * B + tl.arange(0, B)
    m = offs < n
    v = tl.load(x + offs, mask=m)
    r = tl.inline_asm_elementwise("applypriority.global.L2::evict_normal [$1], 128;\n mov.u32 $0, 0;", "=r,l",
                                  [x + offs], dtype=tl.int32, is_pure=False, pack=1)
    tl.store(o + offs, v + r.to(tl.float32), mask=m)
''',
    # o = x, masked
    "copy": '''
@triton.jit
def KNAME(x, o, n, B: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    m = offs < n
    tl.store(o + offs, tl.load(x + offs, mask=m), mask=m)
''',
}


def source(names: Mapping[str, str]) -> str:
    """The text of a module defining each ``name -> kind`` of ``names`` (kinds: :data:`KERNELS`)."""
    if not names:
        raise ConfigError("triton_kernels.source: no kernels asked for", field="names")
    parts = [HEADER]
    for name, kind in names.items():
        if kind not in KERNELS:
            raise ConfigError(f"triton_kernels: unknown kernel kind {kind!r} for {name!r} "
                              f"(known: {', '.join(sorted(KERNELS))})", field="kind", value=kind)
        if not name.isidentifier():
            raise ConfigError(f"triton_kernels: {name!r} is not a Python identifier", field="name", value=name)
        parts.append(KERNELS[kind].replace("KNAME", name))
    return "".join(parts)


def load(path: str | Path, names: Mapping[str, str], module: str | None = None) -> ModuleType:
    """Write :func:`source` of ``names`` to ``path`` and import it (as ``module``, default the file's
    stem). Needs Triton. The file stays: Triton reads the kernels' source from it."""
    return import_text(path, source(names), module)


def import_text(path: str | Path, text: str, module: str | None = None) -> ModuleType:
    """Write kernel source ``text`` to ``path`` and import it (Triton reads a kernel's source from its file)."""
    path = Path(path)
    atomic_write_text(path, text)
    spec = importlib.util.spec_from_file_location(module or path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
