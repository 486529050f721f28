#!/usr/bin/env python3
"""The static cost and effect of HBFCC_NATIVE_ENTRY (hbfcc/native_entry.py: <k>__hbnat, the untouched kernel as its
own .entry) on the CPU: per module, the plain build (the original PTX), the instrumented build without the native
entry (off) and with it (on) -- ptxas's CPU time (median of --reps, interleaved), the cubin's size, the registers /
stack / shared memory of the instrumented entry and of the native entry against the plain kernel's, and whether the
native entry's SASS is the plain kernel's instruction for instruction (cuobjdump, Triton's when the toolkit has none).
Modules: bench/tma_triton.py's three Triton TMA kernels (compiled for sm_90 by Triton with CUDA's ptxas, no GPU) and
a few of tests/fixtures/triton. No GPU.

    PYTHONPATH=$PWD python bench/native_entry_static.py --out /tmp/native_entry_static.json
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (str(ROOT), str(ROOT / "bench")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from hbfcc_buildcost import timed  # noqa: E402
from hbfcommon.env import env_set  # noqa: E402

log = logging.getLogger("native_entry_static")

FIXTURES = ("tma_matmul_host_desc_s3", "tma_matmul_device_desc_s4", "flash_attn_fwd_d64", "flash_attn_fwd_causal_d128",
            "matmul_f16_s3", "softmax_row", "vector_add_f32")
BUILDS = ("plain", "off", "on")


def cuobjdump() -> str | None:
    """CUDA's cuobjdump, else the one Triton bundles (hbfcc.toolchain's lookup)."""
    from hbfcc.toolchain import _triton_bundled  # noqa: PLC0415
    return shutil.which("cuobjdump") or next((p for p in _triton_bundled("cuobjdump") if os.path.isfile(p)), None)


def sass_of(cubin: Path, fn: str, tool: str | None = None) -> list[str] | None:
    """The SASS instructions of one function of a cubin (cuobjdump -sass -fun), addresses and encodings dropped;
    None without a cuobjdump or when it fails."""
    tool = tool or cuobjdump()
    if tool is None:
        return None
    cp = subprocess.run([tool, "-sass", "-fun", fn, str(cubin)], capture_output=True, text=True)
    if cp.returncode != 0:
        return None
    return [" ".join(m.group(1).split()) for m in (re.match(r"\s+/\*[0-9a-f]{4}\*/\s+(.*?);", ln)
                                                    for ln in cp.stdout.splitlines()) if m]


def bench_modules(work: Path) -> dict[str, str]:
    """bench/tma_triton.py's kernels compiled for sm_90 with CUDA's ptxas (their PTX)."""
    import triton  # noqa: PLC0415
    from triton.backends.compiler import GPUTarget  # noqa: PLC0415
    from triton.compiler import ASTSource  # noqa: PLC0415

    import tma_triton as TT  # noqa: PLC0415
    K = TT.load_kernels(work)
    out = {}
    with env_set({"TRITON_PTXAS_PATH": shutil.which("ptxas"), "TRITON_CACHE_DIR": str(work / "tc")}):
        for name in TT.KERNELS:
            sig, attrs = TT.cpu_signature(name)
            cx, warps = TT.CONFIG[name]
            k = triton.compile(ASTSource(fn=getattr(K, f"{name}_plain"), signature=sig, constexprs=dict(cx),
                                         attrs=attrs), target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
            out[f"bench/{name}"] = k.asm["ptx"]
    return out


def build(text: str, d: Path, tag: str) -> dict:
    """ptxas -v for sm_90a: CPU and wall time, the cubin's size, per function the -v numbers."""
    from hbfcc.toolchain import parse_ptxas_v  # noqa: PLC0415
    src, cub = d / f"{tag}.ptx", d / f"{tag}.cubin"
    src.write_text(text)
    wall, cpu, cp = timed([shutil.which("ptxas"), "-arch=sm_90a", "-v", str(src), "-o", str(cub)])
    if cp.returncode != 0:
        return {"error": cp.stderr[-1500:]}
    fs = parse_ptxas_v(cp.stderr + cp.stdout).functions
    return {"wall_s": wall, "cpu_s": cpu, "cubin_bytes": cub.stat().st_size, "cubin": str(cub),
            "functions": {n: {"registers": f.registers, "stack": f.stack_bytes, "spill_stores": f.spill_stores,
                              "spill_loads": f.spill_loads, "smem": f.smem_bytes or 0} for n, f in fs.items()}}


