#!/bin/bash
# one call: what the cheaper builds of issue 18 cost on the device (docs/RESULTS.md "Issue 18 item 3: where the
# build time goes": HBFCC_INLINE_ISSUE=0 cuts ptxas to 0.27-0.55x, HBFCC_GROUP_ISSUES=0 to 0.66-0.78x, device
# speed not measured), side by side with the default build and the validity horizon, on the quick matrix
set -u
source bench/gpu_calls/env.sh
python3 -m hbfd.warmup 2>&1 | tail -2
echo "== [$(left)s left] matrix: default, no inline issue, no issue groups, horizon"
for v in default noinline nogroups horizon; do
  case $v in noinline) E="HBFCC_INLINE_ISSUE=0";; nogroups) E="HBFCC_GROUP_ISSUES=0";; horizon) E="HBFD_THERMAL_HORIZON=1";; *) E="HBF_DUMMY=0";; esac
  L=$(left); [ $L -lt 110 ] && { echo "dm $v skipped: ${L}s left"; continue; }
  env $E timeout 125 python3 bench/devpath_matrix.py --quick --sources fixed0,fast --budget-s 105 --out $OUT/dm_$v > $OUT/dm_$v.log 2>&1; echo "dm $v rc=$?"
  python3 - $OUT/dm_$v <<'PY'
import json,sys,glob
for f in glob.glob(sys.argv[1]+'/*.json'):
    try: d=json.load(open(f))
    except Exception: continue
    if 'summary' in d:
        for k,v in d['summary'].items(): print(k, v.get('counts'), 'median x%.2f p10 %.2f p90 %.2f' % (v['ratio']['median'], v['ratio']['p10'], v['ratio']['p90']))
PY
done
echo "== done [$(left)s left]"
