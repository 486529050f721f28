#!/bin/bash
# ONE call (~9 min, LIMIT=580; carry hbfproto, runtime_cuda/ptx, .whl): HBFCC_PREFETCH_GROUP (stop 56, issue 13).
#   1. stop51_sepcap.sh pg, share (today's default): parts stream, consume, little side by side
#   2. devpath_cost probe,unrelated with today's defaults (stop56_todo.sh's part 2: the per-request distribution idle
#      and at full occupancy; the unrelated matmuls with 60 GiB registered, goal <= 1.02)
#   3. the sepcap pair in the other order if time is left
set -u
LIMIT=${LIMIT:-580}
source bench/gpu_calls/env.sh            # the wheels, PYTHONPATH, the card (its own clock: T0 set again below)
T0=$(date +%s)
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
ab() {
  local L; L=$(left); [ $L -lt 200 ] && { echo "sepcap ($1) skipped: ${L}s left"; return; }
  echo "== [${L}s left] sepcap $1"
  local D=$OUT/sepcap_${1// /_}; mkdir -p $D
  OUT=$D VARIANTS="$1" PARTS=stream,consume,little WARMUP=0 LIMIT=$(( L - 10 < 280 ? L - 10 : 280 )) \
      bash bench/gpu_calls/stop51_sepcap.sh 2>&1 | tail -40
  cp /tmp/sc/sepcap.txt $D/sepcap.txt 2>/dev/null
  for v in $1; do cp /tmp/sc/$v/devpath_cost.json $D/$v.devpath_cost.json 2>/dev/null; done
  rm -f $D/sc.tgz
}
ab "pg share"
L=$(left); T=$(( L - 10 < 250 ? L - 10 : 250 ))
if [ $T -ge 160 ]; then
  SKIP_TMA=1 LIMIT=$T bash bench/gpu_calls/stop56_todo.sh 2>&1 | tail -35
else
  echo "devpath_cost skipped: ${L}s left"
fi
ab "share pg"
echo "== stop56_pg done [$(left)s left]"
