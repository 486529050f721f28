#!/bin/bash
# one call on any card (~6-8 min with LIMIT=560; carry hbfproto, runtime_cuda/ptx, .whl):
#   1. the merge13b fix on the masked tail (stop50_merge.sh ONLY=w4_g1024, ~2 min): with the merge on, the tail's
#      requests must go 262,144 -> 32,768 and media bytes 134.2 -> 16.8 MB, outputs identical; merge off below x25;
#   2. stop51_sepcap.sh with VARIANTS (default "whole whole_ci sep_body_ci itime": bench/devpath_cost.py
#      stream,consume,little per build in its own work dir -- the default build, call isolation, the separate link
#      under the body's cap with call isolation, and HBFCC_INLINE_TIME=1: the served inline paths time themselves,
#      inline_ns, so the Little rounds' "explained" and the stream's helper time include the inline path). The Little part now has e65536_b8192 too: 8 loads in flight
#      for 8 rounds per program, against e8192_b8192's one round (stop 50: x1.19, 23.7 us a round vs 20.0 explained;
#      with one round per program every per-block cost -- prologue, the first until, the exit flush -- lands on it).
# ONE tar under $OUT (s51a.tgz), rewritten after every part.
set -u
source bench/gpu_calls/env.sh
W=/tmp/s51a; rm -rf $W; mkdir -p $W
pack() { tar czf $OUT/s51a.tgz -C $W . 2>/dev/null; }
L=$(left)
if [ "${MG:-1}" = 1 ] && [ $L -gt 190 ]; then
  echo "== [${L}s left] merge check (ONLY=w4_g1024)"
  ( OUT=$W/merge; mkdir -p $OUT; export OUT; ONLY=w4_g1024 LIMIT=170 bash bench/gpu_calls/stop50_merge.sh ) > $W/merge.log 2>&1
  echo "merge rc=$?"; tail -30 $W/merge.log | cut -c1-300
  pack
fi
L=$(left)
echo "== [${L}s left] stop51_sepcap.sh VARIANTS=\"${VARIANTS:-whole whole_ci sep_body_ci itime}\""
VARIANTS="${VARIANTS:-whole whole_ci sep_body_ci itime}" LIMIT=$(( L - 5 )) bash bench/gpu_calls/stop51_sepcap.sh
pack   # stop51_sepcap.sh packs its own sc.tgz under $OUT
echo "== done [$(left)s left]"
