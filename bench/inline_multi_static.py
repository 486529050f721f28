#!/usr/bin/env python3
"""The static cost of the inline issue path (stop 44: the multi-range inline path, docs/design.md §3.3): per
kernel, the rewritten entry's PTX instructions, its SASS instructions (cuobjdump -sass of ptxas's cubin),
registers / stack / spills (ptxas -v) and ptxas's time, for the hbfcc on ``PYTHONPATH`` -- run it once per
source tree and compare the JSONs (no GPU).

    # 1. the stress matrix's Triton kernels as PTX (plain Triton, CPU; needs triton): once
    PYTHONPATH=$PWD python bench/inline_multi_static.py --export-ptx /tmp/ims_ptx
    # 2. per tree (its hbfcc and its runtime_cuda/ptx helpers): rewrite, ptxas, count
    PYTHONPATH=$TREE python bench/inline_multi_static.py --ptx-dir /tmp/ims_ptx --label after --out X.json

Kernels: the matrix's copy (fp16, 1 load + 1 store site: one range, or two with ``inout``), add4 (fp32, four
loads + a store: four ranges), reduce (fp16, one range), and the test kernels of tests/hbfcc/test_rewrite_inline.py
(``stream``: one v4 load and one v4 store; ``loads4``: four loads of one pointer, one issue group). Static code
is the same whether the launch registers one range or several; what changes at run time is which path it takes.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

log = logging.getLogger("inline_multi_static")

# (kernel, dtype, constexprs, warps): the quick matrix's cases (bench/devpath_matrix.py case_list)
MATRIX = [("copy", "float16", {"EPP": 8192, "BLOCK": 1024}, 4),
          ("add4", "float32", {"EPP": 4096, "BLOCK": 1024}, 4),
          ("reduce", "float16", {"EPP": 8192, "BLOCK": 8192}, 4)]

TEST_HDR = ".version 9.0\n.target sm_90a\n.address_size 64\n"
STREAM = (Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "ptx" / "stream_v4.ptx").read_text()


def loads4() -> str:
    body = []
    for i in range(4):
        body.append(f"    add.s64 %rd{10 + i}, %rd4, {16 * i};")
        body.append(f"    @%p1 ld.global.v4.b32 {{%r{20 + 4 * i}, %r{21 + 4 * i}, %r{22 + 4 * i}, %r{23 + 4 * i}}}, [%rd{10 + i}];")
    uses = [f"    add.s32 %r8, %r8, %r{20 + 4 * i};" for i in range(4)]
    return TEST_HDR + """
.visible .entry k(.param .u64 k_p, .param .u32 k_n)
{
    .reg .pred %p<4>;
    .reg .b32 %r<40>;
    .reg .b64 %rd<16>;
    ld.param.u64 %rd1, [k_p];
    ld.param.u32 %r1, [k_n];
    mov.u32 %r2, %tid.x;
    setp.lt.u32 %p1, %r2, %r1;
    mul.wide.u32 %rd3, %r2, 16;
    add.s64 %rd4, %rd1, %rd3;
    mov.u32 %r8, 0;
""" + "\n".join(body + uses) + """
    st.global.u32 [%rd1], %r8;
    ret;
}
"""


def export_ptx(out: Path) -> None:
    """The matrix kernels' plain Triton PTX (triton.compile for sm_90, no GPU), plus the test kernels."""
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "bench"))
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    import devpath_common as DC
    out.mkdir(parents=True, exist_ok=True)
    K = DC.load_kernels(Path(tempfile.mkdtemp(prefix="ims_k.")))
    os.environ.setdefault("TRITON_PTXAS_PATH", shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas")   # plain
    for kernel, dtype, const, warps in MATRIX:
        fn = getattr(K, f"{kernel}_plain")
        sig = DC.triton_signature(kernel, dtype, const)
        names = list(sig)
        attrs = {(names.index(n),): [["tt.divisibility", 16]] for n, ty in DC.KERNEL_ARGS[kernel]
                 if ty.startswith("*") or ty == "IN"}
        k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=dict(const), attrs=attrs),
                           target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
        (out / f"{kernel}_{dtype}.ptx").write_text(k.asm["ptx"])
    (out / "stream.ptx").write_text(STREAM)
    (out / "loads4.ptx").write_text(loads4())


