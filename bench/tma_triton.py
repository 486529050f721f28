#!/usr/bin/env python3
"""Triton TMA kernels through the runtime (issue 15, item 5): a TMA matmul with host descriptors, one with device
descriptors, and a FlashAttention-style forward kernel, their inputs registered, admitted, bit-identical, counted.

    python3 bench/tma_triton.py --dry-run --out bench/results          # CPU: compile through hbfcc-ptxas, admission
    PYTHONUNBUFFERED=1 python3 bench/tma_triton.py --out $OUT --budget-s 270     # GPU (H100/H200), ~1-2 min

Kernels (this file's own Triton code; fp16 in, fp32 accumulate):
  matmul_host   C = A @ B, host ``TensorDescriptor``s (triton.tools.tensor_descriptor) for A [M,K], B [K,N], C [M,N];
                the K loop pipelined (tl.range num_stages=3)
  matmul_dev    the same with ``tl.make_tensor_descriptor`` built on the device (triton.set_allocator gives the
                global scratch the descriptors are written to), num_stages=4
  attn_fwd      FlashAttention-style forward (non-causal): one Q block of BM rows resident, a loop over the K/V
                blocks of its (batch, head) loaded through device descriptors (pipelined, num_stages=3), online
                softmax in base 2, O = P V / l; batch 2, heads 4, seq 1024, head dim 64

GPU mode (each kernel a case in its own child process, as bench/runtime_triton.py runs its parts, through its
run_child; the TMA device path opted in with HBF_TMA_DEVICE=1 as bench/tma_semantics.py does): the real hbfd on a
private socket with a fixed 5 us source (devpath_common.source_profile ``fixed5us``), runtime_cuda.attach() +
Session.install_triton_hooks(). Per kernel: built twice in the child, ``<k>_plain`` with CUDA's ptxas and ``<k>_hbf`` with TRITON_PTXAS_PATH=hbfcc-ptxas
(the same real ptxas underneath); the plain one runs with nothing registered, then the kernel's inputs (A and B;
Q, K and V) are registered as timing ranges and the hbf one runs on the same inputs. Recorded: the hbf build's
admission (the session's binding and the artifact: admitted, reasons, TMA sites), outputs bit-identical (bytes
equal), the session counters of the hbf kernel for that launch (read requests and bytes; tma_copies,
tma_hbf_bytes, tma_hbm_bytes, tma_oob_bytes, tma_phases, tma_consumed, tma_stale, tma_leaked; checked:
tma_copies > 0, tma_hbf_bytes > 0, tma_phases == tma_consumed, tma_stale == 0, tma_leaked == 0), plain vs hbf
launch time with the inputs registered (median of REPS launches, each between two events), and, after the ranges
are unregistered, the hbf build's native cost: BACK_TO_BACK launches queued between two events, plain and hbf
interleaved, PAIRS pairs (issue 15's goal: <= 1.02x). These kernels take 8-20 us, less than the host's launch path
(Triton's launcher and the session's launch selection), so that ratio ("native_cost") is the host's per-launch cost
(docs/RESULTS.md "Stop 44"); "native_cost_graph" measures the goal: the same launches captured into a CUDA graph per
build and replayed (the host path runs at capture only), the replay's time per launch. A replay runs the body its
module's words select when it runs: with nothing registered the session keeps __hb_state 0 and the attach switch in
the module's constant bank (__hb_detached) 1 (the native body after one constant-bank read: variant "hbf", the
goal's ratio); "hbf_attached" forces the session's state (the band's span read first: what stop 45's graphs ran);
the variant builds (HBF_VARIANTS: "hbfscope", the native copy in its own register scope; the hbf build shares the
instrumented version's registers) and the probe builds (PROBES: the plain build's PTX with the prologue's loads or the 1 KiB table
added, one at a time, by a ptxas wrapper, this file's --probe-ptxas; "c0" the wrapper with no edit) split the
difference into its parts.

Every case runs in try/except in its child (a failure, a fault or a hang past --case-timeout costs that case only),
the child rewrites <out>/tma_triton.<kernel>.partial.json atomically after every stage, the parent
<out>/tma_triton.json after every case (tma_triton_dry.json for --dry-run), and no case starts after --budget-s
seconds.

``--native-entry`` (wt/natent15): each kernel also built with HBFCC_NATIVE_ENTRY=1 (``<k>_natent``: the untouched
kernel as its own entry ``<k>_natent__hbnat``, which the session launches for a host launch decided native) and, with
nothing registered, plain / hbf / natent measured on HOST launches side by side (``native_cost_host_natent``: device ms
per launch behind a GPU sleep the host's queueing fits in, the ratio to plain per round, the host's us per launch to
queue apart, the native-entry launches counted); ``--no-graph`` skips the graph part.

``--graph-native`` (wt/gnat15): the natent build's launches captured into CUDA graphs under each HBF_GRAPH_NATIVE mode
(off: the instrumented entry; bounded: kept instrumented for these kernels, whose addresses come from descriptors;
all: the native entry, an unbounded record) and replayed interleaved with the plain build's graph, nothing registered
(``native_cost_graph_natent``: device ms per launch, the ratio to plain per round, the captures counted, a
registration refused while the record is held, the output bit-identical, the records released).

CPU mode (``--dry-run``): each kernel compiled for GPUTarget("cuda", 90, 32) through hbfcc-ptxas (host descriptors
as ``tensordesc<...>`` parameters; no GPU, no allocator needed to compile), and its admission read from the
artifact: admitted, reasons, the TMA sites (the rewrite's tma counts and hooks), whether the cubin calls the
helpers. Exit 0 when every kernel is admitted with its TMA copies rewritten.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _p in (str(ROOT), str(ROOT / "bench")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from devpath_common import gpu_info, prepare_run, stats, use_ptxas, write_json  # noqa: E402
from hbfcommon.env import env_set  # noqa: E402

log = logging.getLogger("tma_triton")

KERNELS = ("matmul_host", "matmul_dev", "attn_fwd")
REPS = 7               # registered: launches timed one by one (median)
PAIRS = 11             # native cost: interleaved plain / hbf pairs
BACK_TO_BACK = 20      # native cost: launches queued between two events
SLEEP_CYCLES = 2_000_000   # torch.cuda._sleep before each timed window
TMA_FIELDS = ("tma_copies", "tma_hbf_bytes", "tma_hbm_bytes", "tma_oob_bytes", "tma_phases", "tma_consumed",
              "tma_stale", "tma_leaked")

# shapes: matmul M = N = K = 1024 (BM = BN = 128, BK = 64); attention Z = 2, H = 4, N_CTX = 1024, D = 64
MM = {"M": 1024, "N": 1024, "K": 1024, "BM": 128, "BN": 128, "BK": 64}
AT = {"Z": 2, "H": 4, "N_CTX": 1024, "D": 64, "BM": 128, "BN": 64}

# one text, SFX replaced by plain / hbf (two names: Triton's caches keep the two builds apart)
KERNEL_TEXT = r'''
import triton
import triton.language as tl


@triton.jit
def matmul_host_SFX(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                    STAGES: tl.constexpr):
    # C tile (pm, pn) = sum over k of A[pm, k] @ B[k, pn]; every tile moved by TMA (host-built descriptors)
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in tl.range(0, K, BK, num_stages=STAGES):
        a = a_desc.load([pm * BM, k0])
        b = b_desc.load([k0, pn * BN])
        acc = tl.dot(a, b, acc)
    c_desc.store([pm * BM, pn * BN], acc.to(tl.float16))


@triton.jit
def matmul_dev_SFX(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                   STAGES: tl.constexpr):
    # the same product, the descriptors built on the device (global scratch from triton.set_allocator)
    ad = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    bd = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    cd = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in tl.range(0, K, BK, num_stages=STAGES):
        acc = tl.dot(ad.load([pm * BM, k0]), bd.load([k0, pn * BN]), acc)
    cd.store([pm * BM, pn * BN], acc.to(tl.float16))


@triton.jit
def attn_fwd_SFX(q_ptr, k_ptr, v_ptr, o_ptr, qk_scale, ZH, N_CTX, D: tl.constexpr, BM: tl.constexpr,
                 BN: tl.constexpr, STAGES: tl.constexpr):
    # Q, K, V, O viewed as [ZH * N_CTX, D] row-major; program (m, zh) owns rows zh * N_CTX + m * BM .. + BM.
    # qk_scale = softmax scale * log2(e): the running max and sum are kept in base 2
    qd = tl.make_tensor_descriptor(q_ptr, shape=[ZH * N_CTX, D], strides=[D, 1], block_shape=[BM, D])
    kd = tl.make_tensor_descriptor(k_ptr, shape=[ZH * N_CTX, D], strides=[D, 1], block_shape=[BN, D])
    vd = tl.make_tensor_descriptor(v_ptr, shape=[ZH * N_CTX, D], strides=[D, 1], block_shape=[BN, D])
    od = tl.make_tensor_descriptor(o_ptr, shape=[ZH * N_CTX, D], strides=[D, 1], block_shape=[BM, D])
    pid_m = tl.program_id(0)
    base = tl.program_id(1) * N_CTX
    q = qd.load([base + pid_m * BM, 0])
    m_run = tl.full((BM,), float("-inf"), dtype=tl.float32)
    l_run = tl.zeros((BM,), dtype=tl.float32)
    acc = tl.zeros((BM, D), dtype=tl.float32)
    for n0 in tl.range(0, N_CTX, BN, num_stages=STAGES):
        kt = kd.load([base + n0, 0])
        s = tl.dot(q, tl.trans(kt)) * qk_scale
        m_new = tl.maximum(m_run, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_run - m_new)
        l_run = l_run * alpha + tl.sum(p, 1)
        vt = vd.load([base + n0, 0])
        acc = tl.dot(p.to(tl.float16), vt, acc * alpha[:, None])
        m_run = m_new
    od.store([base + pid_m * BM, 0], (acc / l_run[:, None]).to(tl.float16))
'''


def kernels_text() -> str:
    """Both builds' source: each kernel as <name>_plain and <name>_hbf."""
    head, body = KERNEL_TEXT.split("\n\n\n", 1)
    return head + "\n\n\n" + body.replace("_SFX(", "_plain(") + "\n\n" + body.replace("_SFX(", "_hbf(")


