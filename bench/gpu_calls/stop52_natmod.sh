#!/bin/bash
# one call (~3-4 min; LIMIT=420 leaves run2 room): the native entry in CUDA graphs, in the instrumented module vs in the
# PLAIN module (wt/natmod15, issue 15's last missed number). Stop 50: matmul_host's native entry captured into graphs
# (HBF_GRAPH_NATIVE=all) ran x1.057 / x1.058 of plain (+0.43 us per launch) while its host launches ran x0.998; stop 51's
# diagnostic found the two graphs' nodes identical but for the FUNCTION attributes: CONST_SIZE_BYTES 200 on the native
# entry (the instrumented module's user constant bank, hbfcc's descriptor __hb_cdesc, attributed to every function of
# that module) vs 0 on plain. Hypothesis: the same machine code in a module WITHOUT hbfcc's constants costs exactly plain.
# hbfcc-ptxas now keeps each module's plain cubin (its baseline build: the original PTX, Triton's own ptxas options) in
# the artifact store (the artifact's native_module), and HBF_NATIVE_MODULE=plain makes the session load it once per
# module (sha256 verified) and launch / capture the kernel's function from it where a launch runs native.
# This call: bench/tma_triton.py --graph-native --no-graph (as stop50_gnat.sh) with HBF_NATIVE_MODULE=plain, so each
# kernel's session has BOTH functions and _graph_native_entry_cost captures, besides plain / off / bounded / all (the
# native entry, the session's native_module set to "entry" for it: the default path), one more graph "all_plain" (mode
# all, native_module "plain"), all replayed INTERLEAVED in the same rounds: the A/B of the two modules side by side in
# one process. HBF_GRAPH_NATIVE is NOT set in the environment: the bench sets the session's mode per capture (set to all
# for the whole run, the registered run's graph-replay rule check -- a registration after a capture -- would be
# refused). Two runs (run1, run2: the spread between runs). Printed per kernel and run: plain's device ms per launch,
# all (entry) and all_plain ratios to plain (median [min, max]) and extra us, the captures per function, outputs
# bit-identical, whether the plain cubin was bound. Everything in ONE tar under $OUT (s52n.tgz). Carry: hbfproto,
# runtime_cuda/ptx, .whl (as every call).
#   LIMIT=420 bash bench/gpu_calls/stop52_natmod.sh
set -u
source bench/gpu_calls/env.sh
python3 -m hbfd.warmup 2>&1 | tail -1
export HBF_NATIVE_MODULE=plain
W=/tmp/s52n TGZ=s52n.tgz tma_runs --graph-native --no-graph
W=/tmp/s52n python3 - <<'PY' | tee /tmp/s52n/natmod.txt
import json, os, sys
from pathlib import Path
sys.path.insert(0, "bench")
from tma_triton import run_cases
w = Path(os.environ["W"])
out = {}
nan = float("nan")
for run, cases in run_cases(w):
    for k, c in sorted(cases.items()):
        g = c.get("native_cost_graph_natent") or {}
        v = g.get("variants") or {}
        out.setdefault(k, {})[run] = {"ok": c.get("ok"), "graph": g,
                                      "error": c.get("error") or g.get("error") or c.get("natent_error")}
        print(k, run, "ok", c.get("ok"), "native_module", g.get("native_module"), g.get("error") or "")
        print("   identical: entry", g.get("natent_all_identical"), "plain module", g.get("natent_all_plain_identical"),
              "| captured native: entry", g.get("native_entry_captured"), "plain module", g.get("plain_module_captured"),
              "| refusal ok", (g.get("refusal") or {}).get("ok"), "| released", g.get("released"))
        pm = (v.get("plain") or {}).get("device_ms") or {}
        print("   %-10s device %.4f ms/launch [p10 %.4f, p90 %.4f]" % ("plain", pm.get("median", nan), pm.get("p10", nan),
                                                                         pm.get("p90", nan)))
        for n in ("off", "bounded", "all", "all_plain"):
            x = v.get(n)
            if x is None:
                print(f"   {n:<10} (not captured)")
                continue
            r, d = x.get("ratio") or {}, x.get("device_ms") or {}
            print("   %-10s device %.4f ms  x%s [%s, %s]  %s us  sel %s" % (
                n, d.get("median", nan), None if not r else round(r["median"], 4), None if not r else round(r["min"], 4),
                None if not r else round(r["max"], 4), x.get("extra_us_median"), x.get("launch_selection")))
        a, p = (v.get("all") or {}).get("ratio") or {}, (v.get("all_plain") or {}).get("ratio") or {}
        if a and p:
            print("   => native entry x%.4f vs plain module x%.4f (goal <= 1.02)" % (a["median"], p["median"]))
(w / "natmod.json").write_text(json.dumps(out, indent=1, default=str))
PY
tar czf $OUT/s52n.tgz -C /tmp/s52n . 2>/dev/null
echo "== done [$(left)s left]"
