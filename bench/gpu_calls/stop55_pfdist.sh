#!/bin/bash
# ONE call (~3-4 min, LIMIT=300; carry hbfproto, runtime_cuda/ptx, .whl): HBFCC_PREFETCH_NEXT's distance (stop 55):
# stop51_sepcap.sh pf2, pf1 (the default), pf3, pf0 (none), parts stream and little, side by side.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-300}
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
mkdir -p $OUT/sc
OUT=$OUT/sc VARIANTS="${VARIANTS:-pf2 pf1 pf3 pf0}" PARTS=stream,little WARMUP=0 LIMIT=$(( $(left) - 10 )) \
    bash bench/gpu_calls/stop51_sepcap.sh 2>&1 | grep -E "^==|stream_|little_e65536|rc=" | cut -c1-220
cp /tmp/sc/sepcap.txt $OUT/sc/sepcap.txt 2>/dev/null
for v in ${VARIANTS:-pf2 pf1 pf3 pf0}; do cp /tmp/sc/$v/devpath_cost.json $OUT/sc/$v.devpath_cost.json 2>/dev/null; done
rm -f $OUT/sc/sc.tgz
echo "== stop55_pfdist done [$(left)s left]"