def load_kernels(work: Path):
    from workloads.triton_kernels import import_text  # noqa: PLC0415
    return import_text(work / "tk_tma_triton.py", kernels_text())


# ------------------------------------------------------------------------------------------------ native-cost probes
# What the `_hbf` build's native body carries that the plain build does not, added ONE AT A TIME to the plain build's
# PTX (by the ptxas wrapper below, chosen by the kernel's name <k>_probe_<probe>), so that the graph measurement can
# say which part costs what (docs/RESULTS.md "Stop 45 (CPU, wt/tmanat)"):
#   ld1      the prologue with the module detached (__hb_state 0): LDC of the global's address, one dependent global
#            load, a branch on it (what hbfcc's prologue runs when the word is 0)
#   ld3      the prologue with the module attached and nothing registered (the stop-45 graphs): LDC, a load of the
#            state pointer, a load of the band's span through it, a branch on the span
#   smem     1 KiB more static shared memory (the TMA completion table's place)
#   ld3smem  both
#   c1       the switch in the module's constant bank instead (ld.const of a .const word, as the launch descriptor
#            __hb_cdesc is read): what a prologue without a global load would cost (hbfcc's prologue since wt/nat15:
#            the attach switch __hb_detached)
#   c0       no edit at all: the plain PTX through the same wrapper and build path (its own name, its own module),
#            so that the card can tell what the probe build path costs from what the edits cost (stop 47: every
#            matmul_host probe, even c1, ran x1.08)
PROBES = ("c0", "ld1", "ld3", "smem", "ld3smem", "c1")
PROBE_GLOBALS = (".global .align 8 .u64 __hbprobe_zero = 0;\n"
                 ".const .align 8 .u64 __hbprobe_cword = 0;\n"
                 ".global .align 8 .b8 __hbprobe_blk[16];\n"
                 ".global .align 8 .u64 __hbprobe_ptr = generic(__hbprobe_blk);\n")
PROBE_SMEM = ".shared .align 16 .b8 __hbprobe_tbl[1024];\n"
PROBE_REGS = "\t.reg .b64 %hbq_s, %hbq_lo, %hbq_span;\n\t.reg .b32 %hbq_r;\n\t.reg .pred %hbq_p, %hbq_off, %hbq_q;\n"
PROBE_CODE = {
    "ld1": ["ld.global.u64 %hbq_s, [__hbprobe_zero];", "setp.ne.u64 %hbq_p, %hbq_s, 0;", "@%hbq_p bra $HBPROBE_OUT;"],
    "c1": ["ld.const.u64 %hbq_s, [__hbprobe_cword];", "setp.ne.u64 %hbq_p, %hbq_s, 0;", "@%hbq_p bra $HBPROBE_OUT;"],
    "ld3": ["ld.global.u64 %hbq_s, [__hbprobe_ptr];", "setp.eq.u64 %hbq_off, %hbq_s, 0;", "mov.b64 %hbq_lo, 0;",
            "mov.b64 %hbq_span, 0;", "@!%hbq_off ld.global.u64 %hbq_lo, [%hbq_s];",
            "@!%hbq_off ld.global.u64 %hbq_span, [%hbq_s+8];", "setp.ne.u64 %hbq_p, %hbq_span, 0;",
            "@%hbq_p bra $HBPROBE_OUT;"],
    # a store no launch makes (grid z is 1), so that ptxas keeps the table
    "smem": ["mov.u32 %hbq_r, %nctaid.z;", "setp.eq.u32 %hbq_q, %hbq_r, 12345;",
             "@%hbq_q st.shared.u32 [__hbprobe_tbl], %hbq_r;"],
}


def probe_text() -> str:
    """The probe builds' source: each kernel as <name>_probe_<probe> for every probe (Triton's caches keep them
    apart by name; the ptxas wrapper edits each by its name)."""
    head, body = KERNEL_TEXT.split("\n\n\n", 1)
    return head + "\n\n\n" + "\n\n".join(body.replace("_SFX(", f"_probe_{p}(") for p in PROBES)


def load_probes(work: Path):
    from workloads.triton_kernels import import_text  # noqa: PLC0415
    return import_text(work / "tk_tma_probe.py", probe_text())


# the hbf build's variants: each kernel as <name>_<variant>, built through hbfcc-ptxas with these knobs (read per
# hbfcc-ptxas run; the knob is in hbfcc-ptxas's --version marker, so Triton's cache keeps the builds apart too)
#   hbfscope    HBFCC_NATIVE_SCOPE=1: the copy declares its own registers (wt/nat15; slower on 2 of 3 kernels in
#               stop 48, where it was the default and this variant was "hbfshared", =0: the hbf build since)
HBF_VARIANTS = {"hbfscope": {"HBFCC_NATIVE_SCOPE": "1"}}
# the native entry (HBFCC_NATIVE_ENTRY=1, wt/natent15): <k>__hbnat, the untouched kernel as its own .entry, which the
# session launches for a HOST launch decided native (nothing registered); graphs keep the instrumented entry. Measured
# on host launches (_host_native_entry_cost), not in graphs: --native-entry
NATENT_VARIANT = {"natent": {"HBFCC_NATIVE_ENTRY": "1"}}


def variant_text(variants: dict | None = None) -> str:
    """The variant builds' source: each kernel as <name>_<variant> for every entry of ``variants`` (HBF_VARIANTS)."""
    head, body = KERNEL_TEXT.split("\n\n\n", 1)
    return head + "\n\n\n" + "\n\n".join(body.replace("_SFX(", f"_{v}(") for v in (variants or HBF_VARIANTS))


def load_variants(work: Path, variants: dict | None = None):
    from workloads.triton_kernels import import_text  # noqa: PLC0415
    vs = variants or HBF_VARIANTS
    stem = "tk_tma_variant" if vs is HBF_VARIANTS else "tk_tma_" + "_".join(vs)
    return import_text(work / f"{stem}.py", variant_text(vs))


def _variant_launchers(name: str, ins: dict, work: Path, torch, outputs: dict, variants: dict | None = None) -> dict:
    """The HBF_VARIANTS builds (or ``variants``) of one kernel (compiled at their first launch, through hbfcc-ptxas with
    the variant's knobs; nothing registered then), each checked once against the plain build's output
    (``outputs["plain"]``)."""
    V = load_variants(work, variants)
    go: dict = {}
    use_ptxas("hbf")
    for vname, knobs in (variants or HBF_VARIANTS).items():
        with env_set(knobs):
            _checked_launcher(V, name, vname, vname, ins, torch, outputs, go)
    return go


def _checked_launcher(mod, name: str, sfx: str, key: str, ins: dict, torch, outputs: dict, go: dict) -> None:
    """<name>_<sfx> of ``mod`` compiled and launched once, its output compared with ``outputs["plain"]`` (bytes equal)
    into ``outputs[key]``, its launcher into ``go[key]``; a failure costs this build only (its error in outputs)."""
    try:
        fn = _launcher(mod, name, sfx, ins, torch)
        _, out = fn()
        torch.cuda.synchronize()
        outputs[key] = bool(torch.equal(out.view(torch.int8), outputs["plain"].view(torch.int8)))
        go[key] = fn
    except Exception as e:  # noqa: BLE001
        outputs[key] = f"error: {type(e).__name__}: {e}"[:1000]


