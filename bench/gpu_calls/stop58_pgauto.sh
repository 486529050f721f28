#!/bin/bash
# ONE call (~9 min, LIMIT=560; carry hbfproto, runtime_cuda/ptx, .whl): HBFCC_PREFETCH_GROUP=auto and
# HBFCC_EARLY_CLOCK=auto (stop 58, issue 13), parts stream, consume, little:
#   1. stop51_sepcap.sh auto2 (both knobs at auto: HBFCC_FULL_WARP=auto's third variant all+pg+ec) then off2 (both
#      off: the default before stop 58)
#   2. off2 then auto2 (the other order)
#   3. the quick devpath stress matrix with both at auto (fixed 0 / 20 us / fast): every case ends, outputs
#      bit-identical, with the builds the variant makes
set -u
LIMIT=${LIMIT:-560}
source bench/gpu_calls/env.sh            # the wheels, PYTHONPATH, the card (its own clock: T0 set again below)
T0=$(date +%s)
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
AB_MIN=170 AB_CAP=300
source bench/gpu_calls/sepcap_ab.sh      # ab "V1 V2": the variants side by side
ab "auto2 off2"
ab "off2 auto2"
L=$(left); T=$(( L - 15 ))
if [ $T -ge 90 ]; then
  echo "== [${L}s left] quick stress matrix, both knobs at auto (budget $(( T - 20 ))s)"
  HBFD_ACCEL=off HBFCC_PREFETCH_GROUP=auto HBFCC_EARLY_CLOCK=auto timeout $T python3 bench/devpath_matrix.py --quick \
      --sources fixed0,fixed20us,fast --budget-s $(( T - 20 )) --out $OUT/mx 2>&1 | tail -25
else
  echo "matrix skipped: ${L}s left"
fi
echo "== stop58_pgauto done [$(left)s left]"
