#!/bin/bash
# one call (~3-4 min; LIMIT=420 leaves run2 room): the native entry (wt/natent15, issue 15 item 5 / issue 13 item 3: "the native
# cost of TMA kernels with nothing registered <= 1.02x"). Stop 48 measured, in CUDA graphs, the instrumented entry's
# prologue test (ULDC of the attach switch + branch, the 1 KiB static TMA table): attn_fwd x1.039, matmul_dev x1.045,
# matmul_host x1.087. With HBFCC_NATIVE_ENTRY=1 hbfcc also emits <k>__hbnat, the untouched kernel as its own .entry
# (on the CPU: the plain kernel's registers and SASS, instruction for instruction), and the session launches it for a
# HOST launch decided native (nothing registered here; Triton through a wrapper of CompiledKernel._run). Per kernel, in
# one process, nothing registered, HOST launches (not graphs: graphs keep the instrumented entry), PAIRS rounds of
# BACK_TO_BACK launches behind a GPU sleep the host's queueing fits in (late_windows says when it did not):
#   plain    CUDA's ptxas
#   hbf      hbfcc-ptxas, no native entry: the instrumented entry's prologue test (the module detached)
#   natent   hbfcc-ptxas with HBFCC_NATIVE_ENTRY=1: the session launches <k>_natent__hbnat -- the goal (<= 1.02)
# device ms per launch (median, min/max) and the ratio to plain per round, the host's us per launch to queue it apart
# (host_extra_us: the gate's own host overhead over plain's launcher), launch_selection's native_entry count (must be
# PAIRS x BACK_TO_BACK), natent_identical (the output bit-identical to plain), and the registered run's checks (admission,
# TMA counters) as before. --no-graph: the graph parts are stop 48's (unchanged by this build). Two runs (run1, run2:
# the spread between runs). Everything in ONE tar under $OUT (s49n.tgz), rewritten after every part. Carry: hbfproto,
# runtime_cuda/ptx, .whl (as every call).
set -u
source bench/gpu_calls/env.sh
python3 -m hbfd.warmup 2>&1 | tail -1
W=/tmp/s49n; mkdir -p $W/run1 $W/run2
pack() { tar czf $OUT/s49n.tgz -C $W . 2>/dev/null; }
tt() {   # name
  local name=$1
  local L=$(left); [ $L -lt 100 ] && { echo "$name skipped: ${L}s left"; return; }
  echo "== [${L}s left] tma_triton --native-entry $name"
  local T=$(( L - 20 < 220 ? L - 20 : 220 ))
  timeout $T python3 bench/tma_triton.py --native-entry --no-graph --out $W/$name --budget-s $(( T - 60 )) \
      --case-timeout 120 > $W/$name/log.txt 2>&1
  echo "$name rc=$?"; grep -E "ok=|native cost" $W/$name/log.txt | tail -7 | cut -c1-600
  pack
}
tt run1
tt run2
python3 - $W <<'PY' | tee $W/natent.txt
import json, sys
from pathlib import Path
w = Path(sys.argv[1])
out = {}
for run in ("run1", "run2"):
    p = w / run / "tma_triton.json"
    cases = json.loads(p.read_text()).get("cases", {}) if p.is_file() else {}
    for k, c in sorted(cases.items()):
        h = c.get("native_cost_host_natent") or {}
        out.setdefault(k, {})[run] = {"ok": c.get("ok"), "natent_build": c.get("natent_build"),
                                      "natent_identical": c.get("natent_identical"), "host": h,
                                      "n_regs_plain_hbf": (c.get("admission") or {}).get("n_regs_plain_hbf"),
                                      "error": c.get("error") or h.get("error") or c.get("natent_error")}
        print(k, run, "ok", c.get("ok"), "identical", c.get("natent_identical"), "build", c.get("natent_build"),
              "native entry used", h.get("native_entry_used"), "sleep ms", h.get("sleep_ms"), h.get("error") or "")
        for n, x in (h.get("variants") or {}).items():
            r, d, hu = x.get("ratio") or {}, x.get("device_ms") or {}, x.get("host_us") or {}
            print("   %-7s device %.4f ms [%.4f, %.4f]  x%s [%s, %s]  host %.1f us (+%s)  late %s  sel %s" % (
                n, d.get("median", float("nan")), d.get("min", float("nan")), d.get("max", float("nan")),
                None if not r else round(r["median"], 4), None if not r else round(r["min"], 4),
                None if not r else round(r["max"], 4), hu.get("median", float("nan")), x.get("host_extra_us_median"),
                x.get("late_windows"), x.get("launch_selection")))
(w / "natent.json").write_text(json.dumps(out, indent=1, default=str))
PY
pack
echo "== done [$(left)s left]"
