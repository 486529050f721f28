"""What the instrumented stream kernels' code waits for, read from their SASS on the CPU (issue 13, stop 54).

Builds devpath_cost's Triton kernels (reduce, copy, sreduce, scopy, consume: ``devpath_cost.py --cpu-check``) once
per hbfcc variant, each in a fresh work directory (its hbfcc cache keys on the source, not on the knobs), then reads
every hbf cubin's program loads with bench/sass_ctrl.py: per load the first instruction that waits for it, and
whether that one uses the value or is hbfcc's code waiting for a load it does not use (a helper call, a clock read,
a divergent branch) -- the static half of "what does the group's code wait for". Straight-line (address order)
reading: a waiter on a cold path (an ask, a wait's call) is reported as such; whether it runs is the card's to say.

    python bench/load_waits_static.py --out bench/results/load_waits_static_cpu.json [--variants base,lf]

Variants: base (today's defaults), lf (HBFCC_LOADS_FIRST=1), lfall (=all). Needs nvcc/ptxas, Triton and nvdisasm
(``make sass-tools``).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import sass_ctrl as S  # noqa: E402

VARIANTS = {"base": {}, "lf": {"HBFCC_LOADS_FIRST": "1"}, "lfall": {"HBFCC_LOADS_FIRST": "all"}}
KERNELS = ("reduce", "copy", "sreduce", "scopy", "consume")


def _kind(text: str) -> str:
    text = re.sub(r"^@!?U?P\w+\s+", "", text)
    if text.startswith("CALL"):
        m = re.search(r"\$(__hb_\w+)\)", text)
        return f"call {m.group(1) if m else '?'}"
    if "GLOBALTIMER" in text:
        return "clock read"
    if "BRA.DIV" in text:
        return "divergent-branch check"
    return text.split(" ", 1)[0]


def build(variant: str, work: Path) -> Path:
    env = dict(os.environ, **VARIANTS[variant])
    cp = subprocess.run([sys.executable, str(REPO / "bench" / "devpath_cost.py"), "--cpu-check", "--parts",
                         "stream,consume", "--out", str(work / "out"), "--work", str(work / "w")],
                        env=env, capture_output=True, text=True)
    if cp.returncode != 0:
        raise SystemExit(f"load_waits_static: the {variant} build failed: {cp.stdout[-600:]}{cp.stderr[-600:]}")
    return work / "w" / "triton-cache"


def summarize(cache: Path) -> dict:
    out: dict = {}
    for cub in sorted(cache.glob("*/*_hbf.cubin")):
        kname = cub.name[:-len("_hbf.cubin")]
        if kname not in KERNELS:
            continue
        ins = [x for x in S.disassemble(cub) if x.func == f"{kname}_hbf"]
        rows = S.load_waits(ins)
        prog = [r for r in rows if r["first_wait"] is not None]
        key = kname if kname not in out else f"{kname}@{cub.parent.name[:8]}"
        out[key] = {"instructions": len(ins), "loads": len(rows),
                    "first_waiter_is_the_use": sum(1 for r in prog if r["first_wait"]["what"] == "use"),
                    "first_waiter_is_a_sibling_use": sum(1 for r in prog if r["first_wait"]["what"] == "sibling"),
                    "first_waiter_is_other_code": {k: sum(1 for r in prog if r["first_wait"]["what"] == "other"
                                                          and _kind(r["first_wait"]["text"]) == k)
                                                   for k in sorted({_kind(r["first_wait"]["text"]) for r in prog
                                                                    if r["first_wait"]["what"] == "other"})},
                    "read_barrier_waiters": sorted({_kind(r["first_read_wait"]["text"]) for r in rows
                                                    if r["first_read_wait"]}),
                    "rows": rows}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--variants", default="base,lf")
    a = ap.parse_args(argv)
    names = [v for v in a.variants.split(",") if v]
    bad = [v for v in names if v not in VARIANTS]
    if bad:
        print(f"load_waits_static: unknown variant(s) {bad}; known: {sorted(VARIANTS)}", file=sys.stderr)
        return 2
    S.nvdisasm()                                     # a clear error before any build
    res: dict = {"what": __doc__.split("\n\n")[0], "variants": {}}
    for v in names:
        with tempfile.TemporaryDirectory(prefix=f"lws-{v}-") as d:
            res["variants"][v] = {"env": VARIANTS[v], "kernels": summarize(build(v, Path(d)))}
        for k, s in res["variants"][v]["kernels"].items():
            print(f"{v:6s} {k:10s} {s['instructions']:5d} instr, {s['loads']:3d} loads: first waiter the use "
                  f"{s['first_waiter_is_the_use']}, a sibling's use {s['first_waiter_is_a_sibling_use']}, other "
                  f"{s['first_waiter_is_other_code']}; read barrier "
                  f"waited by {s['read_barrier_waiters']}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = a.out.with_name(a.out.name + ".tmp")
    tmp.write_text(json.dumps(res, indent=1))
    os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
