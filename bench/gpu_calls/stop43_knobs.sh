#!/bin/bash
# one call: build variants of issue 13/18 on the quick matrix with the first-wave stall gone (the horizon is on by
# default since stop 43). Stop 41 compared the separate link with the whole-program build while every kernel still
# paid the stall (x5.41 vs x5.32: "occupancy is not the cost"); with the stall gone the register-starved cases
# (masked-tail reduce x18 at 2 blocks/SM, reduce e65536 x7.9 at 3) may say otherwise. Done in stop 43:
# HBFCC_INLINE_ISSUE=0 (x1.7 slower). Both ptxas-13 variants use CUDA's ptxas (Triton's bundled one has no nvlink).
# All outputs in ONE tar under $OUT, rewritten after every part.
set -u
source bench/gpu_calls/env.sh
python3 -m hbfd.warmup 2>&1 | tail -1
P13=$(command -v ptxas)
echo "== [$(left)s left] matrix variants (ptxas 13: $P13)"
mkdir -p /tmp/kn
for v in whole13 separate13 nogroups; do
  case $v in
    whole13) E=(HBFCC_REAL_PTXAS=$P13);;
    separate13) E=(HBFCC_LINK=separate HBFCC_REAL_PTXAS=$P13);;
    nogroups) E=(HBFCC_GROUP_ISSUES=0);;
  esac
  L=$(left); [ $L -lt 110 ] && { echo "dm $v skipped: ${L}s left"; continue; }
  env "${E[@]}" timeout 150 python3 bench/devpath_matrix.py --quick --sources fixed0,fast --budget-s 130 --out /tmp/kn/dm_$v > /tmp/kn/dm_$v.log 2>&1; echo "dm $v rc=$?"
  python3 - /tmp/kn/dm_$v <<'PY'
import json,sys,glob
for f in glob.glob(sys.argv[1]+'/*.json'):
    try: d=json.load(open(f))
    except Exception: continue
    if 'summary' in d:
        for k,v in d['summary'].items(): print(k, v.get('counts'), 'median x%.2f p10 %.2f p90 %.2f' % (v['ratio']['median'], v['ratio']['p10'], v['ratio']['p90']))
        for c in d['sources']['fixed0']['cases']:
            k=c.get('kernel_hbf') or {}
            print('  ', c['name'][:44], c.get('status'), 'x%.2f' % (c.get('ratio') or 0), k.get('n_regs'), k.get('blocks_per_sm'))
PY
  tar czf $OUT/kn.tgz -C /tmp/kn .
done
echo "== done [$(left)s left]"
