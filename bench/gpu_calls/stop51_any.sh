#!/bin/bash
# one call on any card (~6-8 min with LIMIT=560; carry hbfproto, runtime_cuda/ptx, .whl):
#   1. the merge13b fix on the masked tail (stop50_merge.sh ONLY=w4_g1024, ~2 min): with the merge on, the tail's
#      requests must go 262,144 -> 32,768 and media bytes 134.2 -> 16.8 MB, outputs identical; merge off below x25;
#   2. bench/devpath_cost.py stream,probe,consume,little twice, each build in its own work dir: the default build and
#      HBFCC_INLINE_TIME=1 (the served inline paths time themselves: inline_ns, so the Little rounds' "explained" and
#      the stream's helper time include the inline path). The Little part now has e65536_b8192 too: 8 loads in flight
#      for 8 rounds per program, against e8192_b8192's one round (stop 50: x1.19, 23.7 us a round vs 20.0 explained;
#      with one round per program every per-block cost -- prologue, the first until, the exit flush -- lands on it).
# ONE tar under $OUT (s51a.tgz), rewritten after every part.
set -u
source bench/gpu_calls/env.sh
W=/tmp/s51a; rm -rf $W; mkdir -p $W
pack() { tar czf $OUT/s51a.tgz -C $W . 2>/dev/null; }
L=$(left)
if [ "${MG:-1}" = 1 ] && [ $L -gt 300 ]; then
  echo "== [${L}s left] merge check (ONLY=w4_g1024)"
  ( OUT=$W/merge; mkdir -p $OUT; export OUT; ONLY=w4_g1024 LIMIT=170 bash bench/gpu_calls/stop50_merge.sh ) > $W/merge.log 2>&1
  echo "merge rc=$?"; tail -30 $W/merge.log | cut -c1-300
  pack
fi
python3 -m hbfd.warmup 2>&1 | tail -1
for v in def itime; do
  L=$(left); T=$(( L - 20 < 200 ? L - 20 : 200 ))
  [ $T -lt 90 ] && { echo "devpath_cost $v skipped: ${L}s left"; continue; }
  case $v in def) E=(HBFCC_INLINE_TIME=0);; itime) E=(HBFCC_INLINE_TIME=1);; esac
  rm -rf /tmp/s51a_work_$v; mkdir -p $W/dc_$v
  echo "== [${L}s left] ${E[*]} devpath_cost stream,probe,consume,little (timeout ${T}s)"
  env "${E[@]}" timeout $T python3 bench/devpath_cost.py --out $W/dc_$v --work /tmp/s51a_work_$v \
      --parts stream,probe,consume,little --budget-s $(( T - 30 )) > $W/dc_$v/log.txt 2>&1
  echo "devpath_cost $v rc=$?"; grep -E "little|stream|consume|probe" $W/dc_$v/log.txt | tail -14 | cut -c1-400
  pack
done
echo "== done [$(left)s left]"
