#!/bin/bash
# one call (~9 min): what stop 43 fixed on the CPU, verified on the card, in order of value per minute:
#  1. the Triton TMA kernels (the completion table in whole KiB; they faulted in stop 43), ~60 s
#  2. capacity: the read-write proof at the size, 32 GiB through 4 GiB, one pass (page-per-warp RMW, batched
#     write-back; estimated 150-230 s), then stress,moe if time is left
# The 200 GiB generated part needs a call of its own: PARTS="gen200" GEN_GIB=200 bash bench/gpu_calls/stop42_capacity.sh
# Everything in ONE tar under $OUT, rewritten after every part (the device returns a limited number of files).
set -u
source bench/gpu_calls/env.sh
python3 -m hbfd.warmup 2>&1 | tail -1
W=/tmp/v44; mkdir -p $W/tt $W/cap
echo "== [$(left)s left] tma_triton"
timeout 150 python3 bench/tma_triton.py --out $W/tt --budget-s 120 --case-timeout 60 > $W/tt/log.txt 2>&1; echo "tt rc=$?"
grep -E "ok=|PASS|FAIL|ratio|native" $W/tt/log.txt | tail -12 | cut -c1-300
tar czf $OUT/v44.tgz -C $W .
for spec in "rw32|--parts rw --rw-gib 32 --rw-frames-gib 4 --rw-passes 1" "sm|--parts stress,moe"; do
  n=${spec%%|*}; a=${spec#*|}
  L=$(left); echo "== [$L s left] $n"; [ $L -gt 60 ] || break
  HBF_CAPACITY_DEVICE=1 HBF_STALL_WARN_S=300 timeout $(( L-20 )) python3 bench/capacity_gpu.py $a --out $W/cap/$n.json --work /tmp/cw_$n > $W/cap/$n.log 2>&1
  echo "$n rc=$?"; tail -6 $W/cap/$n.log | cut -c1-600
  tar czf $OUT/v44.tgz -C $W .
done
echo "== done [$(left)s left]"
