#!/bin/bash
# one call (stop 45): WHERE the warps of the reference-source Qwen3 run stand once it stops making requests.
# stop45_refhang.sh found (docs/RESULTS.md "Stop 45"): every published ticket answered and consumed, the ring idle,
# a few hundred requests of the kernel never issued, no TIMEOUT with a 20 s completion timeout, and hbfd's fixed
# engine ends. So some warps wait outside the ring's polls. This call attaches cuda-gdb to the stalled workload and
# prints every GPU thread's PC, grouped (bench/gpu_calls/gdb_where.py), with the symbol and a backtrace per PC.
#   LIMIT=400 bash bench/gpu_calls/stop45_gdb.sh     (carry: hbfproto, runtime_cuda/ptx, .whl)
# NAME, WAIT_S (how long to wait for the stall line), STALL_S (HBF_STALL_WARN_S) and QARGS (the workload's arguments
# after `run`) choose another run, e.g. the 48-layer fast-source run that did not end in stop 43:
#   NAME=sg2_48 WAIT_S=420 STALL_S=30 QARGS="--model qwen3-30b-a3b --batch 8 --tokens 2 --prompt 1 --profile ocp-sg2" \
#   LIMIT=560 bash bench/gpu_calls/stop45_gdb.sh
set -u
source bench/gpu_calls/env.sh
W=/tmp/gd; mkdir -p $W; TAR=gdb.tgz
source bench/gpu_calls/qwen_go.sh
echo "cuda-gdb: ${GDB:-none}"; [ -n "$GDB" ] && $GDB --version 2>&1 | head -1
python3 -m hbfd.warmup 2>&1 | tail -1
# shellcheck disable=SC2086
go ${NAME:-nom_b1} ${WAIT_S:-150} HBF_DUMMY=0 -- \
    ${QARGS:---model qwen3-30b-a3b --layers 2 --tokens 1 --prompt 1 --batch 1 --profile nominal}
echo "== done [$(left)s left]"
