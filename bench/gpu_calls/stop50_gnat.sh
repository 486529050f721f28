#!/bin/bash
# one call (~3-4 min; LIMIT=420 leaves run2 room): native entries in CUDA graphs (wt/gnat15, issue 15's last missed
# goal: "the native cost of TMA kernels with nothing registered <= 1.02x" -- in graphs). Stop 49 measured the native
# entry on HOST launches (x0.996-1.002 of plain); graphs kept the instrumented entry and its prologue test (stop 48:
# x1.04-1.09), because a replay must turn instrumented after a later registration. With HBF_GRAPH_NATIVE a capture
# decided native captures the native entry and the session records what its replays reach; a later registration over
# it is refused (RANGE_ADMITTED) until Session.release_graph_captures(). These TMA kernels take their addresses from
# descriptors (address_source "memory"), so only HBF_GRAPH_NATIVE=all captures them native (an unbounded record: every
# registration refused while it is held); "bounded" must keep them instrumented. Per kernel, one process, nothing
# registered, PAIRS rounds, each round one replay of each graph of BACK_TO_BACK launches between two events:
#   plain     CUDA's ptxas
#   off       the natent build (HBFCC_NATIVE_ENTRY=1) captured with HBF_GRAPH_NATIVE off: the instrumented entry
#   bounded   the same captured with "bounded": must be the instrumented entry too (captured_native 0)
#   all       the same captured with "all": the native entry (captured_native = BACK_TO_BACK) -- the goal (<= 1.02)
# device ms per launch (median, p10/p90, min/max), the ratio to plain per round, the captures counted, a registration
# refused while the record is held (refusal.ok), natent_all_identical (bit-identical to plain), the records released.
# The registered run's checks (admission, TMA counters) and the graph replay rule (graph_replay_selection, which
# registers after a capture: it must still pass, the records released first) run as before. --no-graph: stop 48's
# variant/probe graphs are not rerun. Two runs (run1, run2: the spread between runs). Everything in ONE tar under
# $OUT (s50g.tgz), rewritten after every part. Carry: hbfproto, runtime_cuda/ptx, .whl (as every call).
set -u
source bench/gpu_calls/env.sh
python3 -m hbfd.warmup 2>&1 | tail -1
W=/tmp/s50g TGZ=s50g.tgz tma_runs --graph-native --no-graph
W=/tmp/s50g python3 - <<'PY' | tee /tmp/s50g/gnat.txt
import json, os, sys
from pathlib import Path
sys.path.insert(0, "bench")
from tma_triton import run_cases
w = Path(os.environ["W"])
out = {}
for run, cases in run_cases(w):
    for k, c in sorted(cases.items()):
        g = c.get("native_cost_graph_natent") or {}
        rs = c.get("graph_replay_selection") or {}
        out.setdefault(k, {})[run] = {"ok": c.get("ok"), "natent_identical": c.get("natent_identical"),
                                      "graph": g, "graph_replay_selection_ok": rs.get("ok"),
                                      "error": c.get("error") or g.get("error") or c.get("natent_error")}
        print(k, run, "ok", c.get("ok"), "identical", g.get("natent_all_identical"), "captured native",
              g.get("native_entry_captured"), "bounded kept instrumented", g.get("bounded_kept_instrumented"),
              "refusal ok", (g.get("refusal") or {}).get("ok"), "released", g.get("released"),
              "replay rule ok", rs.get("ok"), g.get("error") or "")
        for n, x in (g.get("variants") or {}).items():
            r, d = x.get("ratio") or {}, x.get("device_ms") or {}
            print("   %-8s device %.4f ms [p10 %.4f, p90 %.4f]  x%s [%s, %s]  +%s us  sel %s" % (
                n, d.get("median", float("nan")), d.get("p10", float("nan")), d.get("p90", float("nan")),
                None if not r else round(r["median"], 4), None if not r else round(r["min"], 4),
                None if not r else round(r["max"], 4), x.get("extra_us_median"), x.get("launch_selection")))
(w / "gnat.json").write_text(json.dumps(out, indent=1, default=str))
PY
tar czf $OUT/s50g.tgz -C /tmp/s50g . 2>/dev/null
echo "== done [$(left)s left]"
