#!/usr/bin/env python3
"""What building through hbfcc costs against a plain build (issue 18 item 3; goal: <= 1.3x plain build
time on the nvcc set and on Triton compiles, cubin growth <= 2x), and proof that linking only the helper
functions a module reaches (hbfcc.link.closure) changes no kernel's code.

Three parts, each interleaving the builds it compares (plain, hbfcc, plain, ...; the order flips every
repeat) because the box is shared; every time is reported as wall seconds and as CPU seconds of the
build's processes (user+sys of the children: what the build itself burnt, less sensitive to the other
jobs on the box); ratios are per item, then the median (and p10/p90, min/max) over the items.

* ``corpus``: the PTX fixture corpus (tests/fixtures: Triton PTX and the CUDA fixtures' nvcc PTX).
  ptxas (``-arch=sm_90a -lineinfo -v``, what Triton runs) on the original, on the rewrite linked with
  only what it reaches (``pruned``, the default) and with the whole helper library (``full``, the link
  before this change). Identity: the pruned and full builds, whole-program and relocatable (``-c``,
  what ``-rdc`` builds run), compared function by function (hbfcc.cubin.function_code: machine code
  bytes, relocations by symbol name, registers / stack frame / barriers) and, with nvdisasm, as
  normalized SASS text (hbfcc.cubin.normalized_sass). A function only the full build has must be a
  helper function the module does not reach (or one of ptxas's own routines, ``__cuda_sm20_div_u64``
  and the like, that only those call).
* ``nvcc``: every tests/fixtures/cuda/*.cu compiled by ``nvcc -arch=sm_90a -c`` and by ``hbfcc`` with
  the same arguments (host code included: a cuda-samples-style object build); ``-cubin`` once each for
  the cubin size ratio.
* ``separate``: the alternative this issue named, measured, not adopted: a prebuilt helper object
  through the device linker (the rewrite with the helpers as ``.extern``, ``ptxas -c``, then ``nvlink``
  with the helper module assembled once): its ptxas + nvlink time, cubin size and each kernel's
  registers and stack frame against the whole-program build hbfcc makes (a separately compiled callee
  follows the ABI's calling convention instead of being register-allocated with its caller). Variant
  ``capped``: the same route with each kernel held at the whole-program build's register count
  (``.maxnreg``) and the helper object assembled under ``-maxrregcount`` = the smallest of them (and
  without ``-lineinfo``: no copy of the helper PTX text in each cubin).
* ``triton``: a set of Triton kernels compiled on the CPU for sm_90a (``triton.compile``, a fresh cache
  per compile) with plain Triton and with ``TRITON_PTXAS_PATH=hbfcc-ptxas``; the time of each compile
  and the cubin size ratio. ``--separate`` adds variant ``separate`` (``HBFCC_LINK=separate``, its helper
  object cache empty at the start, so the first repeat includes the helper objects' builds) and reads
  each entry's registers and stack frame from every variant's cubin; ``--triton-ptxas PTXAS`` makes
  every variant use that ptxas (plain Triton's ``TRITON_PTXAS_PATH``, hbfcc-ptxas's
  ``HBFCC_REAL_PTXAS``): the separate link needs one with nvlink beside it. ``--defer`` adds variants ``defer``
  (``HBFCC_DEFER=1``: hbfcc-ptxas hands Triton the plain cubin) and ``defer_rewrite`` (``HBFCC_DEFER=rewrite``:
  the rewrite deferred too) and times the deferred instrumented build after each compile
  (hbfcommon.deferred.build, what the runtime runs at the kernel's load), and ``load``
  (``HBF_TRITON_INSTRUMENT=load``: plain Triton, then the runtime's at-load work timed: the reconstructed ptxas
  run verified against the cached cubin, then the build). Every hbfcc variant runs hbfcc-ptxas's
  console entry (``hbfcc.ptxas_entry`` of the hbfcc on the path: ``PYTHONPATH=.``), whatever the venv's
  installed script points at.

``--against TREE`` (nvcc, triton) adds variant ``before``: hbfcc from another source tree, interleaved
with the others; ``now_vs_before_*`` ratios and whether the cubins are byte-identical.

``nvcc`` and ``triton`` also build each item through hbfcc with the whole helper library linked
(``HBFCC_LINK_PRUNE=0``, variant ``full``: the link before the pruning), interleaved with the others
(``--no-full`` leaves it out): ``full_*`` ratios to plain and ``pruned_vs_full_*``.

    python bench/hbfcc_buildcost.py [--parts corpus,separate,nvcc,triton] [--reps 3] [--limit N] [--every K] [--no-full]
                                    [--against TREE] [--separate] [--defer] [--triton-ptxas PTXAS]
                                    [--out bench/results/hbfcc_buildcost_cpu.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "fixtures"))

from hbfcommon.fsutil import atomic_write_json  # noqa: E402

from hbfcc import cubin  # noqa: E402
from hbfcc import helpers as H  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402
from hbfcc.toolchain import find_real_ptxas, ptxas_version_text, rewriter_sha  # noqa: E402

VENV_BIN = Path(sys.executable).parent


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(argv: list[str], env=None, cwd=None) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall s, CPU s of the process tree, completed process)."""
    c0, t0 = _children_cpu(), time.perf_counter()
    cp = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd)
    return time.perf_counter() - t0, _children_cpu() - c0, cp


def q(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def spread(xs: list[float]) -> dict:
    xs = [x for x in xs if x == x]
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "median": statistics.median(xs), "p10": q(xs, 0.1), "p90": q(xs, 0.9),
            "min": min(xs), "max": max(xs)}


def interleaved(variants: dict[str, callable], reps: int) -> dict[str, list]:
    """Run each variant ``reps`` times, alternating, the order flipped every repeat."""
    names = list(variants)
    out: dict[str, list] = {n: [] for n in names}
    for r in range(reps):
        for n in (names if r % 2 == 0 else names[::-1]):
            out[n].append(variants[n]())
    return out


def nvdisasm_path() -> str | None:
    p = shutil.which("nvdisasm")
    if p:
        return p
    try:
        import triton
        p = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
        return str(p) if p.exists() else None
    except ImportError:
        return None


# --------------------------------------------------------------------------------------------
# corpus: ptxas on original / pruned / full, and the identity proof
# --------------------------------------------------------------------------------------------

