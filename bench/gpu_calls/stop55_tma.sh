#!/bin/bash
# ONE call (~6-9 min, LIMIT=570; carry hbfproto, runtime_cuda/ptx, .whl): issue 15's proof on the H200 the issue names
# (every earlier TMA card run was on an H100):
#   1. bench/tma_semantics.py --semantics --increment --native-cost: the TMA templates' semantic checks (stop 41 on the
#      H100: 84/84 with --mc-debug), the paper's increment experiment (1000 vs 200 us, 256 B / 8192 B, three work
#      levels, 36 pairs per cell: the kernel's device time and the host's wall), the load_2d native cost
#   2. bench/tma_triton.py --graph-native: the three Triton TMA kernels (host TensorDescriptor matmul, device
#      tl.make_tensor_descriptor matmul, FlashAttention-style forward) with inputs registered: admitted, outputs
#      bit-identical, counters; the native cost on host launches and in CUDA graphs with every HBF_GRAPH_NATIVE mode
#      and the plain module (HBF_NATIVE_MODULE=plain, the default)
# JSONs written straight into $OUT (td/, tt/), logs beside them; key lines printed.
set -u
source bench/gpu_calls/env.sh
python3 -m hbfd.warmup 2>&1 | tail -1
mkdir -p $OUT/td $OUT/tt
L=$(left); T=$(( L - 200 < 300 ? L - 200 : 300 ))
echo "== [${L}s left] tma_semantics (timeout ${T}s)"
timeout $T python3 bench/tma_semantics.py --semantics --increment --native-cost --out $OUT/td --work /tmp/tsw \
    > $OUT/td/log.txt 2>&1
echo "tma_semantics rc=$?"
python3 - <<'PY'
import json, os
try:
    d = json.load(open(os.environ["OUT"] + "/td/tma_semantics.json"))
except Exception as e:
    print("no tma_semantics.json:", e); raise SystemExit
print("card", d.get("card"), "summary", {k: v for k, v in (d.get("summary") or {}).items() if k != "templates"})
for c in d.get("checks") or []:
    if not c.get("ok"):
        print("  FAILED", c.get("name"), str(c.get("error") or c.get("why") or "")[:200])
for k, v in (d.get("increment") or {}).items():
    dv = v.get("device") or {}
    print("  increment %-18s device err med %s p90 %s | host err med %s" % (k, dv.get("error_pct_median"),
          dv.get("error_pct_p90"), v.get("error_pct_median")))
for k, v in (d.get("native_cost") or {}).items():
    print("  native_cost", k, "gpu x%s %s host x%s" % (v.get("gpu_ratio_median"), v.get("gpu_ratio_p10_p90"),
                                                      v.get("ratio_median")))
PY
tail -3 $OUT/td/log.txt | cut -c1-300
L=$(left); T=$(( L - 15 ))
[ $T -lt 90 ] && { echo "tma_triton skipped: ${L}s left"; exit 0; }
echo "== [${L}s left] tma_triton --graph-native (timeout ${T}s)"
timeout $T python3 bench/tma_triton.py --graph-native --out $OUT/tt --budget-s $(( T - 50 )) --case-timeout 150 \
    > $OUT/tt/log.txt 2>&1
echo "tma_triton rc=$?"
grep -E "ok=|native cost|HBF_GRAPH_NATIVE|=>" $OUT/tt/log.txt | tail -20 | cut -c1-500
echo "== done [$(left)s left]"
