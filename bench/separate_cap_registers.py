#!/usr/bin/env python3
"""Registers, stack and spills per function, and blocks per SM, of the separate link under each register cap
(issue 13; CPU only: ptxas and nvlink of CUDA 13, Triton for sm_90a without a GPU).

For the stream kernels of bench/devpath_cost.py (reduce, copy, sreduce, scopy: Triton, compiled for sm_90a on the
CPU, their PTX taken) and the Triton fixtures bench/inline_registers.py uses, per instrumented entry:

  plain        ptxas -v of the original PTX
  whole        ptxas -v of hbfcc's rewrite linked with the helpers (the default whole-program build): the entry's
               registers and spills, and the largest spill of a helper function in it
  stub         the rewrite linked with do-nothing helpers (hbfcc.helpers.stub_helper): the body's own need
  body_abi     ptxas -c of the rewrite with the helpers extern, no cap: the body's need with ABI calls
  sep_<cap>    the separate link (hbfcc/seplink.py) with .maxnreg <cap> on the entries and the helper object
               assembled under -maxrregcount <cap>: the body's registers and spills (ptxas -c), the linked
               kernel's registers (nvlink takes the maximum over the call graph), and the helpers' spills;
               caps: plain (today's HBFCC_SEPARATE_CAP=plain), body (HBFCC_SEPARATE_CAP=body), 48..80

blocks/SM: hbfcc/occupancy.py's sm_90 register rule for the entry's declared block (shared memory not counted).

    python3 bench/separate_cap_registers.py --out /tmp/sepcap.json [--modules reduce,copy,vector_add_f32]
"""
from __future__ import annotations

import argparse
import datetime as _dt
import logging
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from hbfcc import helpers as H, occupancy, seplink  # noqa: E402
from hbfcc.cubin import function_facts  # noqa: E402
from hbfcc.rewrite import print_text, rewrite_text  # noqa: E402
from hbfcc.toolchain import build_stats  # noqa: E402
from hbfcommon.env import env_set  # noqa: E402
from hbfcommon.fsutil import atomic_write_json  # noqa: E402

log = logging.getLogger("separate_cap_registers")
FIX = ROOT / "tests" / "fixtures" / "triton"
STREAM = ("reduce", "copy", "sreduce", "scopy")
FIXTURES = ("vector_add_f32", "softmax_row", "layernorm_fwd", "matmul_f16_s3")
CAPS = ("plain", "body", 48, 56, 64, 72, 80)
ARCH = "sm_90a"


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    cp = subprocess.run(argv, capture_output=True, text=True)
    if cp.returncode != 0:
        raise SystemExit(f"{Path(argv[0]).name} failed: {cp.stderr[-1500:]}")
    return cp


def stream_ptx(work: Path) -> dict[str, str]:
    """The stream kernels' PTX (the ``_plain`` builds: the same text hbfcc-ptxas gets for ``_hbf``, the name aside)."""
    import devpath_common as DC
    from devpath_cost import stream_spec
    os.environ["TRITON_PTXAS_PATH"] = _which("ptxas")
    os.environ.setdefault("TRITON_CACHE_DIR", str(work / "triton-cache"))
    K = DC.load_kernels(work)
    return {k: DC.cpu_triton_compile(K, stream_spec(k, 1.0), "plain").asm["ptx"] for k in STREAM}


def _which(tool: str) -> str:
    import shutil
    p = shutil.which(tool)
    if p is None:
        raise SystemExit(f"no {tool} on PATH")
    return p


_BRANCH = re.compile(r"\b(BRA|BRX|JMP|JMX|EXIT|RET|CALL)\b")
_LOCAL = re.compile(r"\b(LDL|STL)\b")


def local_traffic(sass: tuple[str, ...]) -> dict:
    """LDL/STL instructions of one function's SASS (hbfcc.cubin.normalized_sass): all; those in a basic block
    (split at labels and after branches and calls) that holds a CALL (spills and ABI arguments around a helper
    call: the cold path); those inside a loop (a backward branch's range) outside such blocks -- the hot loop's
    spills, an upper bound: a block can be cold without a call in it."""
    blocks, cur = [], []
    for s in sass:
        if s.endswith(":"):
            if cur:
                blocks.append(cur)
            cur = [s]
            continue
        cur.append(s)
        if _BRANCH.search(s):
            blocks.append(cur)
            cur = []
    if cur:
        blocks.append(cur)
    flat = [(i, s) for i, b in enumerate(blocks) for s in b]
    call_block = {i for i, b in enumerate(blocks) if any(re.search(r"\bCALL\b", s) for s in b)}
    where = {s[:-1]: k for k, (_i, s) in enumerate(flat) if s.endswith(":")}
    loops = []
    for k, (_i, s) in enumerate(flat):
        m = re.search(r"BRA\b.*`\((\.L\d+)\)", s)
        if m and m.group(1) in where and where[m.group(1)] < k:
            loops.append((where[m.group(1)], k))
    local = [(k, i) for k, (i, s) in enumerate(flat) if _LOCAL.search(s)]
    return {"ldl_stl": len(local), "in_call_blocks": sum(i in call_block for _k, i in local),
            "in_loop_not_call": sum(i not in call_block and any(a <= k <= b for a, b in loops) for k, i in local),
            "not_call": sum(i not in call_block for _k, i in local), "loops": len(loops)}


