#!/bin/bash
# one call: the first-wave stall A/B, TMA semantics (--mc-debug), the Qwen3 hang with the launch named, tma_triton, capacity if time is left
set -u
source bench/gpu_calls/env.sh
python3 -m hbfd.warmup 2>&1 | tail -2
echo "== [$(left)s left] matrix: default, snapshot age 1 s, the validity horizon"
for v in default age1s horizon; do
  case $v in age1s) E="HBF_THERMAL_MAX_AGE_NS=1000000000";; horizon) E="HBFD_THERMAL_HORIZON=1";; *) E="HBF_DUMMY=0";; esac
  env $E timeout 100 python3 bench/devpath_matrix.py --quick --sources fixed0,fast --budget-s 80 --out $OUT/dm_$v > $OUT/dm_$v.log 2>&1; echo "dm $v rc=$?"
  python3 - $OUT/dm_$v <<'PY'
import json,sys,glob
for f in glob.glob(sys.argv[1]+'/*.json'):
    try: d=json.load(open(f))
    except Exception: continue
    if 'summary' in d:
        for k,v in d['summary'].items(): print(k, v.get('counts'), 'median x%.2f p10 %.2f p90 %.2f' % (v['ratio']['median'], v['ratio']['p10'], v['ratio']['p90']))
PY
done
echo "== [$(left)s left] tma semantics"
mkdir -p $OUT/td
timeout 130 python3 bench/tma_semantics.py --semantics --mc-debug --out $OUT/td --work /tmp/tsw > $OUT/td/log.txt 2>&1; echo "tma rc=$?"
tail -5 $OUT/td/log.txt
echo "== [$(left)s left] qwen3 hang diag"
mkdir -p $OUT/q1
( HBF_STALL_WARN_S=20 CUDA_LAUNCH_BLOCKING=1 CUDA_MODULE_LOADING=EAGER timeout -s ABRT 140 python3 -X faulthandler -m workloads.qwen3moe run --model qwen3-30b-a3b --batch 8 --tokens 4 --prompt 2 --profile ocp-sg2 --out /tmp/q1 --cache /tmp/qc > $OUT/q1/log.txt 2>&1; echo "qwen rc=$?" >> $OUT/q1/log.txt ) &
QP=$!
for t in 60 90 120; do
  sleep 30; [ -d /proc/$QP ] || break
  python3 -m hbfd.ctl_cli --socket /tmp/q1/work/hbfd.sock --json status > $OUT/q1/status_$t.json 2>&1
  nvidia-smi --query-gpu=utilization.gpu,power.draw --format=csv,noheader >> $OUT/q1/smi.txt
done
wait $QP
tail -30 $OUT/q1/log.txt
cp -r /tmp/q1/work/*.json /tmp/q1/*.json $OUT/q1/ 2>/dev/null; ls /tmp/q1 | head
echo "== [$(left)s left] tma_triton"
mkdir -p $OUT/tt
timeout 170 python3 bench/tma_triton.py --out $OUT/tt --budget-s 120 --case-timeout 60 > $OUT/tt/log.txt 2>&1; echo "tt rc=$?"; tail -12 $OUT/tt/log.txt
echo "== [$(left)s left] capacity gen16"
mkdir -p $OUT/cap
L=$(left); [ $L -gt 100 ] && HBF_CAPACITY_DEVICE=1 timeout $(( L>200 ? 180 : L-20 )) python3 bench/capacity_gpu.py --parts generated --gen-gib 16 --gen-frames-gib 2 --chunk-gib 4 --out $OUT/cap/gen16.json --work /tmp/cw1 > $OUT/cap/gen16.log 2>&1; echo "gen16 rc=$?"; tail -5 $OUT/cap/gen16.log
echo "== [$(left)s left] capacity rw8"
L=$(left); [ $L -gt 150 ] && HBF_CAPACITY_DEVICE=1 timeout $(( L-15 )) python3 bench/capacity_gpu.py --parts rw --rw-gib 8 --rw-frames-gib 1 --rw-passes 1 --out $OUT/cap/rw8.json --work /tmp/cw2 > $OUT/cap/rw8.log 2>&1; echo "rw8 rc=$?"; tail -5 $OUT/cap/rw8.log
# the device returns a limited number of files (stop 43 lost td/, q1/ and tt/ as "count"): one tar of the parts' folders
tar czf $OUT/parts.tgz -C $OUT td q1 tt 2>/dev/null && rm -rf $OUT/td $OUT/q1 $OUT/tt
echo "== done [$(left)s left]"
