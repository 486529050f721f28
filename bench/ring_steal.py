#!/usr/bin/env python3
"""The reference ring's deferred-consumption deadlock and slot stealing, on the CPU (docs/runtime.md "The ring:
deferred consumption and slot stealing"; docs/RESULTS.md "Stop 38 (2026-12-05): ring deadlock (CPU)").

    python3 bench/ring_steal.py repro [--out FILE]
        tests/daemon/test_ring_steal.py's scenario against a real hbfd (4,396 cooperative warps x 2 tickets, each
        warp issuing both before consuming either) with the host RingDriver, stealing off then on: completions,
        warps left, whether it stalled, wall time, steals and overflow takes.
    python3 bench/ring_steal.py regs --helper A.ptx --helper B.ptx [--modules m1,m2] [--out FILE]
        registers and frame bytes of hbfcc-rewritten Triton fixtures (whole-program ptxas) with each helper PTX
        (e.g. main's build and this one's).

Prints one JSON object (and writes it to --out when given).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
log = logging.getLogger("ring_steal")


def repro() -> dict:
    sys.path.insert(0, str(REPO / "tests" / "daemon"))
    import test_ring_steal as T            # the scenario, one definition
    from hbfd.hostring import RingDriver
    from hbfd_harness import attach, start_hbfd
    out = {}
    for steal in (False, True):
        with tempfile.TemporaryDirectory() as d, start_hbfd(Path(d)) as h:
            att, m = attach(h)
            try:
                drv = RingDriver(m, att.ring_key, steal=steal)
                t0 = time.monotonic_ns()
                res, left, stalled = T._run_warps(drv)
                out["steal" if steal else "no_steal"] = {
                    "warps": T.WARPS, "tickets_per_warp": T.PER_WARP, "completed": len(res), "warps_left": left,
                    "stalled": stalled, "stall_window_s": T.STALL_S, "wall_ns": time.monotonic_ns() - t0,
                    **drv.stats}
            finally:
                m.close()
    return out


def regs(helpers: list[str], modules: list[str]) -> dict:
    sys.path.insert(0, str(REPO / "tests" / "fixtures"))
    import ptx_corpus
    corpus = ptx_corpus.triton_corpus()
    out = {}
    for hp in helpers:
        # the helper is loaded once per process (hbfcc.helpers): one child per helper PTX
        code = ("import json,re,subprocess,sys,tempfile\nfrom pathlib import Path\n"
                "from hbfcc import cubin\nfrom hbfcc.rewrite import rewrite_text\n"
                "res={}\nwith tempfile.TemporaryDirectory() as td:\n"
                "    for name, path in json.loads(sys.argv[1]).items():\n"
                "        text=Path(path).read_text(); p=Path(td)/(name+'.ptx'); o=Path(td)/(name+'.o')\n"
                "        p.write_text(rewrite_text(text, filename=name).text)\n"
                "        subprocess.run(['ptxas','-arch=sm_90a',str(p),'-o',str(o)],check=True,capture_output=True)\n"
                "        f=cubin.function_facts(o)\n"
                "        ents=set(re.findall(r'^\\s*\\.visible \\.entry (\\w+)', text, flags=re.M))\n"
                "        res[name]={e:{'registers':f[e].registers,'frame_bytes':f[e].frame_bytes} for e in ents if e in f}\n"
                "print(json.dumps(res))\n")
        arg = json.dumps({m: str(corpus[m]) for m in modules})
        cp = subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True, cwd=REPO,
                            env={**os.environ, "HBFCC_HELPER_PTX": hp, "PYTHONPATH": str(REPO)})
        if cp.returncode != 0:
            raise SystemExit(f"register build with {hp} failed: {cp.stderr[-1500:]}")
        out[hp] = json.loads(cp.stdout.strip().splitlines()[-1])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("repro")
    r.add_argument("--out")
    g = sub.add_parser("regs")
    g.add_argument("--helper", action="append", required=True)
    g.add_argument("--modules", default="softmax_row,layernorm_fwd,embedding_gather,matmul_f16_s3")
    g.add_argument("--out")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[ring_steal] %(message)s")
    doc = {"experiment": f"ring_steal_{a.cmd}", "date": time.strftime("%Y-%m-%d"), "card": "CPU",
           "command": "python3 bench/ring_steal.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    doc["result"] = repro() if a.cmd == "repro" else regs(a.helper, [m for m in a.modules.split(",") if m])
    text = json.dumps(doc, indent=1)
    if a.out:
        Path(a.out).write_text(text + "\n")
        log.info("wrote %s", a.out)
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
