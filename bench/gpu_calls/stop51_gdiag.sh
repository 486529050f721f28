#!/bin/bash
# one call (~2-3 min; LIMIT=300 is plenty, 420 leaves room): why matmul_host's native entry costs +0.43 us per launch
# in CUDA graphs (stop 50: HBF_GRAPH_NATIVE=all x1.057 / x1.058 of plain, while attn_fwd / matmul_dev reach
# x1.009-1.016 and the same native entry on host launches x0.998). bench/graph_node_diag.py (wt/gdiag15), one process,
# nothing registered, per kernel (matmul_host first): part 0 the two cubins' SASS / .nv.info / sections compared
# offline (on the CPU: identical SASS and EIATTRs for all three kernels), the plain and natent graphs captured (natent
# under HBF_GRAPH_NATIVE=all), part 1 every node dumped (function, dims, shared bytes, parameter layout and raw bytes
# plain vs natent, kernel-node attributes, function attributes, module), part 2 hand-built graphs timed interleaved (a
# plain's params exactly, b plain's params + the native entry, c natent's exactly, d natent's params + plain's
# function, a0 without node attributes, a_nattr plain with natent's attributes, e_plain / e_natent the function from a
# fresh module of each cubin, the captured graphs), part 3 every hand-built graph's output bit-identical to plain.
# Everything in ONE tar under $OUT (s51d.tgz), rewritten after the run and after the summary. Carry: hbfproto,
# runtime_cuda/ptx, .whl (as every call).
# KERNELS=matmul_host LIMIT=200 bash bench/gpu_calls/stop51_gdiag.sh   # the one kernel alone
set -u
source bench/gpu_calls/env.sh
python3 -m hbfd.warmup 2>&1 | tail -1
W=/tmp/s51d
KERNELS=${KERNELS:-matmul_host,matmul_dev,attn_fwd}
rm -rf $W /tmp/s51d-work        # a Triton cache warm from another helper build refuses the hbfcc builds
mkdir -p $W
L=$(left); T=$(( L - 30 ))
echo "== [${L}s left] graph_node_diag --kernels $KERNELS (timeout ${T}s)"
timeout $T python3 -X faulthandler bench/graph_node_diag.py --kernels $KERNELS --out $W --work /tmp/s51d-work \
    --budget-s $(( T - 60 > 60 ? T - 60 : 60 )) > $W/log.txt 2>&1
echo "graph_node_diag rc=$?"
grep -E "part [0-3]|captured|built|ok=|Error|error" $W/log.txt | cut -c1-400 | tail -60
tar czf $OUT/s51d.tgz -C $W . 2>/dev/null
W=$W python3 - <<'PY' | tee $W/summary.txt
import json, os
from pathlib import Path
p = Path(os.environ["W"]) / "graph_node_diag.json"
if not p.is_file():
    print("no graph_node_diag.json"); raise SystemExit(0)
d = json.loads(p.read_text())
print("gpu", d.get("gpu"), "torch", d.get("torch"), "triton", d.get("triton"), "cuda.bindings", d.get("cuda_bindings"),
      "ok", d.get("ok"), d.get("error", ""))
for k, r in (d.get("kernels") or {}).items():
    print("=" * 100)
    print(k, "stage", r.get("stage"), "error", r.get("error"), "capture", (r.get("capture") or {}).get("natent_launch_selection"))
    st = r.get("static") or {}
    print("  static: SASS identical", st.get("sass_identical"), st.get("sass_instructions"), "nv.info identical",
          st.get("nv_info_identical"), "headers", st.get("text_header"), st.get("error", ""))
    for ln in r.get("summary") or []:
        print(" ", ln[:900])
    f = r.get("functions") or {}
    print("  function attributes plain vs native entry differ:", f.get("attributes_diff_plain_native"))
    sw = r.get("swap") or {}
    print("  swap: reference", sw.get("reference"), "rounds", sw.get("rounds"), "errors", sw.get("errors"), sw.get("error", ""))
    for n, x in (sw.get("variants") or {}).items():
        dm, ra = x.get("device_ms") or {}, x.get("ratio") or {}
        print("   %-12s %.4f ms/launch [p10 %.4f p90 %.4f]  x%s [%s, %s]  %s us" % (
            n, dm.get("median", float("nan")), dm.get("p10", float("nan")), dm.get("p90", float("nan")),
            None if not ra else round(ra["median"], 4), None if not ra else round(ra["min"], 4),
            None if not ra else round(ra["max"], 4), x.get("extra_us_median")))
    idt = r.get("identity") or {}
    print("  identity:", idt.get("error") or {n: v.get("identical", v.get("error")) for n, v in idt.items()
                                             if isinstance(v, dict)}, "released", r.get("released"))
PY
tar czf $OUT/s51d.tgz -C $W . 2>/dev/null
echo "== done [$(left)s left]"
