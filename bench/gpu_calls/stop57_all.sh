#!/bin/bash
# ONE call (~9.5 min, LIMIT=570; carry hbfproto, runtime_cuda/ptx, .whl): this stop's GPU work in priority order, so a
# machine that starts at all is used whole (stop 56 got none in 14 tries, stop 57 none in 16):
#   1. stop57_consume_ncu.sh (its consume part capped at 190 s) with one Little kernel (e65536_b8192): where the
#      consume probe's +128-160 ns and a Little round's 1.2 us go, per SASS instruction (ncu PC sampling)  (~5 min)
#   2. stop56_pgmin.sh: HBFCC_PREFETCH_GROUP vs today's default, stream part                        (~4 min, if left)
#   3. the second Little kernel's ncu (e8192_b8192, one round per program) if time is left
set -u
LIMIT=${LIMIT:-570}
T00=$(date +%s)
rest() { echo $(( LIMIT - ($(date +%s) - T00) )); }
L=$(rest); LITTLE=little_e65536_b8192 LIMIT=$(( L < 330 ? L : 330 )) bash bench/gpu_calls/stop57_consume_ncu.sh
mkdir -p $OUT/cn1 && mv $OUT/cn.tgz $OUT/cn1/ 2>/dev/null
L=$(rest); echo "== [${L}s left] pgmin"
if [ $L -ge 200 ]; then
  LIMIT=$(( L - 10 < 230 ? L - 10 : 230 )) bash bench/gpu_calls/stop56_pgmin.sh
else
  echo "pgmin skipped"
fi
L=$(rest); echo "== [${L}s left] little_e8192_b8192 ncu"
if [ $L -ge 150 ]; then
  LITTLE=little_e8192_b8192 SKIP_CONSUME=1 LIMIT=$(( L - 10 )) bash bench/gpu_calls/stop57_consume_ncu.sh
  mkdir -p $OUT/cn2 && mv $OUT/cn.tgz $OUT/cn2/ 2>/dev/null
fi
echo "== stop57_all done [$(rest)s left]"
