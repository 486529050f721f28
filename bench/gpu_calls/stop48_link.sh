#!/bin/bash
# one call (~5-6 min): the quick device-path matrix at fixed 0 ns with the helpers linked separately
# (HBFCC_LINK=separate: the module assembled with -c, the helpers one cached object, nvlink), re-measured after the
# first-wave stall fix (the validity horizon, stop 43) and the checked leader shuffle (stop 47): stop 41 measured it
# before both (fixed0 x5.41 vs whole x5.32, 3 cases hung). The question: whole-program assembly gives the
# instrumented reduce/copy kernels 128 registers (4 blocks/SM where plain has 16); the kernel's own inline path
# needs ~56-62 (stop 27's do-nothing helpers), the rest is the helpers' demand. With the helpers assembled apart
# under a cap the kernel keeps its own count. Variants, each its own Triton/hbfcc caches:
#   sep_plain  HBFCC_LINK=separate (cap = the plain build's registers; the knob's default)
#   sep_64     HBFCC_LINK=separate HBFCC_SEPARATE_CAP=64
# (the whole-program baseline on the same machine is stop47_inltime.sh's `off` run, chained before this one).
# Both with HBFCC_REAL_PTXAS = the toolkit's ptxas (the separate link needs nvlink beside it).
# ONE tar under $OUT (lk.tgz), rewritten after every part.
set -u
source bench/gpu_calls/env.sh
python3 -m hbfd.warmup 2>&1 | tail -1
export HBFCC_REAL_PTXAS=$(command -v ptxas)
echo "ptxas: $HBFCC_REAL_PTXAS"
W=/tmp/lk; mkdir -p $W
for v in sep_plain sep_64; do
  L=$(left)
  case $v in
    sep_plain) E=(HBFCC_LINK=separate); WK=/tmp/lkw0; B=$(( (L - 60) / 2 ));;
    sep_64) E=(HBFCC_LINK=separate HBFCC_SEPARATE_CAP=64); WK=/tmp/lkw1; B=$(( L - 60 ));;
  esac
  B=$(( B > 200 ? 200 : B ))
  [ $B -lt 110 ] && { echo "dm $v skipped: ${L}s left"; continue; }
  echo "== [${L}s left] ${E[*]} ($v), budget ${B}s"
  env "${E[@]}" timeout $(( B + 25 )) python3 bench/devpath_matrix.py --quick --sources fixed0 --budget-s $B \
      --work $WK --out $W/dm_$v > $W/dm_$v.log 2>&1; echo "dm $v rc=$?"
  tail -3 $W/dm_$v.log | cut -c1-300
  f=$(ls $W/dm_$v/*.json 2>/dev/null | head -1)
  [ -n "$f" ] && python3 bench/explain_devpath.py "$f" --out $W/explain_$v.json > $W/explain_$v.log 2>&1
  echo "explain $v rc=$?"
  [ -n "$f" ] && python3 - "$f" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for c in d["sources"]["fixed0"]["cases"]:
    kp, kh = c.get("kernel_plain") or {}, c.get("kernel_hbf") or {}
    print(f"{c['name'][:44]:44s} {c.get('status'):6s} x{c.get('ratio') or 0:6.2f} regs {kp.get('n_regs')}->"
          f"{kh.get('n_regs')} blocks/SM {kp.get('blocks_per_sm')}->{kh.get('blocks_per_sm')} spills {kh.get('n_spills')}"
          f" identical {all((c.get('identical') or {'-': False}).values())}")
PY
  tar czf $OUT/lk.tgz -C $W .
done
echo "== done [$(left)s left]"
