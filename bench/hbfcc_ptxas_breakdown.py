#!/usr/bin/env python3
"""Where ptxas spends its time on a module hbfcc rewrote (issue 18 item 3): the whole-program build of
the 5 Triton kernels of bench/hbfcc_buildcost.py, taken apart.

The kernels are compiled by Triton (plain, CPU, sm_90a) for their PTX; each is rewritten in this
process (hbfcc.rewrite.rewrite_text, what hbfcc-ptxas links: the pruned helper link); then the real
ptxas (Triton's bundled one unless ``--ptxas``) assembles, with Triton's options (``-lineinfo -v
--gpu-name=sm_90a``) unless a variant says otherwise:

* ``orig``: the plain kernel; ``hb``: the rewritten module as built;
* ``stub_opaque``: ``hb`` with every helper function's body replaced by a do-nothing body of the same
  signature that returns a value loaded (volatile) from ``__hb_state`` (ptxas cannot fold it: the
  kernel's own code stays as it is); ``stub_const``: the same with constant returns
  (hbfcc.helpers.stub_helper's bodies, ``__hb_inline_until`` = never): the kernel-body cost;
* ``lib_all``: the helper functions alone (the kernel's text replaced by one entry that calls every
  exported helper with arguments from its parameters) -- once per distinct linked set;
* ``minus:F``: ``hb`` with helper function F alone stubbed (opaque); ``only:F``: every helper but F
  stubbed -- which function dominates;
* option variants on ``hb``: ``-O0``..``-O2``, ``--allow-expensive-optimizations false``, no
  ``-lineinfo``, no ``-v``, ``.loc``/``.file``/``.section .debug_*`` stripped from the text,
  ``--split-compile=N``;
* ``--knobs``: the rewrite under ``HBFCC_INLINE_ISSUE=0``, ``HBFCC_GROUP_ISSUES=0``, the lean helper
  (knobs that change the device code: what each would save in ptxas, nothing about device speed).

Times are CPU seconds of the ptxas process (user+sys of the child), each variant ``--reps`` times,
interleaved (every variant of a kernel once, then again, the order flipped every repeat; the box is
shared); the median and min/max. With ``--identity`` the cubins of the option variants that must not
change code are compared function by function (hbfcc.cubin.function_code).

    python bench/hbfcc_ptxas_breakdown.py [--kernels add,softmax,...] [--reps 3] [--no-bisect]
                                          [--ptxas PTXAS] [--out bench/results/hbfcc_ptxas_breakdown_cpu.json]
"""
from __future__ import annotations

import argparse
import json
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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hbfcommon import abi  # noqa: E402
from hbfcommon.fsutil import atomic_write_json  # noqa: E402

from hbfcc import cubin  # noqa: E402
from hbfcc import helpers as H  # noqa: E402
from hbfcc.native_entry import SUFFIX as NATIVE_SUFFIX  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402
from hbfcc.toolchain import max_ptx_version, ptxas_version_text, rewriter_sha  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from hbfcc_buildcost import TRITON_KERNELS, TRITON_SCRIPT, spread  # noqa: E402
from hbfcommon.env import env_set  # noqa: E402

TRITON_OPTS = ("-lineinfo", "-v", "--gpu-name=sm_90a")
# the option variants of ``hb`` whose code is compared with it
SAME_MODULE_OPTIONS = ("-O0", "-O1", "-O2", "no_expensive_opt", "no_lineinfo", "no_v", "no_lineinfo_no_v", "strip_debug")
# --knobs: the rewrite under knobs that change the device code (what each would save in ptxas)
KNOB_VARIANTS = {"knob_inline_off": {"HBFCC_INLINE_ISSUE": "0"}, "knob_group_off": {"HBFCC_GROUP_ISSUES": "0"},
                 "knob_lean_helper": {"HBFCC_HELPER_PTX": str(H.lean_helper_path())}}