def identity(pruned_o: Path, full_o: Path, helper_functions: set[str], nvdisasm: str | None) -> dict:
    a, b = cubin.function_code(pruned_o), cubin.function_code(full_o)
    extra = set(b) - set(a)
    diffs = cubin.code_differences(a, b)
    if set(a) - set(b):
        diffs.append(f"functions only in the pruned build: {sorted(set(a) - set(b))}")
    bad_extra = sorted(n for n in extra - helper_functions if not n.startswith("__cuda_"))
    if bad_extra:
        diffs.append(f"functions only in the full build that are not helper functions: {bad_extra}")
    doc = {"functions_compared": len(set(a) & set(b)), "only_in_full": sorted(extra), "code_identical": not diffs,
           "differences": diffs}
    if nvdisasm:
        sa, sb = cubin.normalized_sass(pruned_o, nvdisasm), cubin.normalized_sass(full_o, nvdisasm)
        common = set(sa) & set(sb)
        doc["sass_identical"] = all(sa[n] == sb[n] for n in common) and set(sa) <= set(sb)
        doc["sass_functions"] = len(common)
        doc["sass_instructions"] = sum(len(sa[n]) for n in common)
    return doc


def part_corpus(ns, ptxas: str, nvdisasm: str | None) -> dict:
    import ptx_corpus
    corpus = {f"triton/{k}": v for k, v in ptx_corpus.triton_corpus().items()}
    if ptx_corpus.nvcc_path():
        cache = Path(tempfile.gettempdir()) / f"hbfcc-corpus-{os.getuid()}"
        corpus.update({f"cuda/{k}": v for k, v in ptx_corpus.build_cuda_corpus(cache).items()})
    items = sorted(corpus.items())[::ns.every][:ns.limit or None]
    rows = []
    with tempfile.TemporaryDirectory(prefix="hbfcc-buildcost.") as d:
        d = Path(d)
        for i, (name, path) in enumerate(items, 1):
            text = path.read_text()
            pr = rewrite_text(text, filename=name)
            fu = rewrite_text(text, filename=name, prune=False)
            helper = pr.helper
            hfun = {f.name for f in helper.functions} if helper is not None else set()
            # the rewrite linked with do-nothing helpers (helpers.stub_helper): what the kernel's own
            # instrumentation (sites, inline path, native copy) costs ptxas, without the helper library
            stub = rewrite_text(text, filename=name, helper=H.stub_helper()).text
            files = {"original": text, "pruned": pr.text, "full": fu.text, "stub": stub}
            for k, t in files.items():
                (d / f"{k}.ptx").write_text(t)

            def build(k: str, extra: tuple[str, ...] = ("-lineinfo", "-v"), suffix: str = "cubin", check: bool = True):
                def run():
                    w, c, cp = timed([ptxas, "-arch=sm_90a", *extra, str(d / f"{k}.ptx"), "-o", str(d / f"{k}.{suffix}")])
                    if cp.returncode != 0:
                        if not check:
                            return None, cp.stderr.strip()
                        raise SystemExit(f"{name} ({k}): ptxas failed: {cp.stderr[:2000]}")
                    return w, c
                return run
            t = interleaved({k: build(k) for k in files}, ns.reps)
            row = {"module": name, "ptx_bytes": {k: len(v) for k, v in files.items()},
                   "entries": len(pr.meta["timing"]["kernels"]),
                   "linked": pr.meta.get("link", {}).get("linked"),
                   "cubin_bytes": {k: (d / f"{k}.cubin").stat().st_size for k in files}}
            for k in files:
                row[f"{k}_wall_s"] = statistics.median(x[0] for x in t[k])
                row[f"{k}_cpu_s"] = statistics.median(x[1] for x in t[k])
            if pr.already_instrumented or pr.meta.get("not_instrumented"):
                row["identity"] = {"skipped": "not instrumented"}
            else:
                row["identity"] = identity(d / "pruned.cubin", d / "full.cubin", hfun, nvdisasm)
                rdc = {k: build(k, ("-c",), "o", check=False)() for k in ("pruned", "full")}
                if all(w is None for w, _ in rdc.values()):
                    # ptxas refuses both relocatable builds alike (an entry's register bound below what the
                    # separately compiled helper needs): nothing to compare, recorded
                    row["identity_rdc"] = {"skipped": f"ptxas -c refused both builds: {rdc['full'][1][:300]}"}
                else:
                    for k in ("pruned", "full"):
                        if rdc[k][0] is None:
                            raise SystemExit(f"{name} ({k}, -c): ptxas failed: {rdc[k][1][:2000]}")
                        row[f"{k}_rdc_cpu_s"] = rdc[k][1]
                        row[f"{k}_rdc_bytes"] = (d / f"{k}.o").stat().st_size
                    row["identity_rdc"] = identity(d / "pruned.o", d / "full.o", hfun, nvdisasm)
            rows.append(row)
            idn = row["identity"].get("code_identical", "-"), row.get("identity_rdc", {}).get("code_identical", "refused")
            print(f"[corpus {i}/{len(items)}] {name}: ptxas cpu orig {row['original_cpu_s']:.2f} s, pruned "
                  f"{row['pruned_cpu_s']:.2f} s, full {row['full_cpu_s']:.2f} s; cubin {row['cubin_bytes']['original']}"
                  f" -> {row['cubin_bytes']['pruned']} (full {row['cubin_bytes']['full']}); identical {idn}",
                  file=sys.stderr)
    inst = [r for r in rows if "code_identical" in r["identity"]]
    rdc = [r for r in inst if "code_identical" in r["identity_rdc"]]
    summ = {
        "modules": len(rows), "instrumented": len(inst),
        "code_identical_whole_program": sum(r["identity"]["code_identical"] for r in inst),
        "rdc_compared": len(rdc), "rdc_refused_by_ptxas": [r["module"] for r in inst if r not in rdc],
        "code_identical_rdc": sum(r["identity_rdc"]["code_identical"] for r in rdc),
        "sass_identical_whole_program": sum(bool(r["identity"].get("sass_identical")) for r in inst),
        "sass_identical_rdc": sum(bool(r["identity_rdc"].get("sass_identical")) for r in rdc),
        "ptxas_cpu_ratio_pruned_over_original": spread([r["pruned_cpu_s"] / r["original_cpu_s"] for r in inst]),
        "ptxas_cpu_ratio_full_over_original": spread([r["full_cpu_s"] / r["original_cpu_s"] for r in inst]),
        "ptxas_cpu_ratio_pruned_over_full": spread([r["pruned_cpu_s"] / r["full_cpu_s"] for r in inst]),
        "ptxas_cpu_ratio_stub_over_original": spread([r["stub_cpu_s"] / r["original_cpu_s"] for r in inst]),
        "helper_share_of_added_ptxas_cpu": spread([(r["pruned_cpu_s"] - r["stub_cpu_s"]) /
                                                   max(r["pruned_cpu_s"] - r["original_cpu_s"], 1e-9) for r in inst]),
        # the helpers' compile per kernel (ptxas compiles them into each entry, whole-program)
        "helper_cpu_s_per_kernel": spread([(r["pruned_cpu_s"] - r["stub_cpu_s"]) / r["entries"] for r in inst
                                           if r["entries"]]),
        "cubin_ratio_stub_over_original": spread([r["cubin_bytes"]["stub"] / r["cubin_bytes"]["original"] for r in inst]),
        "ptxas_rdc_cpu_ratio_pruned_over_full": spread([r["pruned_rdc_cpu_s"] / r["full_rdc_cpu_s"] for r in rdc]),
        "cubin_ratio_pruned_over_original": spread([r["cubin_bytes"]["pruned"] / r["cubin_bytes"]["original"]
                                                    for r in inst]),
        "cubin_ratio_full_over_original": spread([r["cubin_bytes"]["full"] / r["cubin_bytes"]["original"] for r in inst]),
        "rdc_object_ratio_pruned_over_full": spread([r["pruned_rdc_bytes"] / r["full_rdc_bytes"] for r in rdc]),
        "ptx_ratio_pruned_over_full": spread([r["ptx_bytes"]["pruned"] / r["ptx_bytes"]["full"] for r in inst]),
    }
    return {"summary": summ, "rows": rows}


