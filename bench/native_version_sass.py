#!/usr/bin/env python3
"""SASS of a Triton matmul's hot loop: plain build vs hbfcc's two versions (CPU only, no GPU).

    .venv/bin/python bench/native_version_sass.py [--out bench/results]

The Triton matmul of bench/triton_matmul_overhead.py is compiled for sm_90a without a GPU
(``triton.compile`` with an explicit target; pointers and sizes marked divisible by 16, as the JIT
specializes them), rewritten by hbfcc (default pipeline), assembled with ptxas and disassembled with
nvdisasm (the triton wheel's). For the main loop (the backward branch around the HGMMAs) it counts:

* ``plain``: the loop of the original kernel;
* ``instrumented_native_path``: the instrumented version's loop without the in-band blocks (the
  regions a forward branch skips that hold a helper CALL): what a launch runs when some range is
  registered but this kernel's accesses are all out of band;
* ``native_version``: the loop of the untouched copy a launch with nothing registered runs.

Why it is measured: the inline fast reject alone left the matmul 2.0-3.7x slower on the H200 (run
with nothing registered); the native version brings that launch back to the plain loop.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hbfcommon.fsutil import atomic_write_json  # noqa: E402

CONFIGS = [("128x256x64_s3w8", 128, 256, 64, 3, 8), ("128x128x64_s4w4", 128, 128, 64, 4, 4),
           ("64x256x32_s4w4", 64, 256, 32, 4, 4)]


def triton_ptx(work: Path, BM: int, BN: int, BK: int, stages: int, warps: int) -> str:
    import importlib.util

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    src = (ROOT / "bench" / "triton_matmul_overhead.py").read_text()
    mm = re.search(r"MM = r'''(.*?)'''", src, re.S).group(1).replace("SFX", "k")
    f = work / "mm_sass_kernel.py"
    f.write_text("import triton\nimport triton.language as tl\n" + mm)
    spec = importlib.util.spec_from_file_location("mm_sass_kernel", f)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32",
           "sam": "i32", "sak": "constexpr", "sbk": "i32", "sbn": "constexpr", "scm": "i32", "scn": "constexpr",
           "BM": "constexpr", "BN": "constexpr", "BK": "constexpr", "GM": "constexpr"}
    names = list(sig)
    attrs = {(names.index(n),): [["tt.divisibility", 16]]
             for n in ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "sam", "sbk", "scm")}
    consts = {"sak": 1, "sbn": 1, "scn": 1, "BM": BM, "BN": BN, "BK": BK, "GM": 8}
    k = triton.compile(ASTSource(fn=mod.mm_k, signature=sig, constexprs=consts, attrs=attrs),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
    return k.asm["ptx"]


def _tool(name: str) -> str:
    """ptxas: the CUDA toolkit's (the helper PTX needs its ISA version); nvdisasm: the toolkit's,
    else the triton wheel's."""
    import shutil

    import triton
    p = shutil.which(name)
    if p:
        return p
    q = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
    if q.exists():
        return str(q)
    raise SystemExit(f"{name} not found")


def sass(ptx: str, work: Path, tag: str) -> str:
    p = work / f"{tag}.ptx"
    p.write_text(ptx)
    cub = work / f"{tag}.cubin"
    subprocess.run([_tool("ptxas"), "-arch=sm_90a", str(p), "-o", str(cub)], check=True, capture_output=True)
    return subprocess.run([_tool("nvdisasm"), "-c", str(cub)], check=True, capture_output=True, text=True).stdout


def _entry_insns(text: str, kern: str) -> list:
    out, on = [], False
    for ln in text.splitlines():
        if re.match(r"\s*\.section\s+\.text\." + re.escape(kern) + ",", ln):
            on = True
            continue
        if on and re.match(r"\s*\.section", ln):
            break
        if not on:
            continue
        m = re.match(r"^(\.L_x_\d+):", ln.strip())
        if m:
            out.append(("L", m.group(1)))
            continue
        m = re.search(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", ln)
        if m:
            out.append(("I", m.group(2)))
    return out


def hot_loops(text: str, kern: str) -> list[dict]:
    """Every loop (backward branch) that holds an HGMMA, in code order, with its instruction counts."""
    ins = _entry_insns(text, kern)
    lab = {x[1]: i for i, x in enumerate(ins) if x[0] == "L"}
    cold = [False] * len(ins)
    for i, x in enumerate(ins):     # in-band blocks: skipped by a forward branch, hold a CALL, no original op
        m = x[0] == "I" and re.match(r"@!?U?P\w+ BRA `\((\.L_x_\d+)\)", x[1])
        if m and lab.get(m.group(1), -1) > i:
            body = [y[1] for y in ins[i + 1:lab[m.group(1)]] if y[0] == "I"]
            if any("CALL" in y for y in body) and not any(re.search(r"LDGSTS|HGMMA|BAR\.SYNC|\bLDG|\bSTG", y) for y in body):
                for k in range(i + 1, lab[m.group(1)]):
                    cold[k] = True
    loops = []
    for i, x in enumerate(ins):
        m = x[0] == "I" and re.search(r"BRA\b.*`\((\.L_x_\d+)\)", x[1])
        if m and lab.get(m.group(1), i) < i:
            rng = range(lab[m.group(1)], i + 1)
            body = [ins[k][1] for k in rng if ins[k][0] == "I"]
            if any("HGMMA" in y for y in body):
                loops.append({"insns": len(body), "native_path_insns": sum(1 for k in rng if ins[k][0] == "I" and not cold[k]),
                              "calls": sum("CALL" in y for y in body),
                              "local_spill_insns": sum(bool(re.search(r"\b(STL|LDL)\b", y)) for y in body)})
    return loops


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args(argv)
    from hbfcc.rewrite import rewrite_text
    rows = {}
    with tempfile.TemporaryDirectory(prefix="hbf-sass.") as td:
        work = Path(td)
        for name, BM, BN, BK, st, nw in CONFIGS:
            ptx = triton_ptx(work, BM, BN, BK, st, nw)
            plain = hot_loops(sass(ptx, work, name + "_plain"), "mm_k")
            rr = rewrite_text(ptx, filename=name + ".ptx")
            inst = hot_loops(sass(rr.text, work, name + "_hbf"), "mm_k")
            if len(plain) != 1 or len(inst) != 2:
                raise SystemExit(f"{name}: expected 1 plain and 2 instrumented hot loops, got {len(plain)} / {len(inst)}")
            rows[name] = {"plain": plain[0]["insns"], "instrumented_loop": inst[0]["insns"],
                          "instrumented_native_path": inst[0]["native_path_insns"],
                          "instrumented_calls": inst[0]["calls"], "native_version": inst[1]["insns"],
                          "native_version_calls": inst[1]["calls"]}
            print(name, rows[name], flush=True)
    doc = {"what": "SASS instructions in the Triton matmul's hot loop: plain vs hbfcc's instrumented and native versions",
           "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
           "command": "python3 bench/native_version_sass.py", "target": "sm_90a", "configs": rows}
    atomic_write_json(Path(a.out) / "native_version_sass.json", doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
