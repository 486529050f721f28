#!/usr/bin/env python3
"""Where an instrumented kernel's registers come from: the helpers or the kernel's own rewritten body? (issues 13
and 18; CPU only: ptxas and nvlink of CUDA 13.)

The whole-program build (what hbfcc makes: the helper PTX linked into the module) gives one register count per
kernel, the maximum over its call graph, so it cannot say whether the helpers or the instrumented body set it.
Separate compilation can: the rewritten module with the helpers ``.extern`` is assembled alone (``ptxas -c``: the
kernel body's own count, the helpers being ABI calls), then linked (``nvlink``) with a helper object assembled once
-- uncapped, or with ``--maxrregcount`` 64 / 32 (the slow paths would spill, not the kernel). Per kernel:

  plain                 ptxas of the original PTX
  whole                 ptxas of hbfcc's rewrite (whole program; the default build)
  body_inline           ptxas -c of the rewrite with the helpers extern (inline issue path on, the default)
  body_no_inline        the same with HBFCC_INLINE_ISSUE=0 (every access calls the helpers)
  linked_cap{none,64,32}  body_inline + nvlink with the helper object (capped)
  whole_stub            the whole-program build linked with do-nothing helpers (hbfcc.helpers.stub_helper): what
                        the kernel's own rewritten code needs in the build hbfcc makes
  whole_only_<helper>   the whole-program build in which the entries' calls to every helper but <helper> go to
                        do-nothing copies: what that one helper adds (ptxas places a callee's registers above the
                        values live across its call, so a helper costs its own need plus the caller's live set)

    python3 bench/kernel_body_registers.py [--out bench/results/kernel_body_registers_cpu.json] [--modules a,b]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "fixtures"))

from hbfcc import cubin, helpers as H  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402
from hbfcommon import abi  # noqa: E402

log = logging.getLogger("kernel_body_registers")
MODULES = ("softmax_row", "layernorm_fwd", "embedding_gather", "matmul_f16_s3", "matmul_bf16_s5_small",
           "flash_attn_fwd_d64")
CAPS = (None, 64, 32)


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    cp = subprocess.run(argv, capture_output=True, text=True)
    if cp.returncode != 0:
        raise SystemExit(f"{Path(argv[0]).name} failed: {cp.stderr[-1500:]}")
    return cp


def _entry_regs(path: Path, entries: set[str]) -> dict[str, dict]:
    facts = cubin.function_facts(path)
    return {n: {"registers": facts[n].registers, "frame_bytes": facts[n].frame_bytes} for n in entries if n in facts}


def _separate_text(text: str, name: str) -> str:
    return re.sub(r"^\.weak \.func", ".extern .func", rewrite_text(text, filename=name, link=False).text, flags=re.M)


_CALL = r"(call(?:\.uni)?\s+(?:\([^)]*\),\s*)?)({name})\b"


def _entry_spans(text: str) -> list[tuple[int, int]]:
    """[start, end) of every ``.entry``'s body braces in ``text``."""
    spans = []
    for m in re.finditer(r"^\s*(?:\.visible\s+)?\.entry\s+\w+", text, flags=re.M):
        i = text.index("{", m.end())
        depth = 0
        for j in range(i, len(text)):
            depth += (text[j] == "{") - (text[j] == "}")
            if depth == 0:
                spans.append((i, j + 1))
                break
    return spans


