#!/bin/bash
# one call (LIMIT=420; carry hbfproto, runtime_cuda/ptx, .whl), two questions of stop 52 in priority order:
#   1. issue 13: stop51_sepcap.sh's variants share (HBFCC_SHARE_UNTIL=1, the default: one until ask serves loads and
#      stores) and noshare (=0, the build of before: stop 52's ncu found 2.25 asks per warp in the stream reduce, the
#      asks and their flushes 26 % of its instructions) -- or VARIANTS="share lf" (lf: HBFCC_LOADS_FIRST=all since stop 53) -- on
#      devpath_cost's stream_reduce, stream_copy and little_e65536_b8192, each in its own work dir, side by side;
#   2. issue 18: capi_sample --jit (stop52_jit.sh's part A) when >= 150 s are left (JIT=0 skips it).
# WARMUP=0 skips hbfd's ~150 s numba warm-up of a fresh machine (HBFD_ACCEL=off). Tars under $OUT: sc.tgz (the
# variants, stop51_sepcap.sh's), s52s.tgz (capi).
set -u
source bench/gpu_calls/env.sh
[ "${WARMUP:-1}" = 1 ] || export HBFD_ACCEL=off
KEEP=$([ "${JIT:-1}" = 1 ] && echo 160 || echo 5)      # seconds kept for the capi part
VARIANTS="${VARIANTS:-share noshare}" PARTS=stream_reduce,stream_copy,little_e65536_b8192 WARMUP=${WARMUP:-1} \
    LIMIT=$(( $(left) - KEEP )) bash bench/gpu_calls/stop51_sepcap.sh
W=/tmp/s52s; rm -rf $W; mkdir -p $W
L=$(left)
if [ "${JIT:-1}" = 1 ] && [ $L -ge 150 ]; then
  echo "== [${L}s left] capi_sample --jit (timeout $(( L - 15 ))s)"
  timeout $(( L - 15 )) python3 bench/capi_sample.py --jit --profile ocp-sg1 --n 262144 --iters 1 --reps 3 \
      --run-timeout 40 --work $W/capi --out $W/capi_jit.json > $W/capi_jit.log 2>&1
  echo "capi rc=$?"; tail -8 $W/capi_jit.log | cut -c1-400
  python3 -c "
import json,sys
try: r=json.load(open('$W/capi_jit.json'))
except Exception as e: print('no result', e); sys.exit(0)
for k in ('ok','identical_native','identical_modeled','bind','build_s','jit','jit_load','times_ms'):
    if k in r: print(' ', k, json.dumps(r[k], default=str)[:700])"
  tar czf $OUT/s52s.tgz -C $W --exclude=capi . 2>/dev/null
else
  echo "capi --jit skipped: ${L}s left (JIT=${JIT:-1})"
fi
echo "== done [$(left)s left]"
