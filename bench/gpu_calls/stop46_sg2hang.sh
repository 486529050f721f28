#!/bin/bash
# one call (stop 46): the 48-layer fast-source (ocp-sg2) Qwen3 run that stalls in moe_down_hbf, told apart by helper
# build. cuda-gdb found it twice (stop 45, docs/RESULTS.md "Stop 45", bench/results/stop45_h100/gdb_sg2/): in one
# CTA, lanes 25-31 of a warp wait inside __hb_issue's compact fast path at the divergent fallback of
# `dl = __shfl_sync(mask, dd, leader)` (mask 0xff000000: lanes 24-31, leader 24) while the leader, lane 24, is past it
# with lanes 0-23 at the kernel's next bar.sync. Variants (batch 8, 2 tokens, prompt 1, all 48 layers; each with a
# 25 s stall watch, cuda-gdb on a stall, its own caches: bench/gpu_calls/qwen_go.sh), in this order:
#   (first)    bench/warp_groups.py: the stall's situation made on purpose (two groups of one warp in one helper,
#              a leader alone, then hb_from_leader + __reduce_add_sync), for the plain / barrier / checked builds of
#              hb_from_leader and of the group's mask (~1-3 min): hangs and wrong values per build, and the cycles
#              each costs
#   checked    helpers built with -DHBF_LEADER_CHECKED=1 (the shuffle's mask OR-ed with %lanemask_eq: ptxas checks
#              each lane's own mask before its plain SHFL instead of one lane's mask read into a uniform register;
#              the explanation of the stall in runtime_cuda/src/hbf_ptx.cuh); if it ends, make it the default
#   group      helpers built with -DHBF_GROUP_CHECKED=1 (the same check for every collective of the helpers: the
#              group's mask OR-ed with %lanemask_eq where each helper takes it)
#   barrier    helpers built with -DHBF_LEADER_BARRIER=1 (a warp barrier, in a function of its own, before every
#              shuffle of a leader's result: runtime_cuda/src/hbf_ptx.cuh hb_from_leader); if it ends, make it the
#              default
#   lockstep   helpers built with -DHBF_FAST_LOCKSTEP=1 (the compact path's page transaction run by every lane of the
#              group in lockstep, the leader's memory operations broadcast: no lane waits while the leader loops)
#   nofast     helpers built with -DHBF_FAST_ISSUE=0 (no compact path: every issue goes to hb_issue_slow)
#   lean       the lean helper build (hb_fast_model a real call: runtime_cuda/ptx/hbf_helpers_lean.ptx)
#   b1         batch 1, the default helpers
#   default    the default helpers (stalled twice in stop 45: the control, last)
# Run in stop 47 (docs/RESULTS.md "Stop 47"): checked, group, barrier and lockstep ended, default stalled (nofast,
# lean, b1 not reached). Since then the default is checked: the other builds here name -DHBF_LEADER_CHECKED=0, as
# they ran. The helper builds are made here with nvcc (as setup.py's helper-ptx does). One tar under $OUT ($OUT/s46.tgz).
#   LIMIT=570 bash bench/gpu_calls/stop46_sg2hang.sh     (carry: hbfproto, runtime_cuda/ptx, .whl)
set -u
source bench/gpu_calls/env.sh
W=/tmp/s46; mkdir -p $W/ptx; TAR=s46.tgz
source bench/gpu_calls/qwen_go.sh
python3 -m hbfd.warmup 2>&1 | tail -1
build() {   # name, -D...
  # shellcheck disable=SC2086
  nvcc -std=c++17 -O3 -arch=compute_90a -rdc=true -ptx -Iruntime_cuda/include $2 runtime_cuda/src/hbf_helpers.cu \
      -o $W/ptx/hbf_helpers_$1.ptx && sed -i 's/^\.visible \.func/.weak .func/' $W/ptx/hbf_helpers_$1.ptx
  echo "$1 build rc=$? (bar.warp.sync: $(grep -c 'bar.warp.sync' $W/ptx/hbf_helpers_$1.ptx), lanemask_eq: $(grep -c 'lanemask_eq' $W/ptx/hbf_helpers_$1.ptx))"
}
timeout 240 python3 bench/warp_groups.py --out $W/warp_groups.json 2>&1 | tail -12; pack
echo "== [$(left)s left] warp_groups done"
build checked -DHBF_LEADER_CHECKED=1
build group "-DHBF_GROUP_CHECKED=1 -DHBF_LEADER_CHECKED=0"
build barrier "-DHBF_LEADER_BARRIER=1 -DHBF_LEADER_CHECKED=0"
build lockstep "-DHBF_FAST_LOCKSTEP=1 -DHBF_LEADER_CHECKED=0"
build nofast "-DHBF_FAST_ISSUE=0 -DHBF_LEADER_CHECKED=0"
Q="--model qwen3-30b-a3b --tokens 2 --prompt 1 --profile ocp-sg2"
export STALL_S=25
# shellcheck disable=SC2086
go checked 150 HBFCC_HELPER_PTX=$W/ptx/hbf_helpers_checked.ptx -- $Q --batch 8
# shellcheck disable=SC2086
go group 150 HBFCC_HELPER_PTX=$W/ptx/hbf_helpers_group.ptx -- $Q --batch 8
# shellcheck disable=SC2086
go barrier 150 HBFCC_HELPER_PTX=$W/ptx/hbf_helpers_barrier.ptx -- $Q --batch 8
# shellcheck disable=SC2086
go lockstep 150 HBFCC_HELPER_PTX=$W/ptx/hbf_helpers_lockstep.ptx -- $Q --batch 8
# shellcheck disable=SC2086
go nofast 150 HBFCC_HELPER_PTX=$W/ptx/hbf_helpers_nofast.ptx -- $Q --batch 8
# shellcheck disable=SC2086
go lean 150 HBFCC_HELPER_PTX=$PWD/runtime_cuda/ptx/hbf_helpers_lean.ptx -- $Q --batch 8
# shellcheck disable=SC2086
go b1 150 HBF_DUMMY=0 -- $Q --batch 1
# shellcheck disable=SC2086
go default 150 HBF_DUMMY=0 -- $Q --batch 8
echo "== done [$(left)s left]"
