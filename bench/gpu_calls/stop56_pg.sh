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
source bench/gpu_calls/sepcap_ab.sh      # ab "V1 V2": the variants side by side
ab "pg share"
L=$(left); T=$(( L - 10 < 250 ? L - 10 : 250 ))
if [ $T -ge 160 ]; then
  SKIP_TMA=1 LIMIT=$T bash bench/gpu_calls/stop56_todo.sh 2>&1 | tail -35
else
  echo "devpath_cost skipped: ${L}s left"
fi
ab "share pg"
echo "== stop56_pg done [$(left)s left]"