def _sass(path: Path, name: str) -> dict:
    from hbfcc.cubin import normalized_sass
    nd = _nvdisasm()
    return local_traffic(normalized_sass(path, nd)[name]) if nd else {}


def _nvdisasm() -> str | None:
    from hbfcc_buildcost import nvdisasm_path
    return nvdisasm_path()


def _spill(f: dict) -> int:
    return (f.get("spill_store_bytes") or 0) + (f.get("spill_load_bytes") or 0)


class AsmError(Exception):
    pass


def _asm(text: str, wd: Path, tag: str, *extra: str) -> dict[str, dict]:
    src, out = wd / f"{tag}.ptx", wd / f"{tag}.o"
    src.write_text(text)
    cp = subprocess.run(["ptxas", f"-arch={ARCH}", "-v", *extra, str(src), "-o", str(out)], capture_output=True,
                        text=True)
    if cp.returncode != 0:
        raise AsmError(cp.stderr.strip().splitlines()[0][:300])
    return {n: f.to_dict() for n, f in build_stats(cp.stdout + cp.stderr, str(out)).functions.items()}


def _isolation(on: bool):
    """HBFCC_CALL_ISOLATION for the rewrites of the block (hbfcommon.env.env_set)."""
    return env_set({"HBFCC_CALL_ISOLATION": "1" if on else "0"})


def separate(sres, callers, cap: int, helper: H.HelperModule, wd: Path, hobj: dict, threads: dict) -> dict:
    """The separate link of ``sres`` (a link=False rewrite) with every instrumented entry at ``cap``: per entry the
    body (ptxas -c), the linked registers, blocks/SM, its LDL/STL, the called helpers' facts."""
    caps = {x: cap for x in callers}
    text = print_text(seplink.stage(sres.module, {seplink.STAGE_NAME: {"caps": caps}}))
    try:
        body = _asm(text, wd, "sep", "-c")
        if cap not in hobj:
            hobj[cap] = (_asm(Path(helper.path).read_text(), wd, f"helper{cap}", "-c", f"-maxrregcount={cap}"),
                         wd / f"helper{cap}.o")
    except AsmError as e:
        return {e_: {"cap": cap, "error": str(e)} for e_ in callers}
    hstats, hpath = hobj[cap]
    linked = wd / "linked.cubin"
    _run(["nvlink", f"-arch={ARCH}", str(wd / "sep.o"), str(hpath), "-o", str(linked)])
    facts = function_facts(linked)
    called = sorted(n for n in hstats if n.startswith(seplink.HELPER_PREFIX) and re.search(rf"\b{n}\b", text))
    out = {}
    for e in callers:
        lregs = facts[e].registers
        out[e] = {"cap": cap, "body": body[e], "linked_registers": lregs,
                  "blocks_per_sm": occupancy.blocks_per_sm(lregs, threads.get(e) or 128),
                  "sass_local": _sass(linked, e),
                  "helpers_called": {n: hstats[n] for n in called},
                  "helpers_spill_bytes_total": sum(_spill(f) for f in hstats.values())}
    return out


