#!/bin/bash
# one call (stop 44): the Qwen3 hang under the nominal profile (its reference timing source), 2 layers, 1 token:
# blocking launches, the same profile with the fixed source, batch 1, and the -DHBF_FAST_ISSUE=0 helpers (carry `dbg`).
# Each variant in its own process with a time limit; rc 0 = the step ended. The -DHBF_FAST_ISSUE=0 helpers:
#   nvcc -std=c++17 -O3 -arch=compute_90a -rdc=true -ptx -Iruntime_cuda/include -DHBF_FAST_ISSUE=0 \
#        runtime_cuda/src/hbf_helpers.cu -o dbg/hbf_helpers_nofast.ptx
#   sed -i 's/^\.visible \.func/.weak .func/' dbg/hbf_helpers_nofast.ptx)
# Everything goes into ONE tar under $OUT, rewritten after every part (the device returns a limited number of files).
set -u
source bench/gpu_calls/env.sh
python3 -m hbfd.warmup 2>&1 | tail -1
mkdir -p /tmp/qb
sed "s/\"timing_source\": \"reference\"/\"timing_source\": \"fixed\"/" hbfcommon/profiles/nominal.json > /tmp/qb/nominal-fixed.json
grep -c "\"timing_source\": \"fixed\"" /tmp/qb/nominal-fixed.json
run() {   # name, limit, env..., -- args...
  local name=$1 lim=$2; shift 2
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local L=$(left); [ $L -lt $((lim + 15)) ] && { echo "$name skipped: ${L}s left"; return; }
  local QC=/tmp/qb/cache; [[ $name == *nofast* ]] && QC=/tmp/qb/cache_nf
  mkdir -p /tmp/qb/$name
  env HBF_STALL_WARN_S=15 "${envs[@]}" timeout -s ABRT $lim python3 -X faulthandler -m workloads.qwen3moe run \
      --model qwen3-30b-a3b --layers 2 --tokens 1 --prompt 1 --out /tmp/qb/$name/out --cache $QC "$@" \
      > /tmp/qb/$name/log.txt 2>&1
  local rc=$?
  echo "== [$(left)s left] $name rc=$rc"
  grep -v "^  File\|^Extension\|^$\|not admitted" /tmp/qb/$name/log.txt | grep -E "step|ms/|stall|launch|Error|error|tokens|modeled" | tail -4 | cut -c1-400
  cp /tmp/qb/$name/out/*.json /tmp/qb/$name/ 2>/dev/null
  tar czf $OUT/qn.tgz -C /tmp/qb --exclude="cache*" --exclude=out . 2>/dev/null
}
run nom_b8_block 100 CUDA_LAUNCH_BLOCKING=1 -- --batch 8 --profile nominal
run nom_b8_fixed 70 HBF_DUMMY=0 -- --batch 8 --profile /tmp/qb/nominal-fixed.json
run nom_b1 70 HBF_DUMMY=0 -- --batch 1 --profile nominal
run nom_b8_nofast 150 HBF_DUMMY=0 HBFCC_HELPER_PTX=$PWD/dbg/hbf_helpers_nofast.ptx -- --batch 8 --profile nominal
echo "== done [$(left)s left]"