def measure(name: str, text: str, reps: int, work: Path) -> dict:
    from hbfcc import native_entry as NE  # noqa: PLC0415
    from hbfcc.rewrite import rewrite_text  # noqa: PLC0415
    texts = {"plain": text}
    row: dict = {}
    for b in ("off", "on"):
        with env_set({"HBFCC_NATIVE_ENTRY": "1" if b == "on" else "0"}):
            t0 = time.perf_counter()
            r = rewrite_text(text, filename=name.replace("/", "_") + ".ptx")
            row[f"rewrite_s_{b}"] = round(time.perf_counter() - t0, 4)
        texts[b] = r.text
        if b == "on":
            row["native_entries"] = r.meta[NE.STAGE_NAME]["entries"]
            row["reasons"] = r.meta[NE.STAGE_NAME]["reasons"]
    d = Path(tempfile.mkdtemp(dir=work))
    runs: dict[str, list[dict]] = {b: [] for b in BUILDS}
    for i in range(reps):
        for b in (BUILDS if i % 2 == 0 else BUILDS[::-1]):
            runs[b].append(build(texts[b], d, f"{b}{i}"))
    err = next((x["error"] for xs in runs.values() for x in xs if "error" in x), None)
    if err:
        return {**row, "error": err}
    last = {b: runs[b][-1] for b in BUILDS}
    for b in BUILDS:
        row[b] = {"cpu_s_median": round(statistics.median(x["cpu_s"] for x in runs[b]), 3),
                  "wall_s_median": round(statistics.median(x["wall_s"] for x in runs[b]), 3),
                  "cubin_bytes": last[b]["cubin_bytes"]}
    row["entries"] = {}
    tool = cuobjdump()
    for k, ne in row["native_entries"].items():
        p = last["plain"]["functions"].get(k)
        e = {"plain": p, "instrumented_off": last["off"]["functions"].get(k),
             "instrumented_on": last["on"]["functions"].get(k), "native_entry": ne}
        if ne:
            e["native"] = last["on"]["functions"].get(ne)
            e["native_equals_plain"] = e["native"] == p
            a, b_ = sass_of(Path(last["plain"]["cubin"]), k, tool), sass_of(Path(last["on"]["cubin"]), ne, tool)
            e["sass_identical"] = None if a is None or b_ is None else a == b_
            e["sass_instructions"] = None if a is None else len(a)
        row["entries"][k] = e
    row["cost_on_vs_off"] = {"ptxas_cpu": row["on"]["cpu_s_median"] / max(row["off"]["cpu_s_median"], 1e-9),
                             "cubin_bytes": row["on"]["cubin_bytes"] / row["off"]["cubin_bytes"],
                             "cubin_extra_bytes": row["on"]["cubin_bytes"] - row["off"]["cubin_bytes"],
                             "cubin_extra_vs_plain": (row["on"]["cubin_bytes"] - row["off"]["cubin_bytes"])
                             / row["plain"]["cubin_bytes"]}
    shutil.rmtree(d, ignore_errors=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the JSON to write (not bench/results: a CPU measurement)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-bench-kernels", action="store_true", help="the fixtures only (no Triton compile)")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="[native_entry_static %(asctime)s] %(message)s", datefmt="%H:%M:%S")
    if shutil.which("ptxas") is None:
        log.error("no ptxas on PATH")
        return 2
    work = Path(tempfile.mkdtemp(prefix="nestatic-"))
    mods = {} if a.no_bench_kernels else bench_modules(work)
    fix = ROOT / "tests" / "fixtures" / "triton"
    mods.update({f"fixture/{n}": (fix / f"{n}.ptx").read_text() for n in FIXTURES})
    res = {"what": __doc__.splitlines()[0], "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
           "reps": a.reps, "ptxas": subprocess.run([shutil.which("ptxas"), "--version"], capture_output=True,
                                                   text=True).stdout.strip().splitlines()[-1],
           "cpus": os.cpu_count(), "modules": {}}
    for name, text in mods.items():
        res["modules"][name] = row = measure(name, text, a.reps, work)
        log.info("%s: %s", name, row.get("error") or {
            "cpu_s": [row[b]["cpu_s_median"] for b in BUILDS], "cubin": [row[b]["cubin_bytes"] for b in BUILDS],
            "native_equals_plain": [e.get("native_equals_plain") for e in row["entries"].values()],
            "sass_identical": [e.get("sass_identical") for e in row["entries"].values()]})
        Path(a.out).write_text(json.dumps(res, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
