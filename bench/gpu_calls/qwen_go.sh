# sourced by the Qwen3 stall calls (stop45_gdb.sh, stop46_sg2hang.sh), after env.sh: `go NAME WAIT_S ENV... -- ARGS...`
# runs `python3 -m workloads.qwen3moe run ARGS` in the background with the stall watch (HBF_STALL_WARN_S=$STALL_S,
# default 8) and its own Triton/hbfcc cache ($W/cache_NAME: a cache key does not name the helper PTX), waits until it
# ends, prints the stall line, or WAIT_S passes; on a stall it attaches cuda-gdb (bench/gpu_calls/gdb_where.py: every
# GPU thread's PC, grouped, with symbol, backtrace, lanes and registers) and keeps the stalled kernels' cubins; then
# it kills the run and hbfd and rewrites the one tar $OUT/$TAR from $W (without caches and run folders).
GDB=$(command -v cuda-gdb || ls /usr/local/cuda*/bin/cuda-gdb 2>/dev/null | head -1)
pack() { tar czf "$OUT/$TAR" -C "$W" --exclude="cache*" --exclude=out --exclude=ptx . 2>/dev/null; }
go() {   # name, wait-for-stall limit, env..., -- args...
  local name=$1 lim=$2; shift 2
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local L=$(left); [ "$L" -lt $((lim + 20)) ] && { echo "$name skipped: ${L}s left"; return; }
  local D=$W/$name; mkdir -p $D/out/work
  env HBF_STALL_WARN_S=${STALL_S:-8} "${envs[@]}" python3 -m workloads.qwen3moe run --out $D/out --cache $W/cache_$name \
      "$@" > $D/log.txt 2>&1 &
  local pid=$! t=0
  while [ $t -lt $lim ]; do
    sleep 2; t=$((t + 2))
    grep -q "no progress" $D/log.txt && break
    kill -0 $pid 2>/dev/null || break
  done
  local ended=no; kill -0 $pid 2>/dev/null || { wait $pid; ended="rc=$?"; }
  echo "== [$(left)s left] $name: after ${t}s: ended $ended, stall lines $(grep -c 'no progress' $D/log.txt)"
  grep -E "ms/step|instrumented batch|Error|error" $D/log.txt | grep -v "not admitted" | tail -4 | cut -c1-700
  if kill -0 $pid 2>/dev/null && grep -q "no progress" $D/log.txt && [ -n "$GDB" ]; then
    nvidia-smi --query-gpu=utilization.gpu,power.draw --format=csv,noheader > $D/nvidia_smi.txt 2>&1
    timeout 200 $GDB -p $pid -batch -x bench/gpu_calls/gdb_where.py > $D/gdb.txt 2>&1
    echo "cuda-gdb rc=$? ($(wc -l < $D/gdb.txt) lines)"
    grep -E "^== |^<|No symbol|in section|Kernel|error|Error" $D/gdb.txt | head -40 | cut -c1-250
    for k in $(grep -o "in [a-z_0-9]*_hbf<<<" $D/gdb.txt 2>/dev/null | sort -u | sed 's/in //; s/<<<//'); do
      find $W/cache_$name -name "$k.cubin" -exec cp {} $D/ \; 2>/dev/null
    done
  fi
  kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  cp $D/out/*.json $D/ 2>/dev/null; cp $D/out/work/hbfd.log $D/ 2>/dev/null
  pkill -9 -f "hbfd.cli" 2>/dev/null
  pack
}
