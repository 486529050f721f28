#!/bin/bash
# ONE call (~8-9 min, LIMIT=570; carry hbfproto, runtime_cuda/ptx, .whl) for stop 54's issue-13 questions, each part
# skipped when its time is not left. Default order (FIRST=asks):
#   1. stop54_asks.sh without its FOREVER part: every __hb_inline_until answer of sampled blocks (why the stream
#      reduce asks 2.2 times per warp), then bench/probes/load_wait_probe.cu (whether a plain load's read barrier,
#      which a divergent-branch check waits on right after the load, holds for the load's latency; the consume
#      probe's shape with the load before / after the group's vote)
#   2. stop51_sepcap.sh share, lf1, fwauto (the default; HBFCC_LOADS_FIRST=1 in stop 54's order: loads after the
#      group's band check, clock and until check; HBFCC_FULL_WARP=auto: `all` per kernel where ptxas gives it no
#      more registers -- the copies, not the unrolled reduce), parts stream, consume, little, no numba warm-up
#   3. the same three again in the other order, if time is left
#   4. stop54_asks.sh's FOREVER part alone (the re-asks' cost), if time is left
# FIRST=ab: the A/B (2.) first, then 1. -- for a short call (LIMIT ~400).
set -u
T0=$(date +%s); LIMIT=${LIMIT:-570}
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
asks() {
  LIMIT=$(( $(left) < 330 ? $(left) : 330 )) FOREVER=0 bash bench/gpu_calls/stop54_asks.sh 2>&1 | grep -v "^hb-ask"
}
ab() {   # $1: the variants in order
  local L; L=$(left); [ $L -lt 130 ] && { echo "sepcap ($1) skipped: ${L}s left"; return; }
  echo "== [${L}s left] sepcap $1"
  mkdir -p $OUT/sepcap_${1// /_}
  OUT=$OUT/sepcap_${1// /_} VARIANTS="$1" PARTS=stream,consume,little WARMUP=0 LIMIT=$(( L - 10 )) \
      bash bench/gpu_calls/stop51_sepcap.sh 2>&1 | grep -v "^hb-ask" | tail -40
}
if [ "${FIRST:-asks}" = ab ]; then
  ab "share lf1 fwauto"; asks
else
  asks; ab "share lf1 fwauto"; ab "fwauto lf1 share"
fi
L=$(left)
if [ $L -ge 150 ]; then
  echo "== [${L}s left] the re-asks' cost (FOREVER part)"
  LIMIT=$(( L - 10 )) FOREVER=1 ONLY_FOREVER=1 bash bench/gpu_calls/stop54_asks.sh 2>&1 | grep -v "^hb-ask" | tail -12
fi
echo "== stop54_all done [$(left)s left]"
