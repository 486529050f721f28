#!/bin/bash
# ONE call (~5-8 min, LIMIT=480; carry hbfproto, runtime_cuda/ptx, .whl): HBFCC_PREFETCH_NEXT (stop 55, issue 13).
#   1. bench/probes/prefetch_probe.cu: does prefetch.global.L2 / prefetch.L2 of an address no allocation holds fault
#      (past an allocation's end, 64 GiB past it, the null page, an unmapped high address, a freed allocation)?
#      Each case its own process (a sticky error would end the context).
#   2. stop51_sepcap.sh pf1, share (today's default), pf1lf1, lf1: parts stream, consume, little side by side; then
#      the same in the other order if time is left.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-480}
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
mkdir -p $OUT/probe
echo "== prefetch probe"
nvcc -arch=sm_90a -O3 -o /tmp/pfp bench/probes/prefetch_probe.cu && \
    for c in 0 1 2 3 4 5 6; do timeout 30 /tmp/pfp $c; done 2>&1 | tee $OUT/probe/prefetch_probe.txt
ab() {
  local L; L=$(left); [ $L -lt 130 ] && { echo "sepcap ($1) skipped: ${L}s left"; return; }
  echo "== [${L}s left] sepcap $1"
  mkdir -p $OUT/sepcap_${1// /_}
  OUT=$OUT/sepcap_${1// /_} VARIANTS="$1" PARTS=stream,consume,little WARMUP=0 LIMIT=$(( L - 10 )) \
      bash bench/gpu_calls/stop51_sepcap.sh 2>&1 | tail -60
  cp /tmp/sc/sepcap.txt $OUT/sepcap_${1// /_}/sepcap.txt 2>/dev/null
  for v in $1; do cp /tmp/sc/$v/devpath_cost.json $OUT/sepcap_${1// /_}/$v.devpath_cost.json 2>/dev/null; done
  rm -f $OUT/sepcap_${1// /_}/sc.tgz
}
ab "pf1 share pf1lf1 lf1"
ab "lf1 pf1lf1 share pf1"
echo "== stop55_pf done [$(left)s left]"
