#!/usr/bin/env python3
"""Register cost of the helper ABI on instrumented kernels (issue 4, native-path overhead). CPU only.

Why this is the metric: the hbfcc-linked module is assembled by ptxas in whole-program mode, where a
kernel's register count is the maximum over its call graph, and a DIRECT call stacks the callee's
registers on top of the caller's values that live across it. A 16-register streaming kernel went to
84 registers once the helper PTX was in its call graph, occupancy fell to a third, and the kernel
ran 1.74x the plain build even detached (H200, bench/runtime_proofs.py). Register count, spill bytes
and spill instructions (STL/LDL) in the kernel's hot loops are what ptxas decides on the CPU; the
run-time ratio follows from them and is measured on the GPU by bench/runtime_proofs.py.

For each kernel (the float4 streaming kernel of workloads/microbench/hbf_microbench.cu and Triton
3.6 fixtures from tests/fixtures/triton/):
  plain        : ptxas -arch=sm_90a -v on the plain PTX;
  instrumented : `hbfcc rewrite` (helper PTX linked textually) then the same ptxas;
                 per helper function, the highest register it touches in the kernel's SASS
                 (nvdisasm), i.e. where the whole-program allocator placed it; the function that
                 sets the kernel's maximum; STL/LDL inside the kernel's own loops (backward
                 branches of the entry body, helper bodies excluded);
  variants     : before = helper PTX built from --baseline-rev (the helpers before this change);
                 direct = the default build (runtime_cuda/ptx/hbf_helpers.ptx, HBF_OOL_OPAQUE=0);
                 lean = hbf_helpers_lean.ptx (HBF_OOL_OPAQUE=1, heavy pieces behind ABI calls);
  maxnreg what-if : the lean-instrumented PTX with `.maxnreg N` on each entry, N = max(40, plain
                 rounded up to 8) -- what hbfcc could emit; registers + hot-loop STL/LDL.

    python3 bench/helper_registers.py [--out bench/results/helper_registers.json]
                                      [--baseline-rev 6af7b69^] [--kernels stream,matmul_f16_s3,...]
                                      [--hbfcc-env HBFCC_INLINE_LIVE=0 ...]

--hbfcc-env KEY=VALUE (repeatable) sets an hbfcc knob for the rewrites (e.g. HBFCC_INLINE_MULTI=0,
HBFCC_INLINE_LIVE=0: the build without the multi-range re-check / the live counter flush), recorded in the JSON.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hbfcommon.fsutil import atomic_write_json  # noqa: E402

FIXTURES = ["matmul_f16_s3", "matmul_bf16_s5_small", "softmax_row", "layernorm_fwd", "rmsnorm_bf16",
            "flash_attn_fwd_d64", "cross_entropy", "embedding_gather"]
DEFAULT_BASELINE_REV = "6af7b69^"  # hbf_helpers.cu before the register-lean restructuring


def _tool(name: str) -> str:
    p = shutil.which(name)
    if p:
        return p
    for d in ("/usr/local/cuda/bin", "/usr/local/cuda-13.0/bin"):
        if os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    raise SystemExit(f"{name} not found")


def _nvdisasm() -> str:
    p = shutil.which("nvdisasm")
    if p:
        return p
    try:
        import triton  # noqa: PLC0415
        q = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
        if q.exists():
            return str(q)
    except ImportError:
        pass
    raise SystemExit("nvdisasm not found (CUDA toolkit or the triton wheel provides it)")


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"command failed ({r.returncode}): {' '.join(argv)}\n{r.stderr[-3000:]}")
    return r


def build_helper(src: Path, out: Path, defines: tuple[str, ...] = ()) -> Path:
    tmp = out.with_suffix(".tmp")
    _run([_tool("nvcc"), "-std=c++17", "-O3", "-arch=compute_90a", "-rdc=true", "-ptx", *defines,
          f"-I{REPO / 'runtime_cuda' / 'include'}", f"-I{src.parent}", str(src), "-o", str(tmp)])
    out.write_text(re.sub(r"(?m)^\.visible \.func", ".weak .func", tmp.read_text()))
    tmp.unlink()
    return out


def baseline_helper_src(rev: str, wd: Path) -> Path:
    """hbf_helpers.cu (+ its .cuh) as of `rev`, in a temp dir next to the current includes."""
    d = wd / "baseline_src"
    d.mkdir(parents=True, exist_ok=True)
    ls = _run(["git", "-C", str(REPO), "ls-tree", "--name-only", rev, "runtime_cuda/src/"]).stdout.split()
    for f in ls:
        if f.endswith((".cu", ".cuh")):
            (d / Path(f).name).write_text(_run(["git", "-C", str(REPO), "show", f"{rev}:{f}"]).stdout)
    return d / "hbf_helpers.cu"


def ptxas_info(ptx: Path, cubin: Path, extra: list[str] | None = None) -> dict:
    """Per entry: registers, spill bytes, stack (ptxas -v)."""
    r = _run([_tool("ptxas"), "-arch=sm_90a", "-O3", "-v", *(extra or []), str(ptx), "-o", str(cubin)])
    info: dict[str, dict] = {}
    cur = None
    lines = r.stderr.splitlines()
    c7510 = sum(1 for ln in lines if "C7510" in ln)  # wgmma serialized at a function call
    for i, ln in enumerate(lines):
        m = re.search(r"Compiling entry function '([^']+)'", ln)
        if m:
            cur = m.group(1)
            info[cur] = {}
            continue
        m = re.search(r"Function properties for (\S+)", ln)
        if m and cur is not None and m.group(1) == cur and i + 1 < len(lines):
            s = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", lines[i + 1])
            if s:
                info[cur].update(stack_frame=int(s.group(1)), spill_stores=int(s.group(2)),
                                 spill_loads=int(s.group(3)))
        m = re.search(r"Used (\d+) registers", ln)
        if m and cur is not None:
            info[cur]["registers"] = int(m.group(1))
            c = re.search(r"(\d+) bytes cumulative stack size", ln)
            info[cur]["cumulative_stack"] = int(c.group(1)) if c else 0
    for v in info.values():
        v["wgmma_serialized_C7510"] = c7510  # per module (ptxas names the function, not the entry)
    return info


_DEMANGLE = re.compile(r"_ZN\d+_INTERNAL_\w+?_cu_[0-9a-f]{8}\d+(\w+?)E\w*")


def _short(fn: str) -> str:
    m = _DEMANGLE.search(fn)
    name = m.group(1) if m else fn
    return name.split("$")[-1] if "$" in name else name


def sass_analysis(cubin: Path) -> dict:
    """Per entry: highest register used by each function in its section; STL/LDL in the entry's loops."""
    txt = _run([_nvdisasm(), "-c", str(cubin)]).stdout
    out: dict[str, dict] = {}
    sec = fn = None
    body: dict[str, list] = {}
    for ln in txt.splitlines():
        m = re.match(r"\s*\.section\s+\.text\.(\S+?),", ln)
        if m:
            sec = fn = m.group(1)
            out[sec] = {"functions": {}, "entry_insns": []}
            continue
        if sec is None:
            continue
        m = re.match(r"^(\$?[\w$.]+):$", ln)
        if m and not m.group(1).startswith(".L") and not m.group(1).startswith(".text"):
            fn = m.group(1)
            continue
        m = re.match(r"^(\.L_x_\d+):$", ln)
        if m and fn == sec:
            out[sec]["entry_insns"].append(("label", m.group(1)))
            continue
        m = re.search(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", ln)
        if not m:
            continue
        addr, ins = int(m.group(1), 16), m.group(2)
        regs = [int(x) for x in re.findall(r"\bR(\d+)\b", ins)]
        f = out[sec]["functions"].setdefault(_short(fn) if fn != sec else "<kernel body>", 0)
        if regs:
            out[sec]["functions"][_short(fn) if fn != sec else "<kernel body>"] = max(f, max(regs) + 1)
        if fn == sec:
            out[sec]["entry_insns"].append(("insn", addr, ins))
    res = {}
    for sec, d in out.items():
        labels, insns, pending = {}, [], []
        for it in d["entry_insns"]:
            if it[0] == "label":
                pending.append(it[1])
            else:
                for lb in pending:
                    labels[lb] = it[1]
                pending = []
                insns.append((it[1], it[2]))
        loops = []
        for addr, ins in insns:
            m = re.search(r"\bBRA\b.*`\((\.L_x_\d+)\)", ins)
            if m and m.group(1) in labels and labels[m.group(1)] <= addr:
                loops.append((labels[m.group(1)], addr))
        in_loop = [ins for addr, ins in insns if any(lo <= addr <= hi for lo, hi in loops)]
        hot_stl = sum(1 for i in in_loop if re.search(r"\bSTL\b", i))
        hot_ldl = sum(1 for i in in_loop if re.search(r"\bLDL\b", i))
        funcs = d["functions"]
        top = max(funcs.items(), key=lambda kv: kv[1]) if funcs else ("", 0)
        res[sec] = {"function_max_register": dict(sorted(funcs.items(), key=lambda kv: -kv[1])),
                    "sets_max": top[0], "loops": len(loops), "hot_loop_insns": len(in_loop),
                    "hot_loop_STL": hot_stl, "hot_loop_LDL": hot_ldl,
                    "body_STL_LDL": sum(1 for _, i in insns if re.search(r"\b(STL|LDL)\b", i))}
    return res


def add_maxnreg(ptx_text: str, n_by_entry: dict[str, int]) -> str:
    out, cur = [], None
    for ln in ptx_text.split("\n"):
        m = re.match(r"^\.(?:visible |weak )?\.entry\s+(\w+)", ln)
        if m:
            cur = m.group(1)
        if cur and ln.strip() == "{" and cur in n_by_entry:
            out.append(f".maxnreg {n_by_entry[cur]}")
            cur = None
        out.append(ln)
    return "\n".join(out)


def kernel_sources(wd: Path, names: list[str]) -> dict[str, Path]:
    srcs = {}
    for n in names:
        if n == "stream":
            p = wd / "microbench_plain.ptx"
            if not p.exists():
                _run([_tool("nvcc"), "-std=c++17", "-O3", "-arch=sm_90a", "-ptx", "-DHBF_PLAIN_ONLY",
                      str(REPO / "workloads" / "microbench" / "hbf_microbench.cu"), "-o", str(p)])
            srcs[n] = p
        else:
            srcs[n] = REPO / "tests" / "fixtures" / "triton" / f"{n}.ptx"
    return srcs


def measure(name: str, plain_ptx: Path, helpers: dict[str, Path], wd: Path, only_entry: str | None,
            env: dict[str, str] | None = None) -> dict:
    kd = wd / name
    kd.mkdir(exist_ok=True)
    plain = ptxas_info(plain_ptx, kd / "plain.cubin")
    plain_sass = sass_analysis(kd / "plain.cubin")
    text = plain_ptx.read_text()
    has_mma = bool(re.search(r"\b(wgmma\.|mma\.sync|tcgen05\.)", text))
    row: dict = {"kernel": name, "has_tensor_core_mma": has_mma,
                 "policy_choice": "direct" if has_mma else "lean", "source": str(plain_ptx.relative_to(REPO)) if plain_ptx.is_relative_to(REPO)
                 else "workloads/microbench/hbf_microbench.cu (nvcc -DHBF_PLAIN_ONLY)", "entries": {}}
    for ent, pi in plain.items():
        if only_entry and ent != only_entry:
            continue
        row["entries"][ent] = {"plain": {**pi, "hot_loop_STL": plain_sass.get(ent, {}).get("hot_loop_STL"),
                                         "hot_loop_LDL": plain_sass.get(ent, {}).get("hot_loop_LDL")}}
    for tag, hptx in helpers.items():
        out = kd / f"{tag}.ptx"
        r = subprocess.run([sys.executable, "-m", "hbfcc.cli", "rewrite", str(plain_ptx), "-o", str(out),
                            "--helper", str(hptx)], cwd=REPO, capture_output=True, text=True, timeout=300,
                           env={**os.environ, **(env or {})})
        if r.returncode != 0:
            for ent in row["entries"]:
                row["entries"][ent][tag] = {"error": f"hbfcc rewrite failed: {r.stderr.strip()[-500:]}"}
            continue
        info = ptxas_info(out, kd / f"{tag}.cubin")
        sass = sass_analysis(kd / f"{tag}.cubin")
        for ent in row["entries"]:
            row["entries"][ent][tag] = {**info.get(ent, {}), **sass.get(ent, {})}
        if tag == "lean":
            nmap = {}
            for ent in row["entries"]:
                pr = row["entries"][ent]["plain"].get("registers", 0)
                nmap[ent] = max(40, -(-pr // 8) * 8)
            mp = kd / "lean_maxnreg.ptx"
            mp.write_text(add_maxnreg(out.read_text(), nmap))
            info2 = ptxas_info(mp, kd / "lean_maxnreg.cubin")
            sass2 = sass_analysis(kd / "lean_maxnreg.cubin")
            for ent in row["entries"]:
                s2 = sass2.get(ent, {})
                row["entries"][ent]["lean_maxnreg_whatif"] = {
                    "maxnreg": nmap[ent], **info2.get(ent, {}),
                    "hot_loop_STL": s2.get("hot_loop_STL"), "hot_loop_LDL": s2.get("hot_loop_LDL"),
                    "body_STL_LDL": s2.get("body_STL_LDL")}
            # ladder what-if (a rule hbfcc-ptxas could apply): the smallest .maxnreg, from nmap up in
            # steps of 8 below the uncapped lean count, at which the entry reports no spill and no
            # STL/LDL in its loops. Only for modules the policy gives lean (no tensor-core MMA).
            if not has_mma and len(row["entries"]) == 1:
                ent = next(iter(row["entries"]))
                lean_regs = row["entries"][ent]["lean"].get("registers") or 0
                found = None
                for n in range(nmap[ent], lean_regs, 8):
                    lp = kd / f"lean_ladder_{n}.ptx"
                    lp.write_text(add_maxnreg(out.read_text(), {ent: n}))
                    i3 = ptxas_info(lp, kd / f"lean_ladder_{n}.cubin").get(ent, {})
                    s3 = sass_analysis(kd / f"lean_ladder_{n}.cubin").get(ent, {})
                    if i3.get("spill_stores") == 0 and not s3.get("body_STL_LDL"):
                        found = {"maxnreg": n, **i3, "hot_loop_STL": s3.get("hot_loop_STL"),
                                 "hot_loop_LDL": s3.get("hot_loop_LDL"), "body_STL_LDL": s3.get("body_STL_LDL")}
                        break
                row["entries"][ent]["lean_maxnreg_ladder_whatif"] = found or {"maxnreg": None,
                                                                              "registers": lean_regs}
    return row


def occupancy_warps(regs: int | None) -> int | None:
    """Resident warps per SM on sm_90 from registers alone (64K regs, 256-reg warp granules, 64 warps)."""
    if not regs:
        return None
    per_warp = -(-regs * 32 // 256) * 256
    return min(64, 65536 // per_warp)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "helper_registers.json"))
    ap.add_argument("--baseline-rev", default=DEFAULT_BASELINE_REV)
    ap.add_argument("--kernels", default="stream," + ",".join(FIXTURES))
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--hbfcc-env", action="append", default=[], metavar="KEY=VALUE",
                    help="an hbfcc knob for the rewrites (repeatable), e.g. HBFCC_INLINE_MULTI=0")
    a = ap.parse_args(argv)
    env = {}
    for kv in a.hbfcc_env:
        k, sep, v = kv.partition("=")
        if not sep or not k.startswith("HBFCC_"):
            ap.error(f"--hbfcc-env takes HBFCC_<KNOB>=VALUE, not {kv!r}")
        env[k] = v
    wd = Path(tempfile.mkdtemp(prefix="hbf-helper-regs-"))
    try:
        helpers = {}
        if a.baseline_rev:
            helpers["before"] = build_helper(baseline_helper_src(a.baseline_rev, wd), wd / "helpers_before.ptx")
        src = REPO / "runtime_cuda" / "src" / "hbf_helpers.cu"
        helpers["direct"] = build_helper(src, wd / "helpers_direct.ptx", ("-DHBF_OOL_OPAQUE=0",))
        helpers["lean"] = build_helper(src, wd / "helpers_lean.ptx", ("-DHBF_OOL_OPAQUE=1",))
        names = [n for n in a.kernels.split(",") if n]
        rows = []
        for n, p in kernel_sources(wd, names).items():
            print(f"[helper_registers] {n}", file=sys.stderr, flush=True)
            rows.append(measure(n, p, helpers, wd, "stream_plain" if n == "stream" else None, env))
        summary = []
        for r in rows:
            for ent, e in r["entries"].items():
                s = {"kernel": r["kernel"], "entry": ent, "plain_regs": e["plain"].get("registers")}
                for tag in ("before", "direct", "lean", "lean_maxnreg_whatif", "lean_maxnreg_ladder_whatif"):
                    if tag in e and "registers" in e[tag]:
                        s[f"{tag}_regs"] = e[tag]["registers"]
                        s[f"{tag}_spill_stores"] = e[tag].get("spill_stores")
                        s[f"{tag}_hot_loop_STL_LDL"] = (e[tag].get("hot_loop_STL") or 0) + (e[tag].get("hot_loop_LDL") or 0)
                        s[f"{tag}_warps_per_SM"] = occupancy_warps(e[tag]["registers"])
                    if tag in ("before", "direct", "lean") and tag in e:
                        s[f"{tag}_sets_max"] = e[tag].get("sets_max")
                        s[f"{tag}_C7510"] = e[tag].get("wgmma_serialized_C7510")
                s["plain_warps_per_SM"] = occupancy_warps(s["plain_regs"])
                # proposed per-module rule for hbfcc: lean helpers unless the module uses tensor-core MMA
                s["policy_choice"] = r["policy_choice"]
                s["policy_regs"] = s.get(f"{r['policy_choice']}_regs")
                s["policy_hot_loop_STL_LDL"] = s.get(f"{r['policy_choice']}_hot_loop_STL_LDL")
                summary.append(s)
        res = {"experiment": "helper_registers", "date": _dt.date.today().isoformat(),
               "card": "CPU (ptxas 13.0 -arch=sm_90a, no GPU)",
               "ptxas": _run([_tool("ptxas"), "--version"]).stdout.strip().splitlines()[-1],
               "baseline_rev": a.baseline_rev,
               "hbfcc_env": env,
               "command": "python3 bench/helper_registers.py",
               "note": ("registers/spills from ptxas -v (whole-program, as hbfcc-linked modules are assembled); "
                        "hot-loop STL/LDL = local-memory instructions inside the entry's own loops (nvdisasm); "
                        "function_max_register = highest register a helper touches where the allocator put it; "
                        "warps_per_SM from registers alone. before = helpers at --baseline-rev; direct = "
                        "runtime_cuda/ptx/hbf_helpers.ptx (default); lean = hbf_helpers_lean.ptx "
                        "(HBF_OOL_OPAQUE=1); lean_maxnreg_whatif = lean + `.maxnreg max(40, plain rounded "
                        "to 8)` on each entry (not emitted by hbfcc today); lean_maxnreg_ladder_whatif = the smallest "
                        "such cap (steps of 8) with no entry spill and no STL/LDL in the entry body, non-MMA "
                        "modules only; C7510 = ptxas warnings "
                        "'wgmma serialized ... at a function call' in the module."),
               "summary": summary, "kernels": rows}
        atomic_write_json(a.out, res, indent=1)
        for s in summary:
            print(json.dumps(s))
        return 0
    finally:
        if not a.keep:
            shutil.rmtree(wd, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
