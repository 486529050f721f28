#!/usr/bin/env python3
"""Where an instrumented kernel's registers come from, with the inline issue path (issue 13). CPU only.

ptxas assembles an hbfcc-rewritten module in whole-program mode. For each Triton fixture this records the
entry's register count (ptxas -v) for:
  plain     the original PTX;
  stub      the rewrite linked with helpers that do nothing (hbfcc.helpers.stub_helper): what the kernel's own
            code needs -- its body, the sites, the inline path and its counters;
  direct    the rewrite linked with the default helper build (runtime_cuda/ptx/hbf_helpers.ptx);
  lean      the same with hbf_helpers_lean.ptx (the heavy pieces behind ABI calls);
  *_indirect  the same three with every helper call of the kernel made through a register (an ABI call);
  callfree  the direct rewrite with every helper call except entry and exit (`__hb_kernel_enter`/`_flush`) removed, the
            call's result replaced by an opaque value (%globaltimer): an estimate of a call-free inline body
            selected per launch (the inline refresh it would need instead of `__hb_inline_until` is not in it);
  callfree_none  the same with entry and exit calls removed too (the body and its inline path alone);
and, per exported helper of each build, the registers of a one-thread entry that calls only that helper with
arguments loaded from memory (the helper's own footprint as a direct callee).

    python3 bench/inline_registers.py [--out bench/results/inline_registers.json] [--kernels vector_add_f32,...]
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

from hbfcommon import abi  # noqa: E402
from hbfcc import helpers as H  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402

FIX = ROOT / "tests" / "fixtures" / "triton"
KERNELS = ("vector_add_f32", "softmax_row", "layernorm_fwd", "matmul_f16_s3")
BUILDS = {"direct": ROOT / "runtime_cuda/ptx/hbf_helpers.ptx", "lean": ROOT / "runtime_cuda/ptx/hbf_helpers_lean.ptx"}


def regs(text: str, wd: Path) -> dict[str, int]:
    """Registers per entry of a PTX module (ptxas -v, sm_90a)."""
    p = wd / "m.ptx"
    p.write_text(text)
    cp = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(p), "-o", str(wd / "m.cubin")], capture_output=True,
                        text=True)
    if cp.returncode != 0:
        raise SystemExit(f"ptxas failed: {cp.stderr[-800:]}")
    out, cur = {}, None
    for line in cp.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            cur = m.group(1)
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            out[cur] = int(m.group(1))
            cur = None
    return out


def indirect(text: str) -> str:
    """Every call to a helper in the module's own functions (before the linked helper banner) made through
    a register with a .callprototype: an indirect call, which ptxas compiles with the ABI convention."""
    cut = text.find("// ---- hbfcc: helper module")
    head, tail = (text, "") if cut < 0 else (text[:cut], text[cut:])

    def rep(m):
        ret, name, args = m.group(1) or "", m.group(2), m.group(3)
        sig = abi.HELPERS.get(name)
        if sig is None:
            return m.group(0)
        rp = "(" + ", ".join(f".param .b{w} _" for w, _ in sig.returns) + ")"
        pl = ", ".join(f".param .b{w} _" for w, _ in sig.params)
        return (f".reg .b64 %__hb_fp;\n\t\tmov.u64 %__hb_fp, {name};\n\t\t__hb_proto: .callprototype {rp} _ ({pl});\n"
                f"\t\tcall {ret}%__hb_fp, ({args}), __hb_proto;")
    return re.sub(r"call\s+(\(__hb_rv\),\s*)?(__hb_\w+),\s*\(([^)]*)\);", rep, head) + tail


def callfree(text: str, keep: tuple[str, ...] = ("__hb_kernel_flush", "__hb_kernel_enter")) -> str:
    """Every helper call block of the module's own functions but entry and exit removed; the call's result
    register gets an opaque value (%globaltimer / %clock), so no code that depends on it is folded away."""
    cut = text.find("// ---- hbfcc: helper module")
    head, tail = (text, "") if cut < 0 else (text[:cut], text[cut:])
    lines, out, i = head.split("\n"), [], 0
    while i < len(lines):
        if lines[i].strip() == "{":
            j = i + 1
            while j < len(lines) and lines[j].strip() != "}" and lines[j].strip() != "{":
                j += 1
            block = lines[i:j + 1]
            call = next((re.search(r"call\S*\s+(?:\(__hb_rv\),\s*)?(__hb_\w+)", x) for x in block if "call" in x), None)
            if j < len(lines) and lines[j].strip() == "}" and call and call.group(1) in abi.HELPERS \
                    and call.group(1) not in keep:
                for x in block:
                    m = re.search(r"ld\.param\.b(\d+)\s+(%[\w$]+),\s*\[__hb_rv\]", x)
                    if m:
                        out.append(f"\tmov.u{m.group(1)} {m.group(2)}, {'%globaltimer' if m.group(1) == '64' else '%clock'};")
                out.append(f"\t// call removed: {call.group(1)}")
                i = j + 1
                continue
        out.append(lines[i])
        i += 1
    return "\n".join(out) + tail


def helper_footprints(helper_text: str, wd: Path) -> dict[str, int]:
    """Per exported helper: registers of an entry that calls only it (arguments loaded from memory, so
    nothing is constant-folded away)."""
    out = {}
    for name, sig in abi.HELPERS.items():
        decl = " ".join(f".param .b{w} p{i};" for i, (w, _n) in enumerate(sig.params))
        st = "\n".join(f"ld.volatile.global.u{w} %v{w}_{i}, [%ptr+{8 * i}]; st.param.b{w} [p{i}], %v{w}_{i};"
                       for i, (w, _n) in enumerate(sig.params))
        rv = ".param .b64 rv;" if sig.returns else ""
        call = f"call {'(rv), ' if sig.returns else ''}{name}, ({', '.join(f'p{i}' for i in range(len(sig.params)))});"
        entry = (f"\n.visible .entry probe(.param .u64 pp)\n{{\n.reg .b64 %ptr; .reg .b64 %v64_<8>; .reg .b32 %v32_<8>;\n"
                 f"ld.param.u64 %ptr, [pp];\n{{ {decl} {rv}\n{st}\n{call}\n}}\nret;\n}}\n")
        out[name] = regs(helper_text + entry, wd)["probe"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "inline_registers.json"))
    ap.add_argument("--kernels", default=",".join(KERNELS))
    a = ap.parse_args()
    res: dict = {"what": __doc__.split("\n\n")[0], "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
                 "command": " ".join(["python3", "bench/inline_registers.py"] + sys.argv[1:]),
                 "ptxas": subprocess.run(["ptxas", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1],
                 "kernels": {}, "helper_footprint": {}}
    with tempfile.TemporaryDirectory(prefix="hbf-inlregs.") as d:
        wd = Path(d)
        helpers = {"stub": H.stub_helper(), **{b: H.load_helper(str(p)) for b, p in BUILDS.items()}}
        for k in [x for x in a.kernels.split(",") if x]:
            src = (FIX / f"{k}.ptx").read_text()
            row = {"plain": regs(src, wd)}
            for b, h in helpers.items():
                text = rewrite_text(src, helper=h).text
                row[b] = regs(text, wd)
                row[f"{b}_indirect"] = regs(indirect(text), wd)
                if b == "direct":
                    row["callfree"] = regs(callfree(text), wd)
                    row["callfree_none"] = regs(callfree(text, keep=()), wd)
            res["kernels"][k] = row
            print(k, {v: list(r.values())[0] for v, r in row.items()}, flush=True)
        for b, p in BUILDS.items():
            res["helper_footprint"][b] = helper_footprints(p.read_text(), wd)
            print(b, res["helper_footprint"][b], flush=True)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    print("->", a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
