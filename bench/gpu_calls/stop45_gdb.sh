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
W=/tmp/gd; mkdir -p $W
pack() { tar czf $OUT/gdb.tgz -C $W --exclude=cache --exclude=out . 2>/dev/null; }
GDB=$(command -v cuda-gdb || ls /usr/local/cuda*/bin/cuda-gdb 2>/dev/null | head -1)
echo "cuda-gdb: ${GDB:-none}"; [ -n "$GDB" ] && $GDB --version 2>&1 | head -1
python3 -m hbfd.warmup 2>&1 | tail -1
go() {   # name, wait-for-stall limit, env..., -- args...
  local name=$1 lim=$2; shift 2
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local D=$W/$name; mkdir -p $D/out/work
  env HBF_STALL_WARN_S=${STALL_S:-8} "${envs[@]}" python3 -m workloads.qwen3moe run --out $D/out --cache $W/cache "$@" \
      > $D/log.txt 2>&1 &
  local pid=$! t=0
  while [ $t -lt $lim ]; do
    sleep 2; t=$((t + 2))
    grep -q "no progress" $D/log.txt && break
    kill -0 $pid 2>/dev/null || break
  done
  echo "== [$(left)s left] $name: stall line after ${t}s: $(grep -c 'no progress' $D/log.txt)"
  grep -E "ms/step|instrumented batch|Error|error" $D/log.txt | grep -v "not admitted" | tail -4 | cut -c1-700
  if kill -0 $pid 2>/dev/null && grep -q "no progress" $D/log.txt && [ -n "$GDB" ]; then
    nvidia-smi --query-gpu=utilization.gpu,power.draw --format=csv,noheader > $D/nvidia_smi.txt 2>&1
    timeout 200 $GDB -p $pid -batch -x bench/gpu_calls/gdb_where.py > $D/gdb.txt 2>&1
    echo "cuda-gdb rc=$? ($(wc -l < $D/gdb.txt) lines)"
    grep -E "^== |^<|No symbol|in section|Kernel|error|Error" $D/gdb.txt | head -60 | cut -c1-250
  fi
  kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  # the stalled kernels' cubins (Triton's cache under --cache): their SASS maps the PCs above to the helper's code
  for k in $(grep -o "in [a-z_0-9]*_hbf<<<" $D/gdb.txt 2>/dev/null | sort -u | sed 's/in //; s/<<<//'); do
    find $W/cache -name "$k.cubin" -exec cp {} $D/ \; 2>/dev/null
  done
  cp $D/out/work/hbfd.log $D/ 2>/dev/null
  pkill -9 -f "hbfd.cli" 2>/dev/null
  pack
}
# shellcheck disable=SC2086
go ${NAME:-nom_b1} ${WAIT_S:-150} HBF_DUMMY=0 -- \
    ${QARGS:---model qwen3-30b-a3b --layers 2 --tokens 1 --prompt 1 --batch 1 --profile nominal}
cp $W/*/out/*.json $OUT/ 2>/dev/null
echo "== done [$(left)s left]"
