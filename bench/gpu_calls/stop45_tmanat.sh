#!/bin/bash
# one call (~2-3 min; LIMIT=300 is ample): issue 15's native cost of the Triton TMA kernels' _hbf builds in CUDA graphs
# (docs/RESULTS.md "Stop 45 (CPU, wt/tmanat)"). Stop 45 measured x1.118 / x1.081 / x1.041 with the module ATTACHED in
# the graph (nothing registered: the prologue loads the state pointer, then the band's span, then branches to the
# native body). The session now keeps every module's __hb_state 0 while nothing is registered (one load), and keeps
# captured launches sound (state_word's rules). Per kernel, each against the plain build's graph (PAIRS pairs):
#   hbf           the session's choice (detached): the goal's ratio (<= 1.02)
#   hbf_attached  the stop-45 state, the word forced (the same card, the same session: the before)
#   probe_ld1 / probe_ld3 / probe_smem / probe_ld3smem   the plain PTX with one part of the difference added
# and the graph rule on the card (graph_replay_selection): a graph captured detached replays instrumented once the
# inputs are registered (TMA copies counted = the registered launch's) and native after they are unregistered.
# Two runs of the bench (run1, run2: the spread between runs). Everything in ONE tar under $OUT, rewritten after
# every part. Carry: hbfproto, runtime_cuda/ptx, .whl (as every call).
set -u
source bench/gpu_calls/env.sh
python3 -m hbfd.warmup 2>&1 | tail -1
W=/tmp/s45n; mkdir -p $W/run1 $W/run2
pack() { tar czf $OUT/s45n.tgz -C $W . 2>/dev/null; }
tt() {   # name
  local name=$1
  local L=$(left); [ $L -lt 90 ] && { echo "$name skipped: ${L}s left"; return; }
  echo "== [${L}s left] tma_triton $name"
  local T=$(( L - 20 < 170 ? L - 20 : 170 ))
  timeout $T python3 bench/tma_triton.py --out $W/$name --budget-s $(( T - 40 )) --case-timeout 90 > $W/$name/log.txt 2>&1
  echo "$name rc=$?"; grep -E "ok=|native cost" $W/$name/log.txt | tail -7 | cut -c1-400
  pack
}
tt run1
tt run2
python3 - $W <<'PY' | tee $W/graph.txt
import json, sys
from pathlib import Path
w = Path(sys.argv[1])
out = {}
for run in ("run1", "run2"):
    p = w / run / "tma_triton.json"
    cases = json.loads(p.read_text()).get("cases", {}) if p.is_file() else {}
    for k, c in sorted(cases.items()):
        g = c.get("native_cost_graph") or {}
        v = {n: {f: x.get(f) for f in ("ratio_median", "ratio_min_max", "extra_us_median", "plain_ms_median",
                                        "ms_median", "hb_state_at_replay", "error")}
             for n, x in (g.get("variants") or {}).items()}
        rs = c.get("graph_replay_selection") or {}
        out.setdefault(k, {})[run] = {"ok": c.get("ok"), "variants": v, "graph_replay_selection": rs,
                                      "probes_identical": c.get("probes_identical"),
                                      "launch_selection": c.get("launch_selection"),
                                      "n_regs_plain_hbf": (c.get("admission") or {}).get("n_regs_plain_hbf"),
                                      "error": c.get("error") or g.get("error")}
        print(k, run, "ok", c.get("ok"), "replay rule ok", rs.get("ok"), "probes identical", c.get("probes_identical"))
        for n, x in v.items():
            print("   %-14s x%s  +%s us  (%s)" % (n, None if x["ratio_median"] is None else round(x["ratio_median"], 4),
                                                 x["extra_us_median"], x.get("hb_state_at_replay") or x.get("error") or ""))
(w / "graph.json").write_text(json.dumps(out, indent=1, default=str))
PY
pack
echo "== done [$(left)s left]"