def measure(name: str, src: str, helper: H.HelperModule, wd: Path, hobj: dict) -> dict:
    """One module: every variant, per instrumented entry."""
    fn = f"{name}.ptx"
    plain = _asm(src, wd, "plain")
    with _isolation(False):
        whole = _asm(rewrite_text(src, filename=fn, helper=helper).text, wd, "whole")
        whole_sass = {}
        stub = _asm(rewrite_text(src, filename=fn, helper=H.stub_helper()).text, wd, "stub")
        sres = rewrite_text(src, filename=fn, link=False)
    callers = seplink.callers(sres.module)
    threads = occupancy.entry_threads(sres.module)
    for e in callers:
        whole_sass[e] = _sass(wd / "whole.o", e)
    body_abi = _asm(print_text(seplink.extern_helpers(sres.module)), wd, "body_abi", "-c")
    with _isolation(True):
        whole_ci = _asm(rewrite_text(src, filename=fn, helper=helper).text, wd, "whole_ci")
        whole_ci_sass = {e: _sass(wd / "whole_ci.o", e) for e in callers}
        stub_ci = _asm(rewrite_text(src, filename=fn, helper=H.stub_helper()).text, wd, "stub_ci")
        ci = rewrite_text(src, filename=fn, link=False)
    body_abi_ci = _asm(print_text(seplink.extern_helpers(ci.module)), wd, "body_abi_ci", "-c")
    helper_fns = [n for n in whole if n not in callers and n not in plain]
    rows: dict = {}
    for e in sorted(callers):
        t = threads.get(e) or 128

        def occ(regs):
            return occupancy.blocks_per_sm(regs, t) if regs else None
        rows[e] = {"threads": t,
                   "plain": {**plain[e], "blocks_per_sm": occ(plain[e]["registers"])},
                   "whole": {**whole[e], "blocks_per_sm": occ(whole[e]["registers"]), "sass_local": whole_sass[e],
                             "helper_max_spill_bytes": max((_spill(whole[n]) for n in helper_fns), default=0)},
                   "stub": {**stub[e], "blocks_per_sm": occ(stub[e]["registers"])},
                   "body_abi": {**body_abi[e], "blocks_per_sm": occ(body_abi[e]["registers"])},
                   "whole_call_isolation": {**whole_ci[e], "blocks_per_sm": occ(whole_ci[e]["registers"]),
                                            "sass_local": whole_ci_sass[e]},
                   "stub_call_isolation": stub_ci[e], "body_abi_call_isolation": body_abi_ci[e]}
    for c in CAPS:
        per = {e: seplink.plain_cap(plain[e]["registers"]) if c == "plain" else
               seplink.body_cap(stub[e]["registers"]) if c == "body" else int(c) for e in callers}
        for cap in sorted(set(per.values())):
            got = separate(sres, callers, cap, helper, wd, hobj, threads)
            for e in callers:
                if per[e] == cap:
                    rows[e][f"sep_{c}"] = got[e]
    per = {e: seplink.body_cap(stub_ci[e]["registers"]) for e in callers}
    for cap in sorted(set(per.values())):
        got = separate(ci, callers, cap, helper, wd, hobj, threads)
        for e in callers:
            if per[e] == cap:
                rows[e]["sep_body_call_isolation"] = got[e]
    for e, r in rows.items():
        log.info("%s/%s plain %s (%s blocks/SM) | whole %s (%s b, spill %s, local %s) | stub %s | body_abi %s | "
                 "call isolation: whole %s (%s b, spill %s, local %s) stub %s abi %s", name, e,
                 r["plain"]["registers"], r["plain"]["blocks_per_sm"], r["whole"]["registers"],
                 r["whole"]["blocks_per_sm"], _spill(r["whole"]), r["whole"]["sass_local"],
                 r["stub"]["registers"], r["body_abi"]["registers"], r["whole_call_isolation"]["registers"],
                 r["whole_call_isolation"]["blocks_per_sm"], _spill(r["whole_call_isolation"]),
                 r["whole_call_isolation"]["sass_local"], r["stub_call_isolation"]["registers"],
                 r["body_abi_call_isolation"]["registers"])
        for c in [f"sep_{c}" for c in CAPS] + ["sep_body_call_isolation"]:
            v = r[c]
            if "error" in v:
                log.info("   %-26s cap %3s: %s", c, v["cap"], v["error"])
            else:
                log.info("   %-26s cap %3s: %3s regs %2s blocks/SM body spill %5s B, LDL/STL %s", c, v["cap"],
                         v["linked_registers"], v["blocks_per_sm"], _spill(v["body"]), v["sass_local"])
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--modules", default=",".join(STREAM + FIXTURES))
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    want = [m for m in a.modules.split(",") if m]
    bad = [m for m in want if m not in STREAM and not (FIX / f"{m}.ptx").is_file()]
    if bad or not want:
        ap.error(f"--modules: unknown {bad or 'none given'}; known: {', '.join(STREAM)} or a tests/fixtures/triton "
                 f"module name (e.g. {', '.join(FIXTURES)})")
    res: dict = {"what": __doc__.split("\n\n")[0],
                 "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
                 "command": " ".join(["python3", "bench/separate_cap_registers.py"] + sys.argv[1:]),
                 "ptxas": _run(["ptxas", "--version"]).stdout.strip().splitlines()[-1], "arch": ARCH,
                 "caps": [str(c) for c in CAPS], "modules": {}}
    helper = H.load_helper()
    res["helper"] = helper.path
    with tempfile.TemporaryDirectory(prefix="hbf-sepcap.") as d:
        wd = Path(d)
        srcs = stream_ptx(wd) if any(m in STREAM for m in want) else {}
        hobj: dict = {}
        for m in want:
            src = srcs[m] if m in STREAM else (FIX / f"{m}.ptx").read_text()
            res["modules"][m] = measure(m, src, helper, wd, hobj)
            atomic_write_json(a.out, res, indent=1, end="\n")    # after every module: partial results kept
    log.info("-> %s", a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