# the top-level function definitions of a PTX module: the head up to the body's "{" at column 0 and
# the body up to the "}" at column 0 (how nvcc, LLVM and the rewrite print them)
_FUNC = re.compile(r"^(?P<head>(?:\.weak |\.visible |\.extern )?\.func\b[^{;]*?)\n\{\n(?P<body>.*?)^\}\n",
                   re.M | re.S)
_ENTRY = re.compile(r"^(?:\.visible |\.weak )?\.entry\b.*?^\}\n", re.M | re.S)
_RET = re.compile(r"^\.(?:weak |visible )?\.func\s*\((?P<ret>[^)]*)\)")


def triton_ptx(work: Path) -> dict[str, str]:
    """The plain PTX Triton makes for each kernel (sm_90a, CPU)."""
    head = TRITON_SCRIPT.split('compile_one(*KERNELS["add"])')[0]
    script = work / "tk_ptx.py"
    script.write_text(head + "\nout = {n: compile_one(*KERNELS[n]).asm['ptx'] for n in sys.argv[2].split(',')}\n"
                      "print(json.dumps(out))\n")
    env = dict(os.environ, TMPDIR=str(work))
    env.pop("TRITON_PTXAS_PATH", None)
    (work / "tc").mkdir(exist_ok=True)
    cp = subprocess.run([sys.executable, str(script), str(work / "tc"), ",".join(TRITON_KERNELS)],
                        capture_output=True, text=True, env=env, check=True)
    return json.loads(cp.stdout.strip().splitlines()[-1])


def func_name(head: str) -> str:
    h = _RET.sub("", head.replace("\n", " "))
    return re.search(r"([A-Za-z_$%][\w$]*)\s*\(", h).group(1)


def helper_functions(text: str) -> dict[str, re.Match]:
    """Every helper function the link added (names ``__hb_*``), by name."""
    out = {}
    for m in _FUNC.finditer(text):
        n = func_name(m.group("head"))
        if n.startswith("__hb_"):
            out[n] = m
    return out


