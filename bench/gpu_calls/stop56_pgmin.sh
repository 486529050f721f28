#!/bin/bash
# ONE short call (~4 min, LIMIT=220; carry hbfproto, runtime_cuda/ptx, .whl): stop56_pg.sh's first pair cut to the
# stream part (what the unrolled reduce needs), for a call with little device time left: pg vs share side by side.
set -u
LIMIT=${LIMIT:-220}
D=$OUT/sepcap_pg_share_stream; mkdir -p $D
OUT=$D VARIANTS="pg share" PARTS=stream WARMUP=0 LIMIT=$LIMIT bash bench/gpu_calls/stop51_sepcap.sh 2>&1 | tail -30
cp /tmp/sc/sepcap.txt $D/sepcap.txt 2>/dev/null
for v in pg share; do cp /tmp/sc/$v/devpath_cost.json $D/$v.devpath_cost.json 2>/dev/null; done
rm -f $D/sc.tgz