def _entry_ptx_count(text: str) -> int:
    """Instructions of the module's entries (statements ending in ';' that are not declarations)."""
    n, inside = 0, False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith(".visible .entry") or s.startswith(".entry"):
            inside = True
        elif inside and s == "}" and not line.startswith("\t") and not line.startswith(" "):
            inside = False
        elif inside and s.endswith(";") and not s.startswith(".") and not s.startswith("//"):
            n += 1
    return n


def _sass_counts(cubin: Path, cuobjdump: str) -> dict:
    """SASS instructions per function (cuobjdump -sass), entries and helpers apart."""
    txt = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    out: dict[str, int] = {}
    cur = None
    for line in txt.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            cur = m.group(1)
            out[cur] = 0
        elif cur and re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+\S", line):
            out[cur] += 1
    return out


def measure(ptx_dir: Path, label: str, reps: int, arch: str) -> dict:
    from hbfcc import helpers as H
    from hbfcc.rewrite import rewrite_text
    ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
    cuobjdump = shutil.which("cuobjdump") or next(
        (str(p) for p in Path(sys.prefix).glob("lib/python3*/site-packages/triton/backends/nvidia/bin/cuobjdump")), "")
    helper = H.load_helper()
    res: dict = {"label": label, "arch": arch, "ptxas": ptxas, "reps": reps, "helper": helper.path, "kernels": {}}
    for p in sorted(ptx_dir.glob("*.ptx")):
        r = rewrite_text(p.read_text(), filename=str(p), helper=helper)
        fns = r.meta["timing"]["functions"]
        rec: dict = {"sites": sum(f["sites"] for f in fns), "issue_groups": sum(f.get("issue_groups", 0) for f in fns),
                     "multi_checks": sum(f.get("multi_checks", 0) for f in fns),
                     "ptx_entry_instructions": _entry_ptx_count(r.text)}
        with tempfile.TemporaryDirectory() as d:
            src, cub = Path(d) / "m.ptx", Path(d) / "m.cubin"
            src.write_text(r.text)
            times, cpus = [], []
            for _ in range(reps):
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                cp = subprocess.run([ptxas, f"-arch={arch}", "-v", str(src), "-o", str(cub)],
                                    capture_output=True, text=True)
                times.append(time.perf_counter() - t0)
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpus.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
                if cp.returncode != 0:
                    raise SystemExit(f"ptxas failed on {p.name}:\n{cp.stderr[-2000:]}")
            # wall and CPU (user + sys of ptxas: less sensitive to the other jobs on a shared box)
            rec["ptxas_s"] = {"median": round(statistics.median(times), 3), "min": round(min(times), 3),
                              "max": round(max(times), 3)}
            rec["ptxas_cpu_s"] = {"median": round(statistics.median(cpus), 3), "min": round(min(cpus), 3),
                                  "max": round(max(cpus), 3), "all": [round(x, 3) for x in cpus]}
            entries = {}
            cur = None
            for line in cp.stderr.splitlines():
                m = re.search(r"Compiling entry function '(\S+)'", line)
                if m:
                    cur = m.group(1)
                    entries[cur] = {}
                m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
                if m and cur:
                    entries[cur].update(stack=int(m.group(1)), spill_stores=int(m.group(2)))
                m = re.search(r"Used (\d+) registers", line)
                if m and cur:
                    entries[cur]["registers"] = int(m.group(1))
            rec["entries"] = entries
            if cuobjdump:
                sass = _sass_counts(cub, cuobjdump)
                rec["sass_entry_instructions"] = {k: v for k, v in sass.items() if k in entries}
                rec["sass_total_instructions"] = sum(sass.values())
        res["kernels"][p.stem] = rec
        log.info("%s %s: %s", label, p.stem, json.dumps(rec))
    return res


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--export-ptx", default="", help="write the kernels' PTX to this folder and stop")
    ap.add_argument("--ptx-dir", default="")
    ap.add_argument("--label", default="now")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--arch", default="sm_90a")   # Triton's PTX targets sm_90a
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if a.export_ptx:
        export_ptx(Path(a.export_ptx))
        return 0
    res = measure(Path(a.ptx_dir), a.label, a.reps, a.arch)
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