# --------------------------------------------------------------------------------------------
# separate: a prebuilt helper object through nvlink, against the whole-program build
# --------------------------------------------------------------------------------------------

SEPARATE_MODULES = ("triton/inductor_00_triton_poi_fused_zeros_0", "triton/softmax_row", "triton/layernorm_fwd",
                    "triton/matmul_f16_s3", "triton/embedding_gather", "triton/flash_attn_fwd_d64")


def part_separate(ns, ptxas: str, work: Path) -> dict:
    import re

    import ptx_corpus
    from hbfcc import occupancy
    from hbfcc.ptx import print_module
    from hbfcc.ptx.parser import parse_module
    corpus = {f"triton/{k}": v for k, v in ptx_corpus.triton_corpus().items()}
    nvlink = shutil.which("nvlink") or str(Path(ptxas).parent / "nvlink")
    helper = H.load_helper()
    hobj = work / "helper.o"

    def run(argv: list[str]) -> float:
        w, c, cp = timed(argv)
        if cp.returncode != 0:
            raise SystemExit(f"{argv[0]} failed: {cp.stderr[-2000:]}")
        return c
    run([ptxas, "-arch=sm_90a", "-c", "-lineinfo", helper.path, "-o", str(hobj)])     # once, not timed
    rows = []
    for name in SEPARATE_MODULES[:ns.limit or None]:
        text = corpus[name].read_text()
        whole = rewrite_text(text, filename=name).text
        sep = re.sub(r"^\.weak \.func", ".extern .func", rewrite_text(text, filename=name, link=False).text, flags=re.M)
        d = work / "sep" / name.replace("/", "_")
        d.mkdir(parents=True, exist_ok=True)
        for k, t in (("original", text), ("whole", whole), ("separate", sep)):
            (d / f"{k}.ptx").write_text(t)

        # capped: the same route with the kernels' registers held at the whole-program build's count
        # (``.maxnreg`` per entry: Triton's .reqntid makes ptxas ignore -maxrregcount) and the helper object
        # assembled under -maxrregcount = the smallest of them, without -lineinfo (its PTX text, ~450 KB, is
        # not embedded in every cubin; the kernel keeps its own) (built once per cap, not timed)
        run([ptxas, "-arch=sm_90a", "-lineinfo", str(d / "whole.ptx"), "-o", str(d / "whole.cubin")])
        wf = cubin.function_facts(d / "whole.cubin")
        entries = [f.name for f in parse_module(text).functions() if f.is_entry and f.body is not None]
        caps = {e: wf[e].registers for e in entries if e in wf and wf[e].registers}
        cap = min(caps.values())
        (d / "capped.ptx").write_text(print_module(occupancy.apply(parse_module(sep), caps)))
        hcap = work / f"helper_cap{cap}.o"
        if not hcap.exists():
            run([ptxas, "-arch=sm_90a", "-c", f"-maxrregcount={cap}", helper.path, "-o", str(hcap)])

        def variant(k: str):
            def go():
                if k in ("separate", "capped"):
                    c = run([ptxas, "-arch=sm_90a", "-lineinfo", "-c", str(d / f"{k}.ptx"), "-o", str(d / f"{k}.o")])
                    return c + run([nvlink, "-arch=sm_90a", str(d / f"{k}.o"), str(hobj if k == "separate" else hcap),
                                    "-o", str(d / f"{k}.cubin")])
                return run([ptxas, "-arch=sm_90a", "-lineinfo", str(d / f"{k}.ptx"), "-o", str(d / f"{k}.cubin")])
            return go
        t = interleaved({k: variant(k) for k in ("original", "whole", "separate", "capped")}, ns.reps)
        facts = {k: cubin.function_facts(d / f"{k}.cubin") for k in ("original", "whole", "separate", "capped")}
        row = {"module": name, **{f"{k}_cpu_s": statistics.median(v) for k, v in t.items()},
               "cubin_bytes": {k: (d / f"{k}.cubin").stat().st_size for k in facts},
               "kernels": {e: {k: {"registers": facts[k][e].registers, "frame_bytes": facts[k][e].frame_bytes}
                               for k in facts if e in facts[k]} for e in entries}}
        rows.append(row)
        row["helper_cap"] = cap
        print(f"[separate] {name}: cpu orig {row['original_cpu_s']:.2f} whole {row['whole_cpu_s']:.2f} separate "
              f"{row['separate_cpu_s']:.2f} capped {row['capped_cpu_s']:.2f} s; regs {row['kernels']}", file=sys.stderr)
    summ = {"modules": len(rows),
            "cpu_ratio_whole_over_original": spread([r["whole_cpu_s"] / r["original_cpu_s"] for r in rows]),
            "cpu_ratio_separate_over_original": spread([r["separate_cpu_s"] / r["original_cpu_s"] for r in rows]),
            "cubin_ratio_whole_over_original": spread([r["cubin_bytes"]["whole"] / r["cubin_bytes"]["original"]
                                                       for r in rows]),
            "cubin_ratio_separate_over_original": spread([r["cubin_bytes"]["separate"] / r["cubin_bytes"]["original"]
                                                          for r in rows]),
            "cpu_ratio_capped_over_original": spread([r["capped_cpu_s"] / r["original_cpu_s"] for r in rows]),
            "cpu_ratio_capped_over_whole": spread([r["capped_cpu_s"] / r["whole_cpu_s"] for r in rows]),
            "cubin_ratio_capped_over_original": spread([r["cubin_bytes"]["capped"] / r["cubin_bytes"]["original"]
                                                        for r in rows]),
            "kernels_with_more_registers_capped": sum(
                1 for r in rows for k in r["kernels"].values()
                if (k.get("capped", {}).get("registers") or 0) > (k.get("whole", {}).get("registers") or 0)),
            "kernels_with_a_larger_frame_capped": sum(
                1 for r in rows for k in r["kernels"].values()
                if (k.get("capped", {}).get("frame_bytes") or 0) > (k.get("whole", {}).get("frame_bytes") or 0)),
            "kernels_with_more_registers_separate": sum(
                1 for r in rows for k in r["kernels"].values()
                if (k.get("separate", {}).get("registers") or 0) > (k.get("whole", {}).get("registers") or 0)),
            "kernels": sum(len(r["kernels"]) for r in rows)}
    return {"summary": summ, "rows": rows}


