#!/bin/bash
# one call (~5-7 min): issue 15's TMA issue cost on the card (docs/RESULTS.md "Issue 15: the TMA issue cost (CPU)"),
# the per-run issue (the helpers built here with -DHBF_TMA_BATCH=0: every copy classified run by run, one request per
# page span) against the batched one (the default build: one classification per copy, the FIXED source's requests
# counted), in order of value per minute:
#  1. bench/tma_triton.py with the batched helpers (default): the three Triton TMA kernels, checks, counters, the
#     registered time (stop 44: 12.03 ms matmul_host, x1236), the native cost (host-bound pairs) and the native cost in
#     CUDA graphs (the device's)
#  2. bench/tma_semantics.py --semantics with the batched helpers: must stay 84/84
#  3. bench/tma_triton.py with the per-run helpers (HBFCC_HELPER_PTX): the A/B's "before", the same card and session
#  4. the A/B: the counters (tma_*, requests, bytes, modeled_ns) of 1 and 3 must be EQUAL per kernel; the times side by
#     side (ab.json)
# Everything in ONE tar under $OUT, rewritten after every part (the device returns a limited number of files).
# Carry: hbfproto, runtime_cuda/ptx, .whl (as every call); nothing else (the per-run helper is built here).
set -u
source bench/gpu_calls/env.sh
python3 -m hbfd.warmup 2>&1 | tail -1
W=/tmp/s45; mkdir -p $W/batch $W/perrun $W/sem
pack() { tar czf $OUT/s45.tgz -C $W . 2>/dev/null; }
NVCC_APPEND_FLAGS="-DHBF_TMA_BATCH=0" python3 setup.py helper-ptx direct $W/hbf_helpers_tma_perrun.ptx > $W/perrun_build.log 2>&1
echo "per-run helper build rc=$? ($(grep -c hb_tma_batch $W/hbf_helpers_tma_perrun.ptx 2>/dev/null) hb_tma_batch lines: want 0)"
tt() {   # name, env...
  local name=$1; shift
  local L=$(left); [ $L -lt 100 ] && { echo "$name skipped: ${L}s left"; return; }
  echo "== [${L}s left] tma_triton $name"
  local T=$(( L - 20 < 170 ? L - 20 : 170 ))
  env "$@" timeout $T python3 bench/tma_triton.py --out $W/$name --budget-s $(( T - 40 )) --case-timeout 70 > $W/$name/log.txt 2>&1
  echo "$name rc=$?"; grep -E "ok=|native cost" $W/$name/log.txt | tail -6 | cut -c1-300
  pack
}
tt batch HBF_DUMMY=0
L=$(left); echo "== [${L}s left] tma_semantics --semantics (batched)"
if [ $L -gt 150 ]; then
  timeout $(( L > 260 ? 200 : L - 60 )) python3 bench/tma_semantics.py --semantics --out $W/sem --work /tmp/s45_sem > $W/sem/log.txt 2>&1
  echo "sem rc=$?"; grep -iE "checks|passed|FAIL|/[0-9]+" $W/sem/log.txt | tail -4 | cut -c1-300
fi
pack
tt perrun HBFCC_HELPER_PTX=$W/hbf_helpers_tma_perrun.ptx
python3 - $W <<'PY' | tee $W/ab.txt
import json, sys
from pathlib import Path
w = Path(sys.argv[1])
def load(n):
    p = w / n / "tma_triton.json"
    return json.loads(p.read_text()).get("cases", {}) if p.is_file() else {}
b, p = load("batch"), load("perrun")
keys = ("tma_copies", "tma_hbf_bytes", "tma_hbm_bytes", "tma_oob_bytes", "requests", "bytes")
ab = {}
for k in sorted(set(b) | set(p)):
    cb, cp = (b.get(k) or {}).get("counters") or {}, (p.get(k) or {}).get("counters") or {}
    same = {f: cb.get(f) == cp.get(f) for f in keys}
    same["ops"] = cb.get("ops") == cp.get("ops")
    tb, tp = (b.get(k) or {}).get("time_ms") or {}, (p.get(k) or {}).get("time_ms") or {}
    ab[k] = {"counters_equal": all(same.values()) and bool(cb), "equal_by_field": same,
             "batch_ok": (b.get(k) or {}).get("ok"), "perrun_ok": (p.get(k) or {}).get("ok"),
             "hbf_registered_ms": {"batch": tb.get("hbf_registered_median"), "perrun": tp.get("hbf_registered_median")},
             "plain_ms": tb.get("plain_unregistered_median"),
             "native_cost_graph": ((b.get(k) or {}).get("native_cost_graph") or {}).get("ratio_median"),
             "native_cost_host": ((b.get(k) or {}).get("native_cost") or {}).get("ratio_median")}
    r = ab[k]["hbf_registered_ms"]
    print(k, "counters_equal", ab[k]["counters_equal"], "ms batch", r["batch"], "perrun", r["perrun"],
          "graph", ab[k]["native_cost_graph"], "host", ab[k]["native_cost_host"])
(w / "ab.json").write_text(json.dumps(ab, indent=1))
PY
pack
echo "== done [$(left)s left]"