def probe_ptx(ptx: str) -> str:
    """The plain build's PTX of a <name>_probe_<probe> entry with that probe's additions (PROBES); any other PTX
    unchanged. The code goes after the entry's register declarations, the branch's target before its end."""
    import re  # noqa: PLC0415
    m = re.search(r"^\.visible \.entry (\w+)_probe_(\w+)\(", ptx, re.M)
    if m is None:
        return ptx
    probe = m.group(2)
    if probe not in PROBES:
        raise ValueError(f"unknown probe {probe!r} (entry {m.group(0)})")
    if probe == "c0":
        return ptx
    parts = ["ld3", "smem"] if probe == "ld3smem" else [probe]
    lines = ptx.split("\n")
    entry = next(i for i, ln in enumerate(lines) if ln.startswith(".visible .entry "))
    brace = next(i for i in range(entry, len(lines)) if lines[i].strip() == "{")
    after = brace + 1
    while after < len(lines) and lines[after].strip().startswith(".reg "):
        after += 1
    code = PROBE_REGS + "".join(f"\t{ins}\n" for part in parts for ins in PROBE_CODE[part])
    end = next(i for i in range(after, len(lines)) if lines[i].startswith("$L__func_end"))
    out = lines[:entry] + [PROBE_GLOBALS + (PROBE_SMEM if "smem" in parts else "")] + lines[entry:after] \
        + [code] + lines[after:end] + ["$HBPROBE_OUT:", "\tret;"] + lines[end:]
    return "\n".join(out)


def probe_ptxas(argv: list[str]) -> int:
    """TRITON_PTXAS_PATH for the probe builds (write_probe_ptxas): the PTX file among ptxas's arguments edited
    (probe_ptx), then the real ptxas (HBF_BENCH_REAL_PTXAS) with the same arguments."""
    real = os.environ["HBF_BENCH_REAL_PTXAS"]
    for a in argv:
        if a.endswith(".ptx") and Path(a).is_file():
            src = Path(a).read_text()
            edited = probe_ptx(src)
            if edited != src:
                Path(a).write_text(edited)
    os.execv(real, [real, *argv])
    return 127   # not reached


def write_probe_ptxas(work: Path) -> Path:
    """An executable wrapper (this file's --probe-ptxas) Triton can be pointed at."""
    w = work / "probe-ptxas"
    w.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} --probe-ptxas \"$@\"\n")
    w.chmod(0o755)
    return w


# launch / compile configuration per kernel: constexprs, num_warps, num_stages (the loops' own num_stages rule)
CONFIG = {"matmul_host": ({"BM": MM["BM"], "BN": MM["BN"], "BK": MM["BK"], "STAGES": 3}, 8),
          "matmul_dev": ({"BM": MM["BM"], "BN": MM["BN"], "BK": MM["BK"], "STAGES": 4}, 8),
          "attn_fwd": ({"D": AT["D"], "BM": AT["BM"], "BN": AT["BN"], "STAGES": 3}, 8)}


def cpu_signature(kernel: str) -> tuple[dict, dict]:
    """(signature, attrs) of a kernel for triton.compile without a GPU: pointers and the 16-divisible
    integers marked as the JIT marks them (tt.divisibility 16), host descriptors as tensordesc types."""
    cx, _ = CONFIG[kernel]
    if kernel == "matmul_host":
        sig = {"a_desc": f"tensordesc<fp16[{MM['BM']}, {MM['BK']}]>", "b_desc": f"tensordesc<fp16[{MM['BK']}, {MM['BN']}]>",
               "c_desc": f"tensordesc<fp16[{MM['BM']}, {MM['BN']}]>", "K": "i32"}
        div = ["K"]
    elif kernel == "matmul_dev":
        sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32"}
        div = list(sig)
    else:
        sig = {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "o_ptr": "*fp16", "qk_scale": "fp32",
               "ZH": "i32", "N_CTX": "i32"}
        div = ["q_ptr", "k_ptr", "v_ptr", "o_ptr", "N_CTX"]
    names = list(sig)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in div}
    sig.update({k: "constexpr" for k in cx})
    return sig, attrs


def artifact_admission(art: dict | None) -> dict:
    """What an hbfcc artifact says about its (one) kernel: admitted, reasons, the TMA sites."""
    ka = (art or {}).get("kernels", [{}])[0] if art else {}
    tma = ka.get("tma") or {}
    smem = [(ka.get("ptxas_before") or {}).get("smem_bytes"), (ka.get("ptxas_after") or {}).get("smem_bytes")]
    return {"artifact": art is not None, "admitted": ka.get("admitted"),
            "reasons": (ka.get("not_admitted_reasons") or [])[:5], "tma": tma, "tma_hooks": ka.get("tma_hooks"),
            "tma_tensor_copies": sum(v for k, v in tma.items() if str(k).startswith("tma.") and ".tensor." in str(k)),
            "registers_plain_instrumented": [(ka.get("ptxas_before") or {}).get("registers"),
                                             (ka.get("ptxas_after") or {}).get("registers")],
            "smem_plain_instrumented": smem,
            "native_entry": ka.get("native_entry"), "native_entry_reason": ka.get("native_entry_reason"),
            "dynamic_smem_base_kept": dynamic_smem_base_kept(*smem),
            "helper": Path(art["helper"]["path"]).name if art and art.get("helper") else None}


def dynamic_smem_base_kept(plain: int | None, instrumented: int | None) -> bool:
    """Whether the instrumented build's static shared bytes leave the kernel's dynamic shared memory (Triton's
    global_smem, placed after them) as aligned as the plain build's: they may grow by whole DYNAMIC_SMEM_ALIGN units
    only. A 392-byte completion table moved global_smem 400 B and every instrumented TMA load faulted with a
    misaligned address on the H100 (2026-12-06; docs/RESULTS.md "Issue 15: the Triton TMA kernels' misaligned
    address")."""
    from hbfcc.passes.tma import DYNAMIC_SMEM_ALIGN  # noqa: PLC0415
    if plain is None or instrumented is None:
        return False
    return (instrumented - plain) % DYNAMIC_SMEM_ALIGN == 0


def admitted_with_tma(a: dict) -> bool:
    """The dry run's (and the test's) criterion: an artifact, admitted, every TMA tensor copy of the PTX a rewritten
    site, hooks emitted, the helpers linked into the cubin and the dynamic shared memory as aligned as in the plain
    build (dynamic_smem_base_kept)."""
    return bool(a.get("artifact") and a.get("admitted") and a.get("tma_tensor_copies", 0) >= 1
                and a.get("tma_tensor_copies") == a.get("ptx_tensor_copies")
                and (a.get("tma_hooks") or 0) >= 1 and a.get("cubin_calls_helpers") and a.get("dynamic_smem_base_kept"))