# --------------------------------------------------------------------------------------------
# nvcc: plain nvcc against hbfcc, object builds of the CUDA fixtures
# --------------------------------------------------------------------------------------------

def part_nvcc(ns, work: Path) -> dict:
    import ptx_corpus
    nvcc = ptx_corpus.nvcc_path()
    hbfcc = str(VENV_BIN / "hbfcc") if (VENV_BIN / "hbfcc").exists() else shutil.which("hbfcc")
    if not nvcc or not hbfcc:
        return {"skipped": "nvcc or hbfcc not found"}
    srcs = sorted(ptx_corpus.cuda_sources().items())[:ns.limit or None]
    env = dict(os.environ, HBFCC_CACHE_DIR=str(work / "hbfcc-cache"), HBFCC_ARTIFACT_DIR=str(work / "store"),
               HBFCC_LOG="ERROR")
    # the shadow toolkit is built once per toolkit (a one-time cost, not a build's): build it first
    subprocess.run([hbfcc, "--version"], capture_output=True, env=env)
    rows = []
    tools = {"plain": [nvcc], "hbfcc": [hbfcc]}
    envs = {"plain": env, "hbfcc": env}
    if ns.full:   # the whole helper library linked (HBFCC_LINK_PRUNE=0): the link before issue 18's pruning
        tools["full"] = [hbfcc]
        envs["full"] = dict(env, HBFCC_LINK_PRUNE="0")
    if ns.against:   # hbfcc from another tree (its package first on PYTHONPATH; nvcc's ptxas steps inherit it)
        tools["before"] = [sys.executable, "-m", "hbfcc.cli"]
        envs["before"] = dict(env, PYTHONPATH=os.pathsep.join([str(Path(ns.against).resolve())] +
                                                               [x for x in [os.environ.get("PYTHONPATH")] if x]),
                              HBFCC_CACHE_DIR=str(work / "hbfcc-cache-before"),
                              HBFCC_ARTIFACT_DIR=str(work / "store-before"))
        subprocess.run(tools["before"] + ["--version"], capture_output=True, env=envs["before"])
    for i, (name, src) in enumerate(srcs, 1):
        out = work / "nvcc" / name
        out.mkdir(parents=True, exist_ok=True)

        def build(k: str, mode: str = "-c", suffix: str = "o"):
            def run():
                w, c, cp = timed(tools[k] + ["-arch=sm_90a", mode, str(src), "-o", str(out / f"{k}.{suffix}")],
                                 env=envs[k], cwd=str(out))
                return w, c, cp.returncode, (cp.stderr or "")[-600:]
            return run
        t = interleaved({k: build(k) for k in tools}, ns.reps)
        row: dict = {"source": name}
        failed = {k: v[-1][3] for k, v in t.items() if v[-1][2] != 0}
        if failed:
            row["failed"] = failed
        else:
            for k in tools:
                row[f"{k}_wall_s"] = statistics.median(x[0] for x in t[k])
                row[f"{k}_cpu_s"] = statistics.median(x[1] for x in t[k])
                row[f"{k}_wall_all_s"] = [round(x[0], 4) for x in t[k]]
            sizes = {}
            for k in tools:
                r = build(k, "-cubin", "cubin")()
                if r[2] == 0:
                    sizes[k] = (out / f"{k}.cubin").stat().st_size
            row["cubin_bytes"] = sizes
            if "before" in tools and "hbfcc" in sizes and "before" in sizes:
                row["cubin_identical_to_before"] = \
                    (out / "hbfcc.cubin").read_bytes() == (out / "before.cubin").read_bytes()
            ratios(row, tools, sizes)
        rows.append(row)
        print(f"[nvcc {i}/{len(srcs)}] {name}: " + (f"FAILED {sorted(failed)}" if failed else
              f"wall {row['plain_wall_s']:.2f} -> {row['hbfcc_wall_s']:.2f} s (x{row['wall_ratio']:.2f}), cpu "
              f"x{row['cpu_ratio']:.2f}, cubin x{row.get('cubin_ratio', float('nan')):.1f}"
              + (f"; whole library x{row['full_wall_ratio']:.2f}, cubin x{row.get('full_cubin_ratio', float('nan')):.1f}"
                 if "full_wall_ratio" in row else "")), file=sys.stderr)
    ok = [r for r in rows if "failed" not in r]
    summ = {"sources": len(rows), "built": len(ok), **summary(ok, tools)}
    return {"summary": summ, "rows": rows}