def _ret_decls(head: str) -> list[tuple[str, int]]:
    """(name, bytes) of each return parameter of a function head."""
    m = _RET.search(head.replace("\n", " "))
    if not m or not m.group("ret").strip():
        return []
    out = []
    for decl in m.group("ret").split(","):
        d = decl.strip()
        arr = re.search(r"\.b8\s+(\w+)\[(\d+)\]", d)
        if arr:
            out.append((arr.group(1), int(arr.group(2))))
            continue
        sc = re.search(r"\.[bsuf](8|16|32|64)\s+(\w+)", d)
        out.append((sc.group(2), int(sc.group(1)) // 8))
    return out


def stub_body(head: str, name: str, opaque: bool) -> str:
    rets = _ret_decls(head)
    if not rets:
        return "\tret;\n"
    lines = ["\t.reg .b64 %hbstub<2>;"]
    if opaque:
        lines.append(f"\tld.volatile.global.u64 %hbstub0, [{abi.STATE_GLOBAL}];")
    else:
        val = abi.INLINE_NEVER if name in ("__hb_inline_until", "__hb_inline_until_live") else 0
        lines.append(f"\tmov.u64 %hbstub0, {val};")
    lines.append("\t.reg .b32 %hbstubw<2>;\n\tcvt.u32.u64 %hbstubw0, %hbstub0;")
    for rn, size in rets:
        if size == 8:
            lines.append(f"\tst.param.b64 [{rn}], %hbstub0;")
        elif size == 4:
            lines.append(f"\tst.param.b32 [{rn}], %hbstubw0;")
        else:
            for off in range(0, size, 8):
                lines.append(f"\tst.param.b64 [{rn}+{off}], %hbstub0;")
    lines.append("\tret;")
    return "\n".join(lines) + "\n"


def stubbed(text: str, which: set[str] | None, opaque: bool = True) -> str:
    """``text`` with the bodies of the helper functions in ``which`` (None: all) replaced."""
    def sub(m: re.Match) -> str:
        n = func_name(m.group("head"))
        if not n.startswith("__hb_") or (which is not None and n not in which):
            return m.group(0)
        return f"{m.group('head')}\n{{\n{stub_body(m.group('head'), n, opaque)}}}\n"
    return _FUNC.sub(sub, text)


def strip_debug(text: str) -> str:
    """``.loc``/``.file`` lines and ``.section .debug_*`` blocks removed (what -lineinfo would read)."""
    text = re.sub(r"^\s*\.loc\b.*\n", "", text, flags=re.M)
    text = re.sub(r"^\s*\.file\b.*\n", "", text, flags=re.M)
    return re.sub(r"^\s*\.section\s+\.debug_\w+\s*\n?\s*\{.*?^\s*\}\s*\n", "", text, flags=re.M | re.S)


def library_alone(text: str, only: str | None = None) -> str:
    """The module's helper part with its kernel replaced by one entry calling every exported helper
    (or ``only``) with arguments loaded from the entry's parameters, each result stored."""
    names = [n for n in helper_functions(text) if n in abi.HELPERS and (only is None or n == only)]
    body = [".visible .entry __hb_lib_all(.param .u64 __hb_lib_p)", "{", "\t.reg .b64 %la<4>;", "\t.reg .b32 %lw<2>;",
            "\tld.param.u64 %la0, [__hb_lib_p];", "\tld.global.u64 %la1, [%la0];", "\tld.global.u32 %lw0, [%la0+8];"]
    for i, n in enumerate(names):
        sig = abi.HELPERS[n]
        body.append("\t{")
        for w, pn in sig.params:
            body.append(f"\t.param .b{w} la_{pn};")
            body.append(f"\tst.param.b{w} [la_{pn}], {'%la1' if w == 64 else '%lw0'};")
        for w, rn in sig.returns:
            body.append(f"\t.param .b{w} lr_{rn};")
        rets = ", ".join(f"lr_{rn}" for _, rn in sig.returns)
        args = ", ".join(f"la_{pn}" for _, pn in sig.params)
        body.append(f"\tcall.uni {'(' + rets + '), ' if rets else ''}{n}, ({args});")
        for w, rn in sig.returns:
            r = "%la2" if w == 64 else "%lw1"
            body.append(f"\tld.param.b{w} {r}, [lr_{rn}];")
            body.append(f"\tst.global.b{w} [%la0+{16 + 8 * i}], {r};")
        body.append("\t}")
    body += ["\tret;", "}", ""]
    entry = "\n".join(body)
    # the native entries (hbfcc's HBFCC_NATIVE_ENTRY: <k>__hbnat and the functions it calls, copied as <f>__hbnat)
    # are the kernel's, not the helpers': out with it
    text = _ENTRY.sub(lambda m: "" if NATIVE_SUFFIX + "(" in m.group(0).split("{", 1)[0] else m.group(0), text)
    text = _FUNC.sub(lambda m: "" if func_name(m.group("head")).endswith(NATIVE_SUFFIX) else m.group(0), text)
    out, n = _ENTRY.subn(lambda m: entry, text, count=1)
    assert n == 1
    return strip_debug(out)


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def ptxas_cpu(ptxas: str, ptx: Path, opts: tuple[str, ...], out: Path) -> tuple[float, float]:
    c0, t0 = children_cpu(), time.perf_counter()
    cp = subprocess.run([ptxas, *opts, str(ptx), "-o", str(out)], capture_output=True, text=True)
    wall, cpu_s = time.perf_counter() - t0, children_cpu() - c0
    if cp.returncode != 0:
        raise SystemExit(f"ptxas {' '.join(opts)} {ptx} failed: {cp.stderr[-2000:]}")
    return cpu_s, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", default=",".join(TRITON_KERNELS))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--bisect-reps", type=int, default=1, help="repeats of the minus:F / only:F variants")
    ap.add_argument("--no-bisect", action="store_true")
    ap.add_argument("--no-options", action="store_true")
    ap.add_argument("--knobs", action="store_true", help="also the rewrite under HBFCC_INLINE_ISSUE=0, "
                    "HBFCC_GROUP_ISSUES=0 and the lean helper (knobs that change the device code)")
    ap.add_argument("--no-lib", action="store_true", help="leave out stub_const and lib_all")
    ap.add_argument("--split", default="2", help="--split-compile values to try (comma separated)")
    ap.add_argument("--ptxas", default=None, help="the ptxas (default: Triton's bundled one)")
    ap.add_argument("--keep", default=None, help="keep the PTX and cubins in this directory")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "hbfcc_ptxas_breakdown_cpu.json"))
    ns = ap.parse_args()
    if ns.ptxas:
        ptxas = ns.ptxas
    else:
        import triton
        ptxas = str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas")
    work = Path(ns.keep) if ns.keep else Path(tempfile.mkdtemp(prefix="hbfcc-breakdown."))
    work.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    ptx = triton_ptx(work)
    cap = max_ptx_version(ptxas)
    doc: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "card": "CPU",
                 "cpus": os.cpu_count(), "load_start": os.getloadavg(), "ptxas": ptxas,
                 "ptxas_version": ptxas_version_text(ptxas).strip().splitlines()[-1],
                 "rewriter": rewriter_sha(), "helper": str(H.load_helper().path), "helper_sha256": H.load_helper().sha256,
                 "options": list(TRITON_OPTS), "reps": ns.reps, "argv": sys.argv[1:], "kernels": {}}
    for name in ns.kernels.split(","):
        orig = ptx[name]
        hb = rewrite_text(orig, filename=f"{name}.ptx", max_version=cap).text
        files: dict[str, tuple[str, tuple[str, ...]]] = {}

        def add(var: str, text: str, opts: tuple[str, ...] = TRITON_OPTS):
            p = work / f"{name}.{re.sub(r'[^A-Za-z0-9_.-]', '_', var)}.ptx"
            p.write_text(text)
            files[var] = (str(p), opts)
        add("orig", orig)
        add("hb", hb)
        add("stub_opaque", stubbed(hb, None, opaque=True))
        if not ns.no_lib:
            add("stub_const", stubbed(hb, None, opaque=False))
            add("lib_all", library_alone(hb))
        if ns.knobs:     # existing knobs that change what runs (device speed NOT measured here)
            for var, env in KNOB_VARIANTS.items():
                with env_set(env):
                    add(var, rewrite_text(orig, filename=f"{name}.ptx", max_version=cap,
                                          helper=H.load_helper(os.environ.get("HBFCC_HELPER_PTX"))).text)
        funcs = helper_functions(hb)
        sizes = {n: m.group(0).count("\n") for n, m in funcs.items()}
        if not ns.no_options:
            hbp = files["hb"][0]
            for o in ("-O0", "-O1", "-O2"):
                files[o] = (hbp, TRITON_OPTS + (o,))
            files["no_expensive_opt"] = (hbp, TRITON_OPTS + ("--allow-expensive-optimizations", "false"))
            files["no_lineinfo"] = (hbp, ("-v", "--gpu-name=sm_90a"))
            files["no_v"] = (hbp, ("-lineinfo", "--gpu-name=sm_90a"))
            files["no_lineinfo_no_v"] = (hbp, ("--gpu-name=sm_90a",))
            add("strip_debug", strip_debug(hb))
            for s in [x for x in ns.split.split(",") if x]:
                files[f"split{s}"] = (hbp, TRITON_OPTS + (f"--split-compile={s}",))
            files["orig_no_lineinfo"] = (files["orig"][0], ("-v", "--gpu-name=sm_90a"))
        variants = list(files)
        times: dict[str, list] = {v: [] for v in variants}
        walls: dict[str, list] = {v: [] for v in variants}
        for r in range(ns.reps):
            for v in (variants if r % 2 == 0 else variants[::-1]):
                c, w = ptxas_cpu(ptxas, Path(files[v][0]), files[v][1], work / f"{name}.{v}.cubin")
                times[v].append(c)
                walls[v].append(w)
        bis: dict[str, dict] = {}
        if not ns.no_bisect:
            bfiles = {}
            for fn in funcs:
                p1 = work / f"{name}.minus.{fn[:60]}.ptx"
                p1.write_text(stubbed(hb, {fn}))
                p2 = work / f"{name}.only.{fn[:60]}.ptx"
                p2.write_text(stubbed(hb, set(funcs) - {fn}))
                bfiles[f"minus:{fn}"] = p1
                bfiles[f"only:{fn}"] = p2
                if fn in abi.HELPERS:
                    p3 = work / f"{name}.alone.{fn[:60]}.ptx"
                    p3.write_text(library_alone(hb, only=fn))
                    bfiles[f"alone:{fn}"] = p3
            bt: dict[str, list] = {v: [] for v in bfiles}
            for r in range(ns.bisect_reps):
                for v in (list(bfiles) if r % 2 == 0 else list(bfiles)[::-1]):
                    bt[v].append(ptxas_cpu(ptxas, bfiles[v], TRITON_OPTS, work / f"{name}.bisect.cubin")[0])
            for v, xs in bt.items():
                bis[v] = spread(xs)
        med = {v: statistics.median(xs) for v, xs in times.items()}
        row = {"ptx_bytes": {"orig": len(orig), "hb": len(hb)},
               "helper_functions_lines": sizes,
               "cpu_s": {v: spread(xs) for v, xs in times.items()},
               "wall_s": {v: spread(xs) for v, xs in walls.items()},
               "cubin_bytes": {v: (work / f"{name}.{v}.cubin").stat().st_size for v in variants},
               "bisect_cpu_s": bis}
        # the breakdown: kernel body (opaque stubs) vs the helpers (the rest)
        row["breakdown"] = {"orig_cpu_s": med["orig"], "hb_cpu_s": med["hb"],
                            "kernel_body_cpu_s": med["stub_opaque"],
                            "helpers_cpu_s": med["hb"] - med["stub_opaque"],
                            "helpers_share_of_added": (med["hb"] - med["stub_opaque"]) / (med["hb"] - med["orig"]),
                            "lib_all_cpu_s": med.get("lib_all")}
        if bis:
            row["breakdown"]["per_function_minus"] = {
                k.split(":", 1)[1]: med["hb"] - v["median"] for k, v in bis.items() if k.startswith("minus:")}
            row["breakdown"]["per_function_only"] = {
                k.split(":", 1)[1]: v["median"] - med["stub_opaque"] for k, v in bis.items() if k.startswith("only:")}
        # code identity of the variants that must not change code
        ident = {}
        base = cubin.function_code(work / f"{name}.hb.cubin")
        for v in variants:
            if v in SAME_MODULE_OPTIONS or v.startswith("split"):
                other = cubin.function_code(work / f"{name}.{v}.cubin")
                d = cubin.code_differences(base, other)
                ident[v] = {"code_identical": not d and set(base) == set(other), "differences": d[:5]}
        row["identity_vs_hb"] = ident
        doc["kernels"][name] = row
        print(f"[{name}] " + ", ".join(f"{v} {med[v]:.2f}" for v in variants) +
              "; identical: " + ",".join(v for v, d in ident.items() if d["code_identical"]), file=sys.stderr)
        if bis:
            top = sorted(row["breakdown"]["per_function_minus"].items(), key=lambda kv: -kv[1])[:6]
            print(f"[{name}] minus: " + ", ".join(f"{k[:40]} {v:.2f}" for k, v in top), file=sys.stderr)
    doc["load_end"] = os.getloadavg()
    doc["elapsed_s"] = time.time() - t_start
    atomic_write_json(Path(ns.out), doc)
    if not ns.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
