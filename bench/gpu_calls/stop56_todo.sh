#!/bin/bash
# ONE call (~6-9 min, LIMIT=560; carry hbfproto, runtime_cuda/ptx, .whl): what stop 55 left for a card.
#   1. on an H200 only: issue 15's proof on the card the issue names (bench/gpu_calls/stop55_tma.sh: semantics,
#      increment, the Triton TMA kernels and their native cost); on an H100 it ran in stop 55
#   2. issue 13 goal 2 and 3 with today's defaults (HBFCC_FULL_WARP=auto, HBFCC_PREFETCH_NEXT=1): devpath_cost's
#      per-request distribution (probe: idle and full occupancy) and the unrelated matmuls with 60 GiB registered
#      (goal <= 1.02) -- last measured many builds ago
# SKIP_TMA=1: part 2 only (bench/gpu_calls/stop56_pg.sh)
set -u
T0=$(date +%s); LIMIT=${LIMIT:-560}
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
source bench/gpu_calls/env.sh
if [ "${SKIP_TMA:-0}" != 1 ] && nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  mkdir -p $OUT/tma
  OUT=$OUT/tma LIMIT=300 bash bench/gpu_calls/stop55_tma.sh 2>&1 | tail -25
fi
L=$(left); T=$(( L - 20 )); [ $T -lt 120 ] && { echo "devpath_cost skipped: ${L}s left"; exit 0; }
export HBFD_ACCEL=off
mkdir -p $OUT/dc
echo "== [${L}s left] devpath_cost probe,unrelated (60 GiB registered)"
timeout $T python3 bench/devpath_cost.py --out $OUT/dc --work /tmp/dcw --parts probe,unrelated --unrelated-gib 60 \
    --budget-s $(( T - 20 )) > $OUT/dc/log.txt 2>&1
echo "rc=$?"; tail -30 $OUT/dc/log.txt | cut -c1-400
echo "== stop56_todo done [$(left)s left]"