def ratios(row: dict, variants, sizes: dict) -> None:
    """Per item: each hbfcc variant's wall / CPU / cubin ratio to the plain build (``hbfcc``: the
    default, pruned link, keys without prefix as before; ``full``: ``full_*``), and pruned / full."""
    for k in variants:
        if k == "plain":
            continue
        pre = "" if k == "hbfcc" else f"{k}_"
        row[f"{pre}wall_ratio"] = row[f"{k}_wall_s"] / row["plain_wall_s"]
        row[f"{pre}cpu_ratio"] = row[f"{k}_cpu_s"] / row["plain_cpu_s"]
        if k in sizes and "plain" in sizes:
            row[f"{pre}cubin_ratio"] = sizes[k] / sizes["plain"]
    if "before" in variants:
        row["now_vs_before_wall"] = row["hbfcc_wall_s"] / row["before_wall_s"]
        row["now_vs_before_cpu"] = row["hbfcc_cpu_s"] / row["before_cpu_s"]
    if "full" in variants:
        row["pruned_vs_full_wall"] = row["hbfcc_wall_s"] / row["full_wall_s"]
        row["pruned_vs_full_cpu"] = row["hbfcc_cpu_s"] / row["full_cpu_s"]
        if "full" in sizes and "hbfcc" in sizes:
            row["pruned_vs_full_cubin"] = sizes["hbfcc"] / sizes["full"]


def summary(rows: list[dict], variants) -> dict:
    """Medians and spreads of :func:`ratios` over the items, and the summed-time ratios."""
    out: dict = {}
    keys = ["wall_ratio", "cpu_ratio", "cubin_ratio"]
    if "full" in variants:
        keys += ["full_wall_ratio", "full_cpu_ratio", "full_cubin_ratio", "pruned_vs_full_wall",
                 "pruned_vs_full_cpu", "pruned_vs_full_cubin"]
    if "separate" in variants:
        keys += ["separate_wall_ratio", "separate_cpu_ratio", "separate_cubin_ratio"]
    for v in DEFERRED:
        if v in variants:
            keys += [f"{v}_wall_ratio", f"{v}_cpu_ratio", f"{v}_cubin_ratio"]
    if "before" in variants:
        keys += ["before_wall_ratio", "before_cpu_ratio", "now_vs_before_wall", "now_vs_before_cpu"]
        out["cubin_identical_to_before"] = sum(1 for r in rows if r.get("cubin_identical_to_before"))
    for key in keys:
        out[key] = spread([r[key] for r in rows if key in r])
    for k in variants:
        if k != "plain" and rows:
            pre = "" if k == "hbfcc" else f"{k}_"
            out[f"{pre}total_wall_ratio"] = sum(r[f"{k}_wall_s"] for r in rows) / sum(r["plain_wall_s"] for r in rows)
            out[f"{pre}total_cpu_ratio"] = sum(r[f"{k}_cpu_s"] for r in rows) / sum(r["plain_cpu_s"] for r in rows)
    return out


# --------------------------------------------------------------------------------------------
# triton: triton.compile for sm_90a on the CPU, plain against hbfcc-ptxas
# --------------------------------------------------------------------------------------------

TRITON_SCRIPT = r'''
import json, os, resource, sys, tempfile, time
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget

@triton.jit
def add(x, y, o, n, B: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    m = offs < n
    tl.store(o + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)

@triton.jit
def softmax(x, o, stride, n, B: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, B)
    v = tl.load(x + row * stride + offs, mask=offs < n, other=-float("inf"))
    v = v - tl.max(v, axis=0)
    e = tl.exp(v)
    tl.store(o + row * stride + offs, e / tl.sum(e, axis=0), mask=offs < n)

@triton.jit
def layernorm(x, w, b, o, stride, n, eps, B: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, B)
    m = offs < n
    v = tl.load(x + row * stride + offs, mask=m, other=0.).to(tl.float32)
    mean = tl.sum(v, axis=0) / n
    d = tl.where(m, v - mean, 0.)
    rstd = 1 / tl.sqrt(tl.sum(d * d, axis=0) / n + eps)
    y = d * rstd * tl.load(w + offs, mask=m) + tl.load(b + offs, mask=m)
    tl.store(o + row * stride + offs, y, mask=m)

@triton.jit
def matmul(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + rm[:, None] * sam + (k + rk)[None, :] * sak)
        y = tl.load(b + (k + rk)[:, None] * sbk + rn[None, :] * sbn)
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.float16))

@triton.jit
def gather_atomic(idx, table, o, acc, n, D: tl.constexpr, B: tl.constexpr):
    rows = tl.program_id(0) * B + tl.arange(0, B)
    m = rows < n
    i = tl.load(idx + rows, mask=m, other=0)
    cols = tl.arange(0, D)
    v = tl.load(table + i[:, None] * D + cols[None, :], mask=m[:, None], other=0.)
    tl.store(o + rows[:, None] * D + cols[None, :], v, mask=m[:, None])
    tl.atomic_add(acc, tl.sum(tl.sum(v, axis=1), axis=0))

KERNELS = {
    "add": (add, {"x": "*fp32", "y": "*fp32", "o": "*fp32", "n": "i32", "B": "constexpr"}, {"B": 1024}),
    "softmax": (softmax, {"x": "*fp32", "o": "*fp32", "stride": "i32", "n": "i32", "B": "constexpr"}, {"B": 1024}),
    "layernorm": (layernorm, {"x": "*fp16", "w": "*fp32", "b": "*fp32", "o": "*fp32", "stride": "i32", "n": "i32",
                              "eps": "fp32", "B": "constexpr"}, {"B": 1024}),
    "matmul": (matmul, {"a": "*fp16", "b": "*fp16", "c": "*fp16", "M": "i32", "N": "i32", "K": "i32",
                        "sam": "i32", "sak": "i32", "sbk": "i32", "sbn": "i32", "scm": "i32", "scn": "i32",
                        "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}, {"BM": 128, "BN": 128, "BK": 64}),
    "gather_atomic": (gather_atomic, {"idx": "*i32", "table": "*fp32", "o": "*fp32", "acc": "*fp32", "n": "i32",
                                      "D": "constexpr", "B": "constexpr"}, {"D": 64, "B": 32}),
}

def cpu():
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime

def compile_one(fn, sig, cx):
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="tc.", dir=sys.argv[1])
    src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=cx)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32))

compile_one(*KERNELS["add"])     # warm-up: one-time initialisation is no kernel's compile time
out = {}
for name in sys.argv[2].split(","):
    c0, t0 = cpu(), time.perf_counter()
    k = compile_one(*KERNELS[name])
    out[name] = {"wall_s": time.perf_counter() - t0, "cpu_s": cpu() - c0, "cubin_bytes": len(k.asm["cubin"]),
                 "instrumented": b"__hb_" in k.asm["cubin"]}
    if len(sys.argv) > 3:            # keep the cubin (registers per entry: hbfcc.cubin)
        with open(os.path.join(sys.argv[3], name + ".cubin"), "wb") as f:
            f.write(k.asm["cubin"])
    if os.environ.get("HBFCC_DEFER") in ("1", "rewrite"):   # the on-demand build the runtime makes at the load
        from hbfcommon import artifact, deferred
        c0, t0 = cpu(), time.perf_counter()
        b = deferred.build(artifact.lookup_by_output(k.asm["cubin"]))
        out[name].update(built_wall_s=time.perf_counter() - t0, built_cpu_s=cpu() - c0, built_cached=b.cached,
                         built_cubin_bytes=len(b.cubin), built_instrumented=b"__hb_" in b.cubin)
        if len(sys.argv) > 3:
            with open(os.path.join(sys.argv[3], name + ".built.cubin"), "wb") as f:
                f.write(b.cubin)
    if os.environ.get("HBF_TRITON_INSTRUMENT") == "load":   # plain compile; what the runtime runs at the load
        from hbfcommon import deferred
        from runtime_cuda import triton_load
        c0, t0 = cpu(), time.perf_counter()
        p = triton_load.prepare_group(k.name, k.metadata_group)     # the reconstruction verified (ptxas once)
        c1, t1 = cpu(), time.perf_counter()
        b = deferred.build(p.record)
        out[name].update(verify_wall_s=t1 - t0, verify_cpu_s=c1 - c0, verified_now=p.verify_ns > 0,
                         built_wall_s=time.perf_counter() - t1, built_cpu_s=cpu() - c1, built_cached=b.cached,
                         built_cubin_bytes=len(b.cubin), built_instrumented=b"__hb_" in b.cubin)
        if len(sys.argv) > 3:
            with open(os.path.join(sys.argv[3], name + ".built.cubin"), "wb") as f:
                f.write(b.cubin)
print(json.dumps(out))
'''