# ------------------------------------------------------------------------------------------------ CPU
def dry_run(K, res: dict, out_path: Path, deadline: float, names: tuple = KERNELS) -> None:
    import triton  # noqa: PLC0415
    from triton.backends.compiler import GPUTarget  # noqa: PLC0415
    from triton.compiler import ASTSource  # noqa: PLC0415

    from hbfcommon import artifact as A  # noqa: PLC0415
    adm = res.setdefault("admission", {})
    use_ptxas("hbf")
    for name in names:
        if time.time() > deadline:
            adm[name] = {"error": "budget spent before this kernel"}
            continue
        t = time.time()
        try:
            sig, attrs = cpu_signature(name)
            cx, warps = CONFIG[name]
            k = triton.compile(ASTSource(fn=getattr(K, f"{name}_hbf"), signature=sig, constexprs=dict(cx), attrs=attrs),
                               target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
            ptx = k.asm["ptx"]
            a = artifact_admission(A.lookup_by_ptx(ptx.encode()))
            a.update({"seconds": round(time.time() - t, 1), "ptx_tensor_copies": ptx.count("cp.async.bulk.tensor"),
                      "ptx_tensormap_ops": ptx.count("tensormap."),
                      "ptx_sha256": hashlib.sha256(ptx.encode()).hexdigest()[:16],
                      "cubin_calls_helpers": b"__hb_" in k.asm["cubin"],
                      "tensordesc_meta": getattr(k.metadata, "tensordesc_meta", None)})
            a["ok"] = admitted_with_tma(a)
            adm[name] = a
        except Exception as e:  # noqa: BLE001
            adm[name] = {"error": f"{type(e).__name__}: {e}"[:2000], "traceback": traceback.format_exc()[-3000:],
                         "ok": False}
        log.info("%s: %s", name, {k: adm[name].get(k) for k in ("ok", "admitted", "reasons", "tma", "tma_hooks", "error")})
        write_json(out_path, res)
    res["ok"] = all(adm.get(n, {}).get("ok") for n in names)


# ------------------------------------------------------------------------------------------------ GPU
def _inputs(name: str, torch):
    g = torch.Generator(device="cuda").manual_seed(15)
    if name.startswith("matmul"):
        A = torch.randn(MM["M"], MM["K"], device="cuda", generator=g).to(torch.float16)
        B = torch.randn(MM["K"], MM["N"], device="cuda", generator=g).to(torch.float16)
        return {"A": A, "B": B}
    shape = (AT["Z"], AT["H"], AT["N_CTX"], AT["D"])
    return {t: torch.randn(shape, device="cuda", generator=g).to(torch.float16) for t in ("Q", "K", "V")}


def _launcher(K, name: str, sfx: str, ins: dict, torch):
    """A launch of <name>_<sfx> on the inputs into this launcher's own output (allocated once, filled with -1
    here, so the timed windows hold the kernel alone): () -> (compiled kernel, output tensor)."""
    cx, warps = CONFIG[name]
    fn = getattr(K, f"{name}_{sfx}")
    if name.startswith("matmul"):
        out = torch.full((MM["M"], MM["N"]), -1.0, device="cuda", dtype=torch.float16)
        grid = (MM["M"] // MM["BM"], MM["N"] // MM["BN"])
        if name == "matmul_host":
            from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: PLC0415
            descs = (TensorDescriptor.from_tensor(ins["A"], [MM["BM"], MM["BK"]]),
                     TensorDescriptor.from_tensor(ins["B"], [MM["BK"], MM["BN"]]),
                     TensorDescriptor.from_tensor(out, [MM["BM"], MM["BN"]]))
            return lambda: (fn[grid](*descs, MM["K"], num_warps=warps, **cx), out)
        return lambda: (fn[grid](ins["A"], ins["B"], out, MM["M"], MM["N"], MM["K"], num_warps=warps, **cx), out)
    out = torch.full_like(ins["Q"], -1.0)
    zh = AT["Z"] * AT["H"]
    scale = (AT["D"] ** -0.5) * 1.4426950408889634
    grid = (AT["N_CTX"] // AT["BM"], zh)
    return lambda: (fn[grid](ins["Q"], ins["K"], ins["V"], out, scale, zh, AT["N_CTX"], num_warps=warps, **cx), out)


SWIZZLE_BYTES = 128    # the widest TMA swizzle: Triton 3.6 clamps a box's inner extent to it


def box_copies(rows: int, cols: int, elem: int = 2) -> int:
    """TMA copies one [rows, cols] tile load or store takes: Triton 3.6 clamps the box's inner extent to the 128-byte
    swizzle (the kernel's tensordesc_meta block_size) and moves a wider tile as several boxes, issued by as many
    lanes from one PTX site (a [64, 128] fp16 tile: two [64, 64] boxes)."""
    del rows
    return -(-cols * elem // SWIZZLE_BYTES)


def expected_tma(name: str) -> dict:
    """What the kernel's TMA copies move, all in bounds: load and store copies (box_copies) and the bytes the loads
    read from the inputs (every C tile reads its A row panel and B column panel; every Q block reads its Q tile and
    all K and V tiles of its (batch, head))."""
    if name.startswith("matmul"):
        tiles = (MM["M"] // MM["BM"]) * (MM["N"] // MM["BN"])
        steps = MM["K"] // MM["BK"]
        return {"load_copies": tiles * steps * (box_copies(MM["BM"], MM["BK"]) + box_copies(MM["BK"], MM["BN"])),
                "store_copies": tiles * box_copies(MM["BM"], MM["BN"]),
                "input_bytes_read": tiles * steps * (MM["BM"] * MM["BK"] + MM["BK"] * MM["BN"]) * 2}
    blocks = (AT["N_CTX"] // AT["BM"]) * AT["Z"] * AT["H"]
    steps = AT["N_CTX"] // AT["BN"]
    return {"load_copies": blocks * (box_copies(AT["BM"], AT["D"]) + 2 * steps * box_copies(AT["BN"], AT["D"])),
            "store_copies": blocks * box_copies(AT["BM"], AT["D"]),
            "input_bytes_read": blocks * (AT["BM"] * AT["D"] + 2 * steps * AT["BN"] * AT["D"]) * 2}


def _reference(name: str, ins: dict, torch):
    if name.startswith("matmul"):
        return ins["A"].float() @ ins["B"].float()
    s = (ins["Q"].float() @ ins["K"].float().transpose(-1, -2)) * AT["D"] ** -0.5
    return torch.softmax(s, -1) @ ins["V"].float()


def _event_ms(fn, torch, n: int = 1) -> float:
    """GPU time of n launches of fn between two events, per launch (ms). A GPU sleep first (about 1 ms) keeps the
    host's launch work (Triton's launcher, the session's hook) out of the window: the launches queue behind it."""
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(SLEEP_CYCLES)
    e0.record()
    for _ in range(n):
        fn()
    e1.record()
    torch.cuda.synchronize()
    return e0.elapsed_time(e1) / n


def _sleep_ms_per_cycle(torch) -> float:
    """What one cycle of torch.cuda._sleep takes on this card (ms), from SLEEP_CYCLES between two events."""
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    torch.cuda._sleep(SLEEP_CYCLES)
    e1.record()
    torch.cuda.synchronize()
    return e0.elapsed_time(e1) / SLEEP_CYCLES


def _host_window(fn, torch, n: int, sleep_cycles: int) -> dict:
    """n host launches of fn queued behind a GPU sleep long enough for the host to queue them all (``late``: the
    sleep had ended before the host queued the last one, so the window may hold host time): the device's time per
    launch (ms), between two events, and the host's time per launch (us) to queue it -- Triton's launcher and the
    session's gate and selection included."""
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(sleep_cycles)
    e0.record()
    t = time.perf_counter_ns()
    for _ in range(n):
        fn()
    host_ns = time.perf_counter_ns() - t
    late = bool(e0.query())
    e1.record()
    torch.cuda.synchronize()
    return {"ms": e0.elapsed_time(e1) / n, "host_us": host_ns / n / 1000, "late": late}


def _host_native_entry_cost(s, go: dict, names: dict, torch) -> dict:
    """The native entry's native cost on HOST launches (not graphs), nothing registered, in one process: the plain
    build, the hbf build (its module detached: the instrumented entry's prologue reads the attach switch and branches
    to the native body) and the natent build (HBFCC_NATIVE_ENTRY=1: the session launches <k>__hbnat, the untouched
    kernel) side by side, PAIRS rounds of BACK_TO_BACK launches each, interleaved, each window behind a GPU sleep
    sized from the slowest host queueing seen (x3, at least SLEEP_CYCLES) so that the device's time is measured, not
    the host's. Device: per launch (ms), median and min/max, and the ratio to plain per round. Host (reported apart):
    the time to queue one launch (us) -- Triton's launcher, the session's gate and per-launch selection, the launcher
    wrapper of the native entry -- and its excess over plain (the gate's own host overhead)."""
    keys = [k for k in ("plain", "hbf", "natent") if k in go]
    for k in keys:
        go[k]()
    torch.cuda.synchronize()
    per_cycle = _sleep_ms_per_cycle(torch)
    warm = {k: _host_window(go[k], torch, BACK_TO_BACK, SLEEP_CYCLES)["host_us"] for k in keys}
    need_ms = 3 * max(warm.values()) * BACK_TO_BACK / 1000
    cycles = max(SLEEP_CYCLES, int(need_ms / per_cycle) if per_cycle > 0 else SLEEP_CYCLES)
    w: dict = {k: [] for k in keys}
    sel0 = json.loads(json.dumps(s.counters(publish=False).get("launch_selection") or {}))
    for _ in range(PAIRS):
        for k in keys:
            w[k].append(_host_window(go[k], torch, BACK_TO_BACK, cycles))
    sel1 = s.counters(publish=False).get("launch_selection") or {}
    out: dict = {"pairs": PAIRS, "back_to_back": BACK_TO_BACK, "sleep_cycles": cycles, "sleep_ms": cycles * per_cycle,
                 "goal": "<= 1.02 (device time per launch, natent vs plain)", "variants": {},
                 "what": "nothing registered; host launches (no graph): each round BACK_TO_BACK launches of each build "
                         "behind a GPU sleep the host's queueing fits in; device ms per launch between two events, "
                         "host us per launch to queue"}
    for k in keys:
        ms, host = [x["ms"] for x in w[k]], [x["host_us"] for x in w[k]]
        v = {"device_ms": stats(ms), "host_us": stats(host), "late_windows": sum(x["late"] for x in w[k])}
        if k != "plain":
            ratio = [a["ms"] / p["ms"] for a, p in zip(w[k], w["plain"])]
            v["ratio"] = stats(ratio)
            v["extra_us_median"] = round(1000 * (statistics.median(ms) - statistics.median(x["ms"] for x in w["plain"])), 3)
            v["host_extra_us_median"] = round(statistics.median(host) - statistics.median(x["host_us"] for x in w["plain"]), 3)
        kname = names.get(k)
        if kname:
            a, b = (sel0.get(kname) or {}), (sel1.get(kname) or {})
            v["launch_selection"] = {f: int(b.get(f, 0)) - int(a.get(f, 0))
                                     for f in ("native", "native_entry", "instrumented", "captured")}
        out["variants"][k] = v
    nat = out["variants"].get("natent") or {}
    out["ratio_median"] = (nat.get("ratio") or {}).get("median")
    out["native_entry_used"] = (nat.get("launch_selection") or {}).get("native_entry") == PAIRS * BACK_TO_BACK
    return out


def _graph(fn, torch, warm: bool = True):
    """BACK_TO_BACK launches of fn captured into one CUDA graph (fn compiled and, with warm, launched once first:
    its host-side selection made before the capture)."""
    if warm:
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(BACK_TO_BACK):
            fn()
    g.replay()
    torch.cuda.synchronize()
    return g


def _graph_pairs(plain, other, torch) -> dict:
    """PAIRS interleaved replays of the plain build's graph and another's, each between two events, per launch."""
    gp, go_ = [], []
    for _ in range(PAIRS):
        gp.append(_event_ms(plain.replay, torch) / BACK_TO_BACK)
        go_.append(_event_ms(other.replay, torch) / BACK_TO_BACK)
    ratio = sorted(h / p for h, p in zip(go_, gp))
    return {"plain_ms_median": statistics.median(gp), "ms_median": statistics.median(go_),
            "ratio_median": statistics.median(ratio), "ratio_min_max": [ratio[0], ratio[-1]],
            "extra_us_median": round(1000 * (statistics.median(go_) - statistics.median(gp)), 3)}


def _graph_native_cost(s, go: dict, kh, torch, probes: dict | None = None, variants: dict | None = None) -> dict:
    """Native cost with the host's launch path out of the measurement (Stop 44: the kernels take 8-20 us, less than
    Triton's launch path, so the back-to-back pairs measure the host): BACK_TO_BACK launches of each build captured
    into one CUDA graph, replayed interleaved with the plain build's graph, PAIRS pairs, each replay between two
    events. The session's selection runs once per launch at capture (counted, with "captured"); what a replay runs
    is decided by the module's words as the replay finds them (recorded: __hb_state and the attach switch
__hb_detached). Variants, each against the plain graph:
      hbf           the session's choice with nothing registered: the module detached (__hb_state 0, the switch 1), the
                    native body after one constant-bank read (the ratio the issue's goal is read from; a build from
                    before the switch: after one global load)
      hbf_attached  the words forced to the session's state (no range registered): the prologue loads the band and
                    branches on span 0 -- what stop 45's graphs ran (x1.118 / x1.081 / x1.041)
      <variant>     the hbf build with other hbfcc knobs (HBF_VARIANTS: hbfscope, the native copy in its own
                    register scope), detached like hbf
      probe_<p>     the plain build with one of the native body's differences added (PROBES; c0: none)"""
    b = s.bindings.get(int(kh.module))
    out: dict = {"pairs": PAIRS, "launches_per_graph": BACK_TO_BACK, "goal": "<= 1.02", "variants": {},
                 "what": "nothing registered; per launch: one replay of a CUDA graph of BACK_TO_BACK captured launches "
                         "between two events, each variant interleaved with the plain build (the device's time, not "
                         "the host's launch path)"}
    plain = _graph(go["plain"], torch)
    v = out["variants"]
    g = _graph(go["hbf"], torch)
    v["hbf"] = {**_graph_pairs(plain, g, torch), **_words(kh.module, s)}
    if b is not None and b.state_addr:
        go["hbf"]()                                    # the session's host launch (detaches), then the words forced
        torch.cuda.synchronize()
        _force_words(s, b, True)
        try:
            g = _graph(go["hbf"], torch, warm=False)   # captured: nothing registered leaves the word as it is
            v["hbf_attached"] = {**_graph_pairs(plain, g, torch), **_words(kh.module, s)}
        finally:
            torch.cuda.synchronize()
            _force_words(s, b, False)
    for name, fn in (variants or {}).items():
        try:
            kv, _ = fn()
            v[name] = {**_graph_pairs(plain, _graph(fn, torch), torch), **_words(kv.module, s)}
        except Exception as e:  # noqa: BLE001
            v[name] = {"error": f"{type(e).__name__}: {e}"[:1000]}
    for name, fn in (probes or {}).items():
        try:
            v[f"probe_{name}"] = _graph_pairs(plain, _graph(fn, torch), torch)
        except Exception as e:  # noqa: BLE001
            v[f"probe_{name}"] = {"error": f"{type(e).__name__}: {e}"[:1000]}
    out.update({k: v["hbf"][k] for k in ("plain_ms_median", "ratio_median", "ratio_min_max")})
    out["hbf_ms_median"] = v["hbf"]["ms_median"]
    return out


def _graph_native_entry_cost(s, plain, natent, kname: str, ins: dict, torch) -> dict:
    """Native entries in CUDA graphs (HBF_GRAPH_NATIVE, wt/gnat15), nothing registered, in one process: the plain
    build's graph and the natent build's (HBFCC_NATIVE_ENTRY=1) captured once per mode of the session's
    HBF_GRAPH_NATIVE (the session's attribute set between captures: the knob is read once per session) --
      off      the instrumented entry captured (its prologue test at every replay: the module detached)
      bounded  kernels whose addresses come from their parameters only: these TMA kernels take theirs from descriptors
               (address_source "memory"), so this graph must hold the instrumented entry too (captured_native 0)
      all      any kernel while nothing is registered: the native entry captured, an unbounded record (every
               registration refused until released) -- the goal's ratio (<= 1.02)
    -- replayed interleaved (per round each graph once, in this order after plain), PAIRS rounds, each replay between
    two events, per launch: device ms (median, p10/p90, min/max) and the ratio to plain per round. Also: the launch
    selection's counts per capture (captured, captured_native: BACK_TO_BACK for "all"), a registration of an input
    tried while "all"'s record is held (must be refused with RANGE_ADMITTED, nothing registered), the natent graph's
    output bit-identical to plain's after a replay, and the records released after the graphs are destroyed.

    HBF_NATIVE_MODULE=plain (wt/natmod15: the session loaded the natent module's PLAIN cubin, hbfcc-ptxas's baseline
    build, and holds the kernel's function in it): one more graph, ``all_plain``, captured under "all" with the
    session's native_module set to "plain" -- the same machine code in a module without hbfcc's constants -- next to
    ``all`` (captured with native_module "entry": the native entry ``<k>__hbnat``), interleaved in the same rounds; its
    output checked bit-identical too (``natent_all_plain_identical``). ``native_module`` says what the session had."""
    from hbfcommon.errors import ErrorCode, RangeError  # noqa: PLC0415
    from runtime_cuda.knobs import GRAPH_NATIVE_MODES  # noqa: PLC0415 - one graph per mode
    was, was_nm = s.graph_native, s.native_module
    out: dict = {"pairs": PAIRS, "launches_per_graph": BACK_TO_BACK, "goal": "<= 1.02 (natent graph, mode all, vs plain)",
                 "kernel": kname, "variants": {},
                 "what": "nothing registered; per launch: one replay of a CUDA graph of BACK_TO_BACK captured launches "
                         "between two events; per round plain, then the natent build captured under each "
                         "HBF_GRAPH_NATIVE mode"}
    graphs: dict = {}
    try:
        plain()
        kn, _ = natent()
        torch.cuda.synchronize()
        b = s.bindings.get(int(kn.module))
        plain_fn = b is not None and kname in getattr(b, "plain_fns", {})
        out["native_module"] = native_module_facts(s, b, kname)
        graphs["plain"] = _graph(plain, torch)
        # (key, HBF_GRAPH_NATIVE mode, HBF_NATIVE_MODULE): every mode on the native entry, then "all" on the plain cubin
        captures = [(m, m, "entry") for m in GRAPH_NATIVE_MODES] + ([("all_plain", "all", "plain")] if plain_fn else [])
        for key, mode, nm in captures:
            s.graph_native, s.native_module = mode, nm
            natent()                    # the warm-up host launch (readies the function) before the counts: the capture's
            sel0 = json.loads(json.dumps(s.launch_selection.get(kname) or {}))
            graphs[key] = _graph(natent, torch, warm=False)
            sel1 = s.launch_selection.get(kname) or {}
            d = {f: int(sel1.get(f, 0)) - int(sel0.get(f, 0)) for f in ("captured", "captured_native", "native_entry")}
            for w in ("entry", "plain"):
                d[f"native_module_{w}"] = int((sel1.get("native_module") or {}).get(w, 0)) - \
                    int((sel0.get("native_module") or {}).get(w, 0))
            out["variants"][key] = {"launch_selection": d, "graph_native": mode, "native_module": nm}
        s.graph_native, s.native_module = was, was_nm
        out["records"] = s.counters(publish=False).get("graph_native")
        t = next(iter(ins.values()))
        try:
            r = s.register_timing_range(t.data_ptr(), t.numel() * t.element_size(), label=f"{kname}.gnat.refused")
            s.unregister(r)
            out["refusal"] = {"refused": False, "ok": False}
        except RangeError as e:
            out["refusal"] = {"refused": True, "code": e.code.name, "ranges_after": len(s.ranges),
                              "ok": e.code == ErrorCode.RANGE_ADMITTED and not s.ranges, "message": str(e)[:600]}
        ms: dict = {k: [] for k in graphs}
        for _ in range(PAIRS):
            for k in graphs:            # no name left holding a graph: they are destroyed before the release
                ms[k].append(_event_ms(graphs[k].replay, torch) / BACK_TO_BACK)
        for k in graphs:
            v = out["variants"].setdefault(k, {})
            v["device_ms"] = stats(ms[k])
            if k != "plain":
                v["ratio"] = stats([a / p for a, p in zip(ms[k], ms["plain"])])
                v["extra_us_median"] = round(1000 * (statistics.median(ms[k]) - statistics.median(ms["plain"])), 3)
        _, out_p = plain()
        for key in ("all", "all_plain"):
            if key not in graphs:
                continue
            _, out_n = natent()         # a host launch: the outputs overwritten, then the graph's replay alone
            out_n.fill_(-1.0)
            graphs[key].replay()
            torch.cuda.synchronize()
            out[f"natent_{key}_identical"] = bool(torch.equal(out_n.view(torch.int8), out_p.view(torch.int8)))
        a = out["variants"]["all"]
        out["ratio_median"] = (a.get("ratio") or {}).get("median")
        out["native_entry_captured"] = a["launch_selection"]["captured_native"] == BACK_TO_BACK
        out["bounded_kept_instrumented"] = out["variants"]["bounded"]["launch_selection"]["captured_native"] == 0
        if "all_plain" in graphs:
            ap = out["variants"]["all_plain"]
            out["plain_module_ratio_median"] = (ap.get("ratio") or {}).get("median")
            out["plain_module_captured"] = ap["launch_selection"]["native_module_plain"] == BACK_TO_BACK
    finally:
        s.graph_native, s.native_module = was, was_nm
        graphs.clear()                  # the graphs destroyed first: then their records may go
        torch.cuda.synchronize()
        out["released"] = s.release_graph_captures()
    return out


def native_module_facts(s, b, kname: str) -> dict:
    """What HBF_NATIVE_MODULE had for kernel ``kname`` of binding ``b``: the session's mode, whether the kernel's
    function in the plain cubin is bound (the module loaded: the artifact's native_module found and verified), and the
    native entry's."""
    return {"session": getattr(s, "native_module", "entry"),
            "plain_function_bound": bool(b is not None and kname in getattr(b, "plain_fns", {})),
            "plain_modules": len(getattr(b, "plain_modules", []) or []) if b is not None else 0,
            "native_entry_bound": bool(b is not None and kname in b.native_fns)}


def _graph_replay_check(s, go: dict, kh, name: str, ins: dict, torch, want_copies: int) -> dict:
    """The session's graph rule on the card (docs/design.md "Per-launch selection and CUDA graphs"): one launch of the
    hbf build captured with nothing registered (its module detached: no write in the graph), the graph replayed with
    the inputs registered (the registration attaches every module: the replay must run instrumented, its TMA copies
    counted, want_copies of them as the registered launch counted), then again after they are unregistered (detached
    again: the native body, nothing counted)."""
    from runtime_triton import module_state  # noqa: PLC0415

    def copies() -> int:
        return int(s.counters(publish=False)["kernels"].get(f"{name}_hbf", {}).get("tma_copies", 0))
    go["hbf"]()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        go["hbf"]()
    from hbfcommon import abi  # noqa: PLC0415

    def switch():      # the attach switch (None: a build from before it)
        return module_state(kh.module, abi.DETACHED_GLOBAL)
    w0, d0, c0 = module_state(kh.module), switch(), copies()
    ranges = [s.register_timing_range(x.data_ptr(), x.numel() * x.element_size(), label=f"{name}.graph.{t}")
              for t, x in ins.items()]
    try:
        w1, d1 = module_state(kh.module), switch()
        g.replay()
        torch.cuda.synchronize()
        c1 = copies()
    finally:
        for r in ranges:
            s.unregister(r)
    w2, d2 = module_state(kh.module), switch()
    g.replay()
    torch.cuda.synchronize()
    c2 = copies()
    r = {"word_at_capture": _word(w0, s), "word_registered": _word(w1, s), "word_unregistered": _word(w2, s),
         "switch_at_capture_registered_unregistered": [d0, d1, d2],
         "tma_copies_replay_registered": c1 - c0, "tma_copies_replay_unregistered": c2 - c1,
         "tma_copies_want": want_copies}
    r["ok"] = w0 == 0 and w1 == s.state_dptr and w2 == 0 and c1 - c0 == want_copies > 0 and c2 == c1 \
        and [d0, d1, d2] in ([1, 0, 1], [None] * 3)
    return r


def _switch_stream_order_check(s, go: dict, kh, name: str, torch, want_copies: int, rounds: int = 3) -> dict:
    """The attach switch's writes in stream order on the card (the inputs registered; these kernels take their
    addresses from memory, so every launch runs attached): per round, a launch (attached), then the module's words
    written DETACHED by memsets on the launch stream (as per-launch selection writes them), then a launch through
    the session's hook, which finds the module detached and writes the attach the same way before it, no host sync
    in between. Both launches of every round must count their TMA copies: a kernel that read a stale switch (1 in
    the constant bank after the attach's memset) would run the native body and count nothing."""
    from runtime_cuda.session import module_words  # noqa: PLC0415
    b = s.bindings.get(int(kh.module))
    if b is None or not b.detached_addr or not s.native_select:
        return {"skipped": "the module has no attach switch" if b is None or not b.detached_addr else
                "per-launch selection off (HBF_NATIVE_SELECT=0): the session writes no word at launch", "ok": None}

    def copies() -> int:
        return int(s.counters(publish=False)["kernels"].get(f"{name}_hbf", {}).get("tma_copies", 0))
    stream = torch.cuda.current_stream().cuda_stream
    torch.cuda.synchronize()
    c0 = copies()
    for _ in range(rounds):
        go["hbf"]()
        for addr, value in module_words(b.state_addr, b.detached_addr, s.state_dptr, False):
            s._cu.memset_u64_async(addr, value, stream)
        b.attached = False
        go["hbf"]()
    torch.cuda.synchronize()
    got = copies() - c0
    return {"rounds": rounds, "launches": 2 * rounds, "tma_copies": got, "tma_copies_want": 2 * rounds * want_copies,
            "ok": got == 2 * rounds * want_copies > 0, "attached_after": b.attached}


def _force_words(s, b, attach: bool) -> None:
    """The module's words written as the session writes them (runtime_cuda.session.module_words: __hb_state and the
    attach switch where the module has one), the context idle."""
    import ctypes  # noqa: PLC0415

    from runtime_cuda.session import module_words  # noqa: PLC0415
    for addr, value in module_words(b.state_addr, b.detached_addr, s.state_dptr, attach):
        s._cu.htod(addr, ctypes.c_uint64(value), 8)
    b.attached = attach


def _words(module, s) -> dict:
    """What a replay finds: the module's __hb_state and its attach switch (absent: built before it)."""
    from hbfcommon import abi  # noqa: PLC0415
    from runtime_triton import module_state  # noqa: PLC0415
    sw = module_state(module, abi.DETACHED_GLOBAL)
    return {"hb_state_at_replay": _word(module_state(module), s),
            "hb_detached_at_replay": "absent" if sw is None else sw}


def _word(value: int | None, s) -> str:
    return "absent" if value is None else "detached (0)" if value == 0 else \
        "attached (the session's state)" if value == s.state_dptr else hex(value)


def _probe_launchers(name: str, ins: dict, work: Path, torch, outputs: dict) -> dict:
    """The probe builds of one kernel (PROBES), compiled through the probe ptxas wrapper; each launcher checked
    once against the plain build's output (``outputs["plain"]``): the additions change no result."""
    P = load_probes(work)
    go: dict = {}
    with env_set({"TRITON_PTXAS_PATH": str(write_probe_ptxas(work))}):
        for p in PROBES:
            _checked_launcher(P, name, f"probe_{p}", p, ins, torch, outputs, go)
    return go


def gpu_case(s, K, name: str, rec: dict, save, torch) -> None:
    """One kernel: plain run, inputs registered, hbf run, admission, identity, counters, times, native cost."""
    from runtime_cuda.session import triton_artifact  # noqa: PLC0415
    from runtime_triton import module_state  # noqa: PLC0415
    torch.manual_seed(0)
    ins = _inputs(name, torch)
    go = {sfx: _launcher(K, name, sfx, ins, torch) for sfx in ("plain", "hbf")}
    use_ptxas("plain")
    kp, out_p = go["plain"]()
    torch.cuda.synchronize()
    ref = _reference(name, ins, torch)
    rec["plain_max_abs_err_vs_fp32"] = float((out_p.float() - ref).abs().max())
    # the plain build's time, nothing registered (a plain build is not admitted: with a range registered that
    # its arguments reach, the session's gate refuses it)
    tp = [_event_ms(go["plain"], torch) for _ in range(REPS)]
    save(f"{name}: plain ran")
    ranges = {t: s.register_timing_range(x.data_ptr(), x.numel() * x.element_size(), label=f"{name}.{t}")
              for t, x in ins.items()}
    rec["ranges"] = {t: {"range_id": int(r.range_id), "bytes": int(r.length)} for t, r in ranges.items()}
    try:
        use_ptxas("hbf")
        t = time.time()
        c0 = s.counters(publish=False)["kernels"].get(f"{name}_hbf", {})
        kh, out_h = go["hbf"]()
        torch.cuda.synchronize()
        rec["hbf_compile_and_first_launch_s"] = round(time.time() - t, 1)
        c1 = s.counters(publish=False)["kernels"].get(f"{name}_hbf", {})
        save(f"{name}: hbf ran")
        rec["identical"] = bool(torch.equal(out_p.view(torch.int8), out_h.view(torch.int8)))
        b = s.bindings.get(int(kh.module))
        info = s.functions.get(int(kh.function), (None, None))[1]
        art = triton_artifact(kh.metadata_group)
        rec["admission"] = {**artifact_admission(art), "bound": b is not None,
                            "instrumented": bool(b and b.instrumented), "session_admitted": bool(info and info.admitted),
                            "hb_state_is_session": module_state(kh.module) == s.state_dptr,
                            "cubin_calls_helpers": b"__hb_" in kh.asm["cubin"],
                            "ptx_tensor_copies": kh.asm["ptx"].count("cp.async.bulk.tensor"),
                            "plain_cubin_calls_helpers": b"__hb_" in kp.asm["cubin"],
                            "n_regs_plain_hbf": [kp.n_regs, kh.n_regs], "n_spills_plain_hbf": [kp.n_spills, kh.n_spills]}
        ops0, ops1 = c0.get("ops") or {}, c1.get("ops") or {}
        d = {f: c1.get(f, 0) - c0.get(f, 0) for f in TMA_FIELDS}
        d["ops"] = {op: {f: v[f] - ops0.get(op, {}).get(f, 0) for f in ("requests", "bytes", "modeled_ns")}
                    for op, v in ops1.items()}
        d["requests"] = sum(d["ops"].get(op, {}).get("requests", 0) for op in ("load", "cpasync"))
        d["bytes"] = sum(d["ops"].get(op, {}).get("bytes", 0) for op in ("load", "cpasync"))
        d["launches"] = c1.get("launches", 0) - c0.get("launches", 0)
        d["status"] = c1.get("status")
        rec["counters"] = d
        rec["expected"] = {**expected_tma(name), "inputs_bytes": sum(x.numel() * x.element_size() for x in ins.values())}
        a = rec["admission"]
        rec["checks"] = {
            "admitted": bool(a["admitted"] and a["session_admitted"] and a["instrumented"] and a["hb_state_is_session"]),
            "tma_sites_rewritten": admitted_with_tma(a),
            "plain_not_instrumented": not a["plain_cubin_calls_helpers"],
            "identical": rec["identical"],
            "tma_copies_counted": d["tma_copies"] > 0 and d["tma_hbf_bytes"] > 0,
            "hbf_bytes_are_the_loads": d["tma_hbf_bytes"] == rec["expected"]["input_bytes_read"],
            "phases_consumed": d["tma_phases"] == d["tma_consumed"],
            "no_stale": d["tma_stale"] == 0, "no_leaked": d["tma_leaked"] == 0}
        rec["ok"] = all(rec["checks"].values())
        save(f"{name}: counters read")
        # the hbf build with the inputs registered: REPS launches, each between two events
        th = [_event_ms(go["hbf"], torch) for _ in range(REPS)]
        rec["time_ms"] = {"plain_unregistered_median": statistics.median(tp), "hbf_registered_median": statistics.median(th),
                          "plain_unregistered": tp, "hbf_registered": th, "reps": REPS,
                          "ratio_median": statistics.median(th) / statistics.median(tp),
                          "what": "one launch between two events each; plain with nothing registered, hbf with the "
                                  "inputs registered (fixed 5 us source)"}
        save(f"{name}: registered timing done")
        try:
            rec["switch_stream_order"] = _switch_stream_order_check(s, go, kh, name, torch, d["tma_copies"])
        except Exception as e:  # noqa: BLE001
            rec["switch_stream_order"] = {"error": f"{type(e).__name__}: {e}"[:2000],
                                          "traceback": traceback.format_exc()[-3000:], "ok": False}
        save(f"{name}: switch stream order checked")
    finally:
        for r in ranges.values():
            s.unregister(r)
    # nothing registered: BACK_TO_BACK launches between two events, plain / hbf interleaved
    try:
        for sfx in ("plain", "hbf"):
            go[sfx]()
        torch.cuda.synchronize()
        gp, gh = [], []
        for _ in range(PAIRS):
            gp.append(_event_ms(go["plain"], torch, BACK_TO_BACK))
            gh.append(_event_ms(go["hbf"], torch, BACK_TO_BACK))
        ratio = sorted(h / p for h, p in zip(gh, gp))
        rec["native_cost"] = {"pairs": PAIRS, "back_to_back": BACK_TO_BACK, "plain_ms_median": statistics.median(gp),
                              "hbf_ms_median": statistics.median(gh), "ratio_median": statistics.median(ratio),
                              "ratio_min_max": [ratio[0], ratio[-1]], "goal": "<= 1.02",
                              "what": "nothing registered; per launch: BACK_TO_BACK launches between two events, "
                                      "plain and hbf interleaved"}
    except Exception as e:  # noqa: BLE001
        rec["native_cost"] = {"error": f"{type(e).__name__}: {e}"[:2000], "traceback": traceback.format_exc()[-3000:]}
    # the same, each side's BACK_TO_BACK launches captured once into a CUDA graph and replayed: the host's launch path
    # (Triton's launcher, the session's launch selection) runs at capture only, so the replay's time is the device's;
    # with the probe builds (PROBES) that split the difference into its parts
    work = Path(os.environ["TRITON_CACHE_DIR"]).parent

    def extra(key: str, build) -> dict:       # the variant / probe builds, each checked bit-identical to plain
        same = {"plain": out_p}
        try:
            built = build(name, ins, work, torch, same)
        except Exception as e:  # noqa: BLE001
            rec[f"{key}_error"] = {"error": f"{type(e).__name__}: {e}"[:2000], "traceback": traceback.format_exc()[-3000:]}
            return {}
        same.pop("plain")
        rec[f"{key}_identical"] = same
        return built
    natent: dict = {}
    if os.environ.get("HBF_BENCH_TMA_NATENT") == "1" or os.environ.get("HBF_BENCH_TMA_GNAT") == "1":
        natent = extra("natent", lambda *a: _variant_launchers(*a, variants=NATENT_VARIANT))
        save(f"{name}: natent built")
    if os.environ.get("HBF_BENCH_TMA_NATENT") == "1":      # --native-entry: host launches, the native entry
        try:
            kn, _ = natent["natent"]()
            b = s.bindings.get(int(kn.module))
            rec["natent_build"] = {"native_entry": (b.kernel(f"{name}_natent").native_entry
                                                    if b and b.kernel(f"{name}_natent") else None),
                                   "native_function_bound": bool(b and b.native_fns.get(f"{name}_natent")),
                                   "cubin_has_native_entry": f"{name}_natent__hbnat".encode() in kn.asm["cubin"],
                                   "n_regs": kn.n_regs}
            rec["native_cost_host_natent"] = _host_native_entry_cost(
                s, {"plain": go["plain"], "hbf": go["hbf"], "natent": natent["natent"]},
                {"hbf": f"{name}_hbf", "natent": f"{name}_natent"}, torch)
        except Exception as e:  # noqa: BLE001
            rec["native_cost_host_natent"] = {"error": f"{type(e).__name__}: {e}"[:2000],
                                              "traceback": traceback.format_exc()[-3000:]}
        save(f"{name}: natent host cost done")
    if os.environ.get("HBF_BENCH_TMA_GNAT") == "1":        # --graph-native: the native entry in CUDA graphs
        try:
            if "natent" not in natent:
                raise RuntimeError(f"the natent build did not build: {rec.get('natent_error') or rec.get('natent_identical')}")
            rec["native_cost_graph_natent"] = _graph_native_entry_cost(s, go["plain"], natent["natent"],
                                                                       f"{name}_natent", ins, torch)
        except Exception as e:  # noqa: BLE001
            rec["native_cost_graph_natent"] = {"error": f"{type(e).__name__}: {e}"[:2000],
                                               "traceback": traceback.format_exc()[-3000:]}
        save(f"{name}: natent graph cost done")
    if os.environ.get("HBF_BENCH_TMA_GRAPH", "1") == "1":     # --no-graph: skip the graph part (variants, probes)
        variants = extra("variants", _variant_launchers)
        probes = extra("probes", _probe_launchers)
        save(f"{name}: probes built")
        try:
            rec["native_cost_graph"] = _graph_native_cost(s, go, kh, torch, probes, variants)
        except Exception as e:  # noqa: BLE001
            rec["native_cost_graph"] = {"error": f"{type(e).__name__}: {e}"[:2000],
                                        "traceback": traceback.format_exc()[-3000:]}
    try:
        rec["graph_replay_selection"] = _graph_replay_check(s, go, kh, name, ins, torch, d["tma_copies"])
    except Exception as e:  # noqa: BLE001
        rec["graph_replay_selection"] = {"error": f"{type(e).__name__}: {e}"[:2000],
                                         "traceback": traceback.format_exc()[-3000:], "ok": False}
    save(f"{name}: graph replay selection checked")
    ls = s.counters(publish=False).get("launch_selection") or {}
    rec["launch_selection"] = {k: v for k, v in ls.items() if name in str(k)} or ls
    save(f"{name}: native cost done")


def child_case(name: str, partial: Path) -> dict:
    """One case in this (child) process: its own hbfd (fixed 5 us source), session and Triton hooks; the case's record
    rewritten to ``partial`` after every stage, so a child killed at its timeout still reports what it did."""
    import torch  # noqa: PLC0415
    import triton  # noqa: PLC0415

    import runtime_cuda  # noqa: PLC0415
    from devpath_common import SOURCES, hbfd_daemon, source_profile  # noqa: PLC0415
    SOURCES["fixed5us"] = ("fixed", 5_000)
    work = Path(os.environ["TRITON_CACHE_DIR"]).parent
    # hbfd's socket goes in this folder: a unix socket path holds at most 107 bytes (a pytest-xdist tmp_path under
    # the work folder made it 113 and hbfd refused to start), so a long work folder gives way to the system's temp
    tmp = Path(tempfile.mkdtemp(prefix=f"hbfd-{name}-", dir=work if len(str(work)) < 60 else None))
    rec: dict = {}

    def save(stage: str) -> None:
        rec["stage"] = stage
        write_json(partial, rec)
    t = time.time()
    try:
        # device descriptors: Triton 3.6 writes them into global scratch the allocator hands out
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
        K = load_kernels(work)
        with hbfd_daemon(tmp, source_profile(tmp, "fixed5us")) as sock:
            s = runtime_cuda.attach(socket=sock)
            s.install_triton_hooks()
            rec["media"] = {"timing_source": int(s.state.media.timing_source),
                            "fixed_read_ns": int(s.state.media.fixed_read_ns)}
            save("attached")
            try:
                gpu_case(s, K, name, rec, save, torch)
            finally:
                try:
                    s.close()
                except Exception as e:  # noqa: BLE001
                    rec["close_error"] = f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001
        rec["error"] = f"{type(e).__name__}: {e}"[:2000]
        rec["traceback"] = traceback.format_exc()[-4000:]
        rec["ok"] = False
    rec["seconds"] = round(time.time() - t, 1)
    rec.setdefault("ok", False)
    save("done")
    return rec


def gpu_run(res: dict, out_dir: Path, out_path: Path, deadline: float, names: tuple, case_timeout: float,
            child_env: dict | None = None) -> None:
    """Each case in its own child process (runtime_triton.run_child: a hung or faulting kernel costs that case
    only), at most case_timeout seconds and none started after the deadline; the JSON rewritten after each."""
    from runtime_triton import run_child  # noqa: PLC0415
    cases = res.setdefault("cases", {})
    for name in names:
        left = deadline - time.time()
        if left <= 0:
            cases[name] = {"error": "budget spent before this case", "ok": False}
            write_json(out_path, res)
            continue
        partial = out_dir / f"tma_triton.{name}.partial.json"
        partial.unlink(missing_ok=True)
        cases[name] = run_child(__file__, name, {"HBF_BENCH_PARTIAL": str(partial), **(child_env or {})},
                                timeout=min(case_timeout, left + 60), partial=partial)
        rec = cases[name]
        log.info("%s: ok=%s checks=%s native=%s %s", name, rec.get("ok"), rec.get("checks"),
                 (rec.get("native_cost") or {}).get("ratio_median"), rec.get("error", ""))
        ncg = rec.get("native_cost_graph") or {}
        log.info("%s: native cost in CUDA graphs: %s (%s)", name, ncg.get("ratio_median"),
                 ", ".join(f"{k} x{x.get('ratio_median', float('nan')):.3f} {x.get('extra_us_median')} us"
                           for k, x in (ncg.get("variants") or {}).items() if "ratio_median" in x))
        ng = rec.get("native_cost_graph_natent") or {}
        if ng:
            log.info("%s: native cost in CUDA graphs, native entry by HBF_GRAPH_NATIVE: %s", name, ng.get("error") or
                     ", ".join(f"{k} x{(x.get('ratio') or {}).get('median', float('nan')):.3f} "
                               f"[{(x.get('ratio') or {}).get('min', float('nan')):.3f}, "
                               f"{(x.get('ratio') or {}).get('max', float('nan')):.3f}] sel {x.get('launch_selection')}"
                               for k, x in (ng.get("variants") or {}).items() if k != "plain"))
        nh = rec.get("native_cost_host_natent") or {}
        if nh:
            log.info("%s: native cost on host launches, native entry: %s", name, nh.get("error") or ", ".join(
                f"{k} x{(x.get('ratio') or {}).get('median', float('nan')):.3f} "
                f"[{(x.get('ratio') or {}).get('min', float('nan')):.3f}, {(x.get('ratio') or {}).get('max', float('nan')):.3f}] "
                f"host +{x.get('host_extra_us_median')} us late {x.get('late_windows')}"
                for k, x in (nh.get("variants") or {}).items() if k != "plain"))
        write_json(out_path, res)
    res["ok"] = all(cases.get(n, {}).get("ok") for n in names)


def run_cases(w: Path, runs: tuple = ("run1", "run2")):
    """(run, its cases) of a device call's runs of this bench under ``w`` (bench/gpu_calls/env.sh ``tma_runs``: one
    folder a run, its tma_triton.json); a run that left no JSON has no cases."""
    for run in runs:
        p = Path(w) / run / "tma_triton.json"
        yield run, (json.loads(p.read_text()).get("cases", {}) if p.is_file() else {})


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["--probe-ptxas"]:    # TRITON_PTXAS_PATH of the probe builds (write_probe_ptxas)
        return probe_ptxas(args[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"))
    ap.add_argument("--work", default="", help="build folder (default: a new temporary one)")
    ap.add_argument("--dry-run", action="store_true", help="CPU: compile through hbfcc-ptxas, report admission")
    ap.add_argument("--budget-s", type=float, default=270.0, help="no case starts after this many seconds")
    ap.add_argument("--only", default=",".join(KERNELS), help="comma list of kernels (default: all)")
    ap.add_argument("--case-timeout", type=float, default=150.0, help="seconds one GPU case's child may take")
    ap.add_argument("--native-entry", action="store_true",
                    help="also build each kernel with HBFCC_NATIVE_ENTRY=1 and measure plain / hbf / natent on HOST "
                         "launches, nothing registered (native_cost_host_natent)")
    ap.add_argument("--graph-native", action="store_true",
                    help="also build each kernel with HBFCC_NATIVE_ENTRY=1 and measure plain / natent in CUDA graphs "
                         "captured under HBF_GRAPH_NATIVE off / bounded / all, nothing registered "
                         "(native_cost_graph_natent)")
    ap.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph native cost (variants, probes)")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:   # one GPU case (gpu_run's child): its record on stdout, the CHILD-JSON line run_child reads
        logging.basicConfig(level=logging.INFO, format=f"[tma_triton {a.child} %(asctime)s] %(message)s", datefmt="%H:%M:%S")
        r = child_case(a.child, Path(os.environ["HBF_BENCH_PARTIAL"]))
        print("CHILD-JSON " + json.dumps(r, default=str), flush=True)
        os._exit(0)
    names = tuple(n for n in a.only.split(",") if n)
    if not names or set(names) - set(KERNELS):
        ap.error(f"--only: choose from {', '.join(KERNELS)}")
    logging.basicConfig(level=logging.INFO, format="[tma_triton %(asctime)s] %(message)s", datefmt="%H:%M:%S")
    t0 = time.time()
    deadline = t0 + a.budget_s
    # the TMA device path is opt-in (runtime_cuda/knobs.py tma_device); this bench validates it
    os.environ["HBF_TMA_DEVICE"] = "1"
    os.environ.setdefault("HBF_COMPLETION_TIMEOUT_NS", "5000000000")
    out_dir, _, work, _ = prepare_run(a.out, "tma_triton", a.work)
    out_path = out_dir / ("tma_triton_dry.json" if a.dry_run else "tma_triton.json")
    res: dict = {"what": "Triton TMA matmuls (host / device descriptors) and a FlashAttention-style forward through "
                         "hbfcc-ptxas and runtime_cuda (issue 15, item 5)",
                 "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                 "command": " ".join(["python3", "bench/tma_triton.py", *(sys.argv[1:] if argv is None else argv)]),
                 "mode": "dry-run (CPU, sm_90 target)" if a.dry_run else "gpu", "shapes": {"matmul": MM, "attention": AT}}
    try:
        import triton  # noqa: PLC0415
        res["triton"] = triton.__version__
        if a.dry_run:
            res["card"] = "CPU"
            dry_run(load_kernels(work), res, out_path, deadline, names)
        else:
            import torch  # noqa: PLC0415
            if not torch.cuda.is_available():
                log.error("no GPU: only --dry-run runs here")
                res.update(error="no GPU (torch.cuda.is_available() is False): only --dry-run runs here", ok=False)
                write_json(out_path, res)
                return 2
            res["card"] = gpu_info()
            gpu_run(res, out_dir, out_path, deadline, names, a.case_timeout,
                    {"HBF_BENCH_TMA_NATENT": "1" if a.native_entry else "0",
                     "HBF_BENCH_TMA_GNAT": "1" if a.graph_native else "0",
                     "HBF_BENCH_TMA_GRAPH": "0" if a.no_graph else "1"})
    except Exception as e:  # noqa: BLE001
        res["error"] = f"{type(e).__name__}: {e}"[:2000]
        res["traceback"] = traceback.format_exc()[-4000:]
        res["ok"] = False
    res["seconds"] = round(time.time() - t0, 1)
    write_json(out_path, res)
    log.info("ok=%s, wrote %s (%.1f s)", res.get("ok"), out_path, res["seconds"])
    return 0 if res.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
