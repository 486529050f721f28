#!/bin/bash
# one call (stop 46): the 48-layer fast-source (ocp-sg2) Qwen3 run that stalls in moe_down_hbf, told apart by helper
# build. cuda-gdb found it twice (stop 45, docs/RESULTS.md "Stop 45 ... the sg2 48-layer stall", bench/results/
# stop45_h100/gdb_sg2/): in one CTA, lanes 25-31 of a warp wait inside __hb_issue's compact fast path at the
# divergent fallback of `dl = __shfl_sync(mask, dd, leader)` (mask 0xff000000: lanes 24-31, leader 24) while the
# leader, lane 24, is past it with lanes 0-23 at the kernel's next bar.sync. Each variant runs with a 25 s stall watch
# and a hard limit; rc 0 = the two tokens ended:
#   default    the helpers as built (direct build: the compact path and the fast model inlined into __hb_issue)
#   barrier    helpers built with -DHBF_LEADER_BARRIER=1 (a warp barrier, in a function of its own, before every
#              shuffle of a leader's result: runtime_cuda/src/hbf_ptx.cuh hb_from_leader); if it ends where default
#              stalls, make it the default
#   nofast     helpers built with -DHBF_FAST_ISSUE=0 (no compact path: every issue goes to hb_issue_slow)
#   lean       the lean helper build (hb_fast_model etc. real calls: HBFCC_HELPER_PTX=runtime_cuda/ptx/hbf_helpers_lean.ptx)
#   b1         batch 1 with the default helpers
# The helper builds are made here with nvcc (a minute); each variant has its own Triton/hbfcc cache (a cache key
# does not name the helper PTX). One tar under $OUT.
#   LIMIT=560 bash bench/gpu_calls/stop46_sg2hang.sh     (carry: hbfproto, runtime_cuda/ptx, .whl)
set -u
source bench/gpu_calls/env.sh
python3 -m hbfd.warmup 2>&1 | tail -1
W=/tmp/s46; mkdir -p $W/ptx
nvcc -std=c++17 -O3 -arch=compute_90a -rdc=true -ptx -Iruntime_cuda/include -DHBF_FAST_ISSUE=0 \
    runtime_cuda/src/hbf_helpers.cu -o $W/ptx/hbf_helpers_nofast.ptx && \
    sed -i 's/^\.visible \.func/.weak .func/' $W/ptx/hbf_helpers_nofast.ptx
echo "nofast build rc=$? ($(grep -c '^\.weak \.func' $W/ptx/hbf_helpers_nofast.ptx) weak funcs)"
nvcc -std=c++17 -O3 -arch=compute_90a -rdc=true -ptx -Iruntime_cuda/include -DHBF_LEADER_BARRIER=1 \
    runtime_cuda/src/hbf_helpers.cu -o $W/ptx/hbf_helpers_barrier.ptx && \
    sed -i 's/^\.visible \.func/.weak .func/' $W/ptx/hbf_helpers_barrier.ptx
echo "barrier build rc=$? ($(grep -c 'bar.warp.sync' $W/ptx/hbf_helpers_barrier.ptx) bar.warp.sync: want 1)"
pack() { tar czf $OUT/s46.tgz -C $W --exclude="cache*" --exclude=out --exclude=ptx . 2>/dev/null; }
run() {   # name, limit, env..., -- args...
  local name=$1 lim=$2; shift 2
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local L=$(left); [ $L -lt $((lim + 15)) ] && { echo "$name skipped: ${L}s left"; return; }
  mkdir -p $W/$name
  env HBF_STALL_WARN_S=25 "${envs[@]}" timeout -s KILL $lim python3 -m workloads.qwen3moe run \
      --model qwen3-30b-a3b --tokens 2 --prompt 1 --out $W/$name/out --cache $W/cache_$name "$@" > $W/$name/log.txt 2>&1
  local rc=$?
  pkill -9 -f "hbfd.cli" 2>/dev/null
  echo "== [$(left)s left] $name rc=$rc"
  grep -v "not admitted\|stack limit" $W/$name/log.txt | grep -E "ms/step|instrumented batch|no progress|Error" | tail -3 | cut -c1-500
  cp $W/$name/out/*.json $W/$name/ 2>/dev/null
  pack
}
run default 150 HBF_DUMMY=0 -- --batch 8 --profile ocp-sg2
run barrier 150 HBFCC_HELPER_PTX=$W/ptx/hbf_helpers_barrier.ptx -- --batch 8 --profile ocp-sg2
run nofast 120 HBFCC_HELPER_PTX=$W/ptx/hbf_helpers_nofast.ptx -- --batch 8 --profile ocp-sg2
run lean 120 HBFCC_HELPER_PTX=$PWD/runtime_cuda/ptx/hbf_helpers_lean.ptx -- --batch 8 --profile ocp-sg2
run b1 100 HBF_DUMMY=0 -- --batch 1 --profile ocp-sg2
echo "== done [$(left)s left]"