def _only_helper_text(whole: str, keep: str | None) -> tuple[str, list[str]]:
    """``whole`` with every entry's call to a helper other than ``keep`` sent to a do-nothing copy (named
    ``__hbstub<name>``); returns the text and the helpers the entries call."""
    stub = H.stub_helper_text()
    funcs = stub[stub.index(".visible .func"):].replace(".visible .func", ".func")
    spans = _entry_spans(whole)
    called = sorted({n for a, b in spans for n in re.findall(r"call(?:\.uni)?\s+(?:\([^)]*\),\s*)?(__hb_\w+)",
                                                              whole[a:b])})
    out, pos = [], 0
    for a, b in spans:
        body = whole[a:b]
        for n in called:
            if n != keep:
                body = re.sub(_CALL.format(name=n), r"\1__hbstub\2", body)
        out += [whole[pos:a], body]
        pos = b
    out.append(whole[pos:])
    text = "".join(out)
    first = _entry_spans(text)[0][0]
    head = text.rfind("\n", 0, text.rfind(".entry", 0, first)) + 1
    return text[:head] + re.sub(r"(\.func\s+(?:\([^)]*\)\s*)?)(__hb_\w+)", r"\1__hbstub\2", funcs) + "\n" \
        + text[head:], called


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO / "bench/results/kernel_body_registers_cpu.json"))
    ap.add_argument("--modules", default=",".join(MODULES))
    ns = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[kernel_body_registers] %(message)s")
    import ptx_corpus
    corpus = ptx_corpus.triton_corpus()
    names = [m for m in ns.modules.split(",") if m]
    unknown = [m for m in names if m not in corpus]
    if unknown:
        raise SystemExit(f"unknown module(s) {unknown}; known: {sorted(corpus)}")
    ptxas = shutil.which("ptxas")
    nvlink = shutil.which("nvlink") or (str(Path(ptxas).parent / "nvlink") if ptxas else None)
    if not ptxas or not nvlink or not Path(nvlink).exists():
        raise SystemExit("needs CUDA's ptxas and nvlink on PATH")
    helper = H.load_helper()
    rows = []
    with tempfile.TemporaryDirectory(prefix="hbf-kbr.") as td:
        w = Path(td)
        hobj = {}
        for cap in CAPS:
            o = w / f"helper_{cap}.o"
            _run([ptxas, "-arch=sm_90a", "-c", helper.path, "-o", str(o)] + ([f"--maxrregcount={cap}"] if cap else []))
            hobj[cap] = o
        for name in names:
            log.info("%s", name)
            text = corpus[name].read_text()
            d = w / name
            d.mkdir()
            whole = rewrite_text(text, filename=name).text
            variants = {"plain": text, "whole": whole, "body_inline": _separate_text(text, name),
                        "whole_stub": rewrite_text(text, filename=name, helper=H.stub_helper()).text}
            _, called = _only_helper_text(whole, None)
            for h in called:
                if h in {sig.name for sig in abi.HELPERS.values()}:
                    variants[f"whole_only_{h}"] = _only_helper_text(whole, h)[0]
            old = os.environ.get("HBFCC_INLINE_ISSUE")
            os.environ["HBFCC_INLINE_ISSUE"] = "0"
            try:
                variants["body_no_inline"] = _separate_text(text, name)
            finally:
                if old is None:
                    os.environ.pop("HBFCC_INLINE_ISSUE")
                else:
                    os.environ["HBFCC_INLINE_ISSUE"] = old
            entries = set(re.findall(r"^\s*\.visible \.entry (\w+)", text, flags=re.M))
            row = {"module": name, "entries": sorted(entries)}
            for k, t in variants.items():
                (d / f"{k}.ptx").write_text(t)
                sep = k.startswith("body_")
                _run([ptxas, "-arch=sm_90a"] + (["-c"] if sep else []) + [str(d / f"{k}.ptx"), "-o", str(d / f"{k}.o")])
                row[k] = _entry_regs(d / f"{k}.o", entries)
            for cap in CAPS:
                out = d / f"linked_{cap}.cubin"
                _run([nvlink, "-arch=sm_90a", str(d / "body_inline.o"), str(hobj[cap]), "-o", str(out)])
                row[f"linked_cap{cap or 'none'}"] = _entry_regs(out, entries)
            log.info("%s", json.dumps({k: {e: v["registers"] for e, v in row[k].items()} for k in row
                                       if isinstance(row[k], dict)}))
            rows.append(row)
    doc = {"experiment": "kernel_body_registers", "date": time.strftime("%Y-%m-%d"), "card": "CPU (ptxas/nvlink)",
           "ptxas": _run([ptxas, "--version"]).stdout.strip().splitlines()[-1],
           "command": "python3 bench/kernel_body_registers.py " + " ".join(argv or sys.argv[1:]), "rows": rows}
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(out)
    log.info("wrote %s", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