TRITON_KERNELS = ("add", "softmax", "layernorm", "matmul", "gather_atomic")
# the variants whose compile hands Triton the plain cubin and whose instrumented build comes after (timed)
DEFERRED = ("defer", "defer_rewrite", "load")


def part_triton(ns, work: Path) -> dict:
    try:
        import triton  # noqa: F401
    except ImportError:
        return {"skipped": "triton not installed"}
    # hbfcc-ptxas's console entry as `pip install` makes it of pyproject's (the hbfcc on the path: run the bench
    # with PYTHONPATH=<this tree> to measure it), whatever the venv's installed script points at
    hbfcc_ptxas = work / "bin" / "hbfcc-ptxas"
    hbfcc_ptxas.parent.mkdir(parents=True, exist_ok=True)
    hbfcc_ptxas.write_text(f"#!{sys.executable}\nimport sys\ntry:\n    from hbfcc.ptxas_entry import main\n"
                           "except ImportError:   # a tree before hbfcc.ptxas_entry (--against)\n"
                           "    from hbfcc.cli import ptxas_main as main\nsys.exit(main())\n")
    hbfcc_ptxas.chmod(0o755)
    hbfcc_ptxas = str(hbfcc_ptxas)
    script = work / "triton_buildcost_kernels.py"
    script.write_text(TRITON_SCRIPT)        # @triton.jit needs its source in a file
    caches = work / "tcache"
    caches.mkdir(exist_ok=True)
    kernels = ",".join(TRITON_KERNELS[:ns.limit or None])
    # the cache dir (shadow toolkits, helper objects, the prepared helper module) is this run's own: the
    # warm-up compile fills what a machine keeps between builds
    base = dict(os.environ, HBFCC_ARTIFACT_DIR=str(work / "store"), HBFCC_LOG="ERROR", TMPDIR=str(work),
                HBFCC_CACHE_DIR=str(work / "hbfcc-cache"))
    base.pop("TRITON_PTXAS_PATH", None)
    if ns.triton_ptxas:    # one ptxas for every variant: plain Triton's and the one hbfcc-ptxas runs
        base["TRITON_PTXAS_PATH"] = ns.triton_ptxas
    envs = {"plain": base, "hbfcc": dict(base, TRITON_PTXAS_PATH=hbfcc_ptxas)}
    if ns.triton_ptxas:
        envs["hbfcc"]["HBFCC_REAL_PTXAS"] = ns.triton_ptxas
    if ns.full:   # the whole helper library linked (HBFCC_LINK_PRUNE=0)
        envs["full"] = dict(envs["hbfcc"], HBFCC_LINK_PRUNE="0")
    if ns.defer:      # HBFCC_DEFER=1 / rewrite: the plain cubin at compile time, the instrumented one built after
        # (timed); each its own store (their plain cubins are the same bytes: one record per cubin and store)
        envs["defer"] = dict(envs["hbfcc"], HBFCC_DEFER="1", HBFCC_ARTIFACT_DIR=str(work / "store-defer"))
        envs["defer_rewrite"] = dict(envs["hbfcc"], HBFCC_DEFER="rewrite",
                                     HBFCC_ARTIFACT_DIR=str(work / "store-defer-rewrite"))
        # HBF_TRITON_INSTRUMENT=load: plain Triton (no hbfcc at compile time); after each compile what the runtime
        # does at the load: the reconstruction verified (one ptxas run; skipped once the store has its record)
        # and the build (eager hbfcc-ptxas; read back once built)
        envs["load"] = dict(base, HBF_TRITON_INSTRUMENT="load", HBFCC_ARTIFACT_DIR=str(work / "store-load"))
    if ns.separate:   # HBFCC_LINK=separate: the helper object cache starts empty (its builds are in rep 1)
        envs["separate"] = dict(envs["hbfcc"], HBFCC_LINK="separate", HBFCC_CACHE_DIR=str(work / "hbfcc-cache"))
    if ns.against:    # hbfcc-ptxas running another tree's hbfcc (its package first on PYTHONPATH)
        envs["before"] = dict(envs["hbfcc"], PYTHONPATH=os.pathsep.join(
            [str(Path(ns.against).resolve())] + [x for x in [os.environ.get("PYTHONPATH")] if x]),
            HBFCC_CACHE_DIR=str(work / "hbfcc-cache-before"), HBFCC_ARTIFACT_DIR=str(work / "store-before"))
    cubins = {k: work / "cubins" / k for k in envs}
    for d in cubins.values():
        d.mkdir(parents=True, exist_ok=True)

    def run(k: str):
        def go():
            cp = subprocess.run([sys.executable, str(script), str(caches), kernels, str(cubins[k])],
                                capture_output=True, text=True, env=envs[k])
            if cp.returncode != 0:
                raise SystemExit(f"triton compile ({k}) failed: {cp.stderr[-3000:]}")
            return json.loads(cp.stdout.strip().splitlines()[-1])
        return go
    t = interleaved({k: run(k) for k in envs}, ns.reps)
    rows = []
    for name in kernels.split(","):
        row: dict = {"kernel": name}
        for k in envs:
            row[f"{k}_wall_s"] = statistics.median(r[name]["wall_s"] for r in t[k])
            row[f"{k}_cpu_s"] = statistics.median(r[name]["cpu_s"] for r in t[k])
            row[f"{k}_wall_all_s"] = [round(r[name]["wall_s"], 4) for r in t[k]]
            row[f"{k}_cubin_bytes"] = t[k][0][name]["cubin_bytes"]
            row[f"{k}_instrumented"] = t[k][0][name]["instrumented"]
        ratios(row, envs, {k: row[f"{k}_cubin_bytes"] for k in envs})
        for v in [v for v in DEFERRED if v in envs]:
            # each repeat's compile has a fresh Triton cache but the same artifact store: the deferred build of
            # the first repeat is assembled, later ones read it back (built_cached); the assembly is the first
            first = t[v][0][name]
            row[f"{v}_built_wall_s"], row[f"{v}_built_cpu_s"] = first["built_wall_s"], first["built_cpu_s"]
            row[f"{v}_built_cached_first"] = first["built_cached"]
            row[f"{v}_built_read_back_wall_s"] = [round(r[name]["built_wall_s"], 4) for r in t[v][1:]]
            row[f"{v}_cubin_is_plain"] = ((cubins[v] / f"{name}.cubin").read_bytes()
                                          == (cubins["plain"] / f"{name}.cubin").read_bytes())
            row[f"{v}_built_identical_to_eager"] = ((cubins[v] / f"{name}.built.cubin").read_bytes()
                                                    == (cubins["hbfcc"] / f"{name}.cubin").read_bytes())
            row[f"{v}_compile_plus_build_cpu_ratio"] = (row[f"{v}_cpu_s"] + row[f"{v}_built_cpu_s"]) / row["plain_cpu_s"]
            row[f"{v}_built_vs_eager_cpu"] = row[f"{v}_built_cpu_s"] / row["hbfcc_cpu_s"]
            if v == "load":   # the verification (first repeat) and what later repeats pay for it (none)
                row["load_verify_wall_s"], row["load_verify_cpu_s"] = first["verify_wall_s"], first["verify_cpu_s"]
                row["load_verified_first"] = first["verified_now"]
                row["load_verify_later_wall_s"] = [round(r[name]["verify_wall_s"], 4) for r in t[v][1:]]
                row["load_at_load_cpu_ratio"] = (row["load_verify_cpu_s"] + row["load_built_cpu_s"]) / row["plain_cpu_s"]
                row["load_compile_plus_build_cpu_ratio"] = (row["load_cpu_s"] + row["load_verify_cpu_s"]
                                                            + row["load_built_cpu_s"]) / row["plain_cpu_s"]
        if "before" in envs:
            row["before_cpu_all_s"] = [round(r[name]["cpu_s"], 4) for r in t["before"]]
            row["hbfcc_cpu_all_s"] = [round(r[name]["cpu_s"], 4) for r in t["hbfcc"]]
            row["cubin_identical_to_before"] = ((cubins["hbfcc"] / f"{name}.cubin").read_bytes()
                                                == (cubins["before"] / f"{name}.cubin").read_bytes())
        if "separate" in envs:
            row["separate_vs_whole_cpu"] = row["separate_cpu_s"] / row["hbfcc_cpu_s"]
            row["separate_vs_whole_wall"] = row["separate_wall_s"] / row["hbfcc_wall_s"]
            row["separate_cpu_all_s"] = [round(r[name]["cpu_s"], 4) for r in t["separate"]]
            facts = {k: cubin.function_facts(cubins[k] / f"{name}.cubin") for k in envs}
            # the module's one entry is the kernel's name (the helpers' own counts are in the separate cubin too)
            row["registers"] = {k: {name: facts[k][name].registers} for k in envs}
            row["frame_bytes"] = {k: {name: facts[k][name].frame_bytes} for k in envs}
        rows.append(row)
        print(f"[triton] {name}: wall {row['plain_wall_s']:.2f} -> {row['hbfcc_wall_s']:.2f} s (x{row['wall_ratio']:.2f}),"
              f" cpu x{row['cpu_ratio']:.2f}, cubin x{row['cubin_ratio']:.1f}"
              + (f"; whole library x{row['full_wall_ratio']:.2f}, cubin x{row['full_cubin_ratio']:.1f}"
                 if "full_wall_ratio" in row else "")
              + (f"; separate cpu x{row['separate_cpu_ratio']:.2f} (vs whole {row['separate_vs_whole_cpu']:.2f}), "
                 f"cubin x{row['separate_cubin_ratio']:.1f}, regs {row['registers']}" if "separate" in envs else "")
              + "".join(f"; {v} cpu x{row[f'{v}_cpu_ratio']:.2f} wall x{row[f'{v}_wall_ratio']:.2f} (plain cubin "
                        f"{row[f'{v}_cubin_is_plain']}), its build {row[f'{v}_built_cpu_s']:.2f} s cpu (identical to "
                        f"eager {row[f'{v}_built_identical_to_eager']})"
                        for v in DEFERRED if v in envs)
              + (f"; now/before cpu {row['now_vs_before_cpu']:.3f} (before {row['before_cpu_s']:.2f} s), "
                 f"cubin identical {row['cubin_identical_to_before']}" if "before" in envs else ""),
              file=sys.stderr)
    summ = {"kernels": len(rows), **summary(rows, envs),
            **({"separate_vs_whole_cpu": spread([r["separate_vs_whole_cpu"] for r in rows]),
                "separate_vs_whole_wall": spread([r["separate_vs_whole_wall"] for r in rows]),
                "entries_with_more_registers_separate_than_whole": sum(
                    1 for r in rows for e, n in r["registers"]["separate"].items()
                    if (n or 0) > (r["registers"]["hbfcc"].get(e) or 0)),
                "entries": sum(len(r["registers"]["separate"]) for r in rows)} if "separate" in envs else {}),
            **{key: val for v in DEFERRED if v in envs for key, val in (
                (f"{v}_built_cpu_s", spread([r[f"{v}_built_cpu_s"] for r in rows])),
                (f"{v}_built_vs_eager_cpu", spread([r[f"{v}_built_vs_eager_cpu"] for r in rows])),
                (f"{v}_compile_plus_build_cpu_ratio", spread([r[f"{v}_compile_plus_build_cpu_ratio"] for r in rows])),
                (f"{v}_cubins_plain", all(r[f"{v}_cubin_is_plain"] for r in rows)),
                (f"{v}_builds_identical_to_eager", all(r[f"{v}_built_identical_to_eager"] for r in rows)))},
            **({"load_verify_cpu_s": spread([r["load_verify_cpu_s"] for r in rows]),
                "load_verify_wall_s": spread([r["load_verify_wall_s"] for r in rows]),
                "load_at_load_cpu_ratio": spread([r["load_at_load_cpu_ratio"] for r in rows]),
                "load_compile_plus_build_cpu_ratio": spread([r["load_compile_plus_build_cpu_ratio"] for r in rows]),
                "load_all_verified_first": all(r["load_verified_first"] for r in rows)} if "load" in envs else {}),
            "all_instrumented": all(r[f"{k}_instrumented"] for r in rows for k in envs
                                    if k not in ("plain", *DEFERRED))
            and not any(r["plain_instrumented"] for r in rows)}
    return {"summary": summ, "rows": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="corpus,nvcc,triton")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--limit", type=int, default=0, help="first N items of each part only (smoke runs)")
    ap.add_argument("--every", type=int, default=1, help="corpus: every K-th module only (sorted by name)")
    ap.add_argument("--no-full", dest="full", action="store_false",
                    help="nvcc, triton: leave out the whole-library link (HBFCC_LINK_PRUNE=0) builds")
    ap.add_argument("--separate", action="store_true",
                    help="triton: also build with HBFCC_LINK=separate (variant 'separate'; registers per entry "
                         "read from every variant's cubins)")
    ap.add_argument("--defer", action="store_true",
                    help="triton: also compile with HBFCC_DEFER=1 and =rewrite (variants 'defer', 'defer_rewrite': "
                         "the plain cubin at compile time) "
                         "and time the deferred instrumented build after each compile (its first repeat assembles, "
                         "later ones read the cached build back); checks the compile's cubin is plain Triton's and "
                         "the deferred build is the eager build's cubin byte for byte")
    ap.add_argument("--triton-ptxas", metavar="PTXAS", default=None,
                    help="triton: the ptxas of every variant (plain: TRITON_PTXAS_PATH; hbfcc: HBFCC_REAL_PTXAS); "
                         "the separate link needs one with nvlink beside it (a CUDA toolkit's)")
    ap.add_argument("--against", metavar="TREE", default=None,
                    help="nvcc, triton: also build with the hbfcc of another source tree (e.g. a `git archive` of an "
                         "earlier commit with its runtime_cuda/ptx), variant 'before': times and cubin identity against it")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "hbfcc_buildcost_cpu.json"))
    ns = ap.parse_args()
    if ns.against is not None and not (Path(ns.against) / "hbfcc" / "cli.py").is_file():
        # a PYTHONPATH entry without hbfcc would silently run this tree's hbfcc as "before"
        ap.error(f"--against {ns.against}: no hbfcc package there (expected {Path(ns.against) / 'hbfcc' / 'cli.py'})")
    parts = [p for p in ns.parts.split(",") if p]
    ptxas = find_real_ptxas()
    nvd = nvdisasm_path()
    helper = H.load_helper()
    doc: dict = {"what": "build cost of hbfcc against plain builds (issue 18 item 3) and identity of the pruned helper link",
                 "goal": "build time <= 1.3x plain (nvcc set, Triton compiles); cubin growth <= 2x",
                 "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                 "card": "CPU (this 2-core box)",
                 "host": {"platform": platform.platform(), "python": platform.python_version(),
                          "cpus": os.cpu_count(), "loadavg_start": os.getloadavg()},
                 "ptxas": {"path": ptxas, "version": ptxas_version_text(ptxas).strip().splitlines()[-2:]},
                 "nvdisasm": nvd, "helper": {"path": helper.path, "sha256": helper.sha256},
                 "rewriter_sha256": rewriter_sha(), "reps": ns.reps,
                 "command": " ".join([Path(sys.executable).name] + sys.argv)}
    with tempfile.TemporaryDirectory(prefix="hbfcc-buildcost.") as work:
        work = Path(work)
        if "corpus" in parts:
            doc["corpus"] = part_corpus(ns, ptxas, nvd)
        if "separate" in parts:
            doc["separate"] = part_separate(ns, ptxas, work)
        if "nvcc" in parts:
            doc["nvcc"] = part_nvcc(ns, work)
        if "triton" in parts:
            doc["triton"] = part_triton(ns, work)
    doc["host"]["loadavg_end"] = os.getloadavg()
    atomic_write_json(ns.out, doc, end="\n", indent=1)
    print(json.dumps({p: doc[p].get("summary", doc[p]) for p in parts}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
