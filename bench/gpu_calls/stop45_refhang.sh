#!/bin/bash
# one call (stop 45): the Qwen3-30B-A3B run under the nominal profile (the REFERENCE timing source) that did not end
# in stop 44 (docs/RESULTS.md "Stop 44", "Issue 13: the reference source's Qwen3 hang (CPU)"), told apart: a hang or
# a slow run, and if a hang, whose. Every run has a sidecar (bench/ring_watch.py) that samples, every second, the
# reference ring from host memory (tickets published, answered by hbfd, published-not-answered,
# answered-not-consumed, the failure words, the heartbeat), the GPU's live activity and the published thermal
# horizon, and hbfd's own counters (GetSummary: ring_service, foreign/rejected requests, deferred pages, the
# heartbeat's longest gap, the horizon's statistics); at the end it prints a verdict (moving / still + whose move).
# The session's stall watch (HBF_STALL_WARN_S=10) now reads the ring too and says which stood still.
# 14 s before a run's limit the GPU's utilization and power are sampled (nvidia-smi: spinning warps keep it busy);
# 12 s before it, hbfd's live summary is taken over RPC and hbfd is sent SIGABRT with
# PYTHONFAULTHANDLER=1 (its threads' stacks go to its log: is its ring thread inside the engine?).
#
# Parts, in order (each skipped when LIMIT has too little left):
#   host      bench/ring_moe.py on this host (CPU only, ~20 s): hbfd with this machine's compiled engine twins, driven
#             natively in moe_gate_up's ticket pattern (b1 and b8 shapes): must end (it does on the CPU box)
#   nom_b1    the failing case, 100 s (stop 44: did not end in 70 s; at the measured rate it needs <= 4 s after its
#             compile), the sidecar's verdict says slow or stuck, and whose move
#   tmo20     the same with HBF_COMPLETION_TIMEOUT_NS=20 s: a slot wait or completion poll pending 20 s records
#             TIMEOUT with its site and address (slot wait: the access address; poll: the ticket) and every warp
#             waiting in a helper ends: the run then ends with a DeviceFailure naming the first one -- or, if it still
#             does not end, warps wait outside the helpers
#   no_hzn    without the thermal validity horizon (HBFD_THERMAL_HORIZON=0: the device refreshes its snapshot every
#             1 ms, as before stop 43; the reference path never ran on a card with the horizon)
#   eng_fixed hbfd's fixed-latency engine (HBFD_ENGINE=fixed): is it the media engine?
#   age0      HBF_THERMAL_MAX_AGE_NS=0: no device snapshot cache at all (every request reads the host snapshot: no
#             claims, no horizon branch)
#   no_accel  the media engine without its compiled twins (HBFD_ACCEL=off)
#   nom_b8    batch 8, if time is left
# Everything goes into ONE tar under $OUT ($OUT/refhang.tgz), rewritten after every part.
# PARTS="nom_b1 nom_b8" runs only the parts named (default: all; "host" is the ring_moe part).
#   LIMIT=560 bash bench/gpu_calls/stop45_refhang.sh         (carry: hbfproto, runtime_cuda/ptx, .whl)
set -u
PARTS=${PARTS:-all}
for p in $PARTS; do   # a misspelt part would run nothing and say nothing
  case $p in all|host|nom_b1|tmo20|no_hzn|eng_fixed|age0|no_accel|nom_b8) ;;
    *) echo "PARTS: unknown part '$p' (host nom_b1 tmo20 no_hzn eng_fixed age0 no_accel nom_b8)"; exit 2 ;; esac
done
want() { [ "$PARTS" = all ] || [[ " $PARTS " == *" $1 "* ]]; }
source bench/gpu_calls/env.sh
python3 -m hbfd.warmup 2>&1 | tail -1
W=/tmp/rh; mkdir -p $W
pack() { tar czf $OUT/refhang.tgz -C $W --exclude=cache --exclude=out . 2>/dev/null; }

L=$(left)
if want host && [ $L -gt 200 ]; then
  timeout 90 python3 bench/ring_moe.py --shapes b1 b8 --engines auto --limit-s 60 --out $W/ring_moe_host.json \
      > $W/ring_moe_host.log 2>&1
  echo "== [$(left)s left] host ring_moe rc=$?"; tail -2 $W/ring_moe_host.log | cut -c1-300
  pack
fi

run() {   # name, limit, env..., -- args...
  local name=$1 lim=$2; shift 2
  want $name || return 0
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local L=$(left); [ $L -lt $((lim + 25)) ] && { echo "$name skipped: ${L}s left"; return; }
  local D=$W/$name; mkdir -p $D/out/work
  local sock=$D/out/work/hbfd.sock
  python3 bench/ring_watch.py --socket $sock --out $D/ring_watch.jsonl --wait-s $lim --duration $((lim + 5)) \
      > $D/ring_watch_verdict.json 2> $D/ring_watch.err &
  local wp=$!
  ( sleep $((lim - 14))
    nvidia-smi --query-gpu=utilization.gpu,power.draw,clocks.sm,pstate --format=csv,noheader > $D/nvidia_smi.txt 2>&1
    sleep 2
    python3 -m hbfd.ctl_cli --socket $sock --json status > $D/hbfd_status.json 2>&1
    python3 -m hbfd.ctl_cli --socket $sock --json summary > $D/hbfd_summary_live.json 2>&1
    pid=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['daemon_pid'])" $D/hbfd_status.json 2>/dev/null)
    [ -n "$pid" ] && kill -ABRT $pid && echo "hbfd $pid sent SIGABRT (stacks in hbfd.log)" > $D/hbfd_abrt.txt ) &
  local snap=$!
  env HBF_STALL_WARN_S=10 PYTHONFAULTHANDLER=1 "${envs[@]}" timeout -s ABRT $lim python3 -X faulthandler \
      -m workloads.qwen3moe run --model qwen3-30b-a3b --layers 2 --tokens 1 --prompt 1 --out $D/out \
      --cache $W/cache "$@" > $D/log.txt 2>&1
  local rc=$?
  kill $snap 2>/dev/null
  sleep 2; kill $wp 2>/dev/null; wait $wp 2>/dev/null
  echo "== [$(left)s left] $name rc=$rc"
  grep -v "^  File\|^Extension\|^$\|not admitted" $D/log.txt | grep -E "ms/|no progress|Error|error|instrumented|Failure|TIMEOUT" \
      | tail -3 | cut -c1-600
  tail -1 $D/ring_watch_verdict.json | cut -c1-600
  cp $D/out/*.json $D/ 2>/dev/null; cp $D/out/work/hbfd.log $D/ 2>/dev/null
  pack
}
run nom_b1 100 HBF_DUMMY=0 -- --batch 1 --profile nominal
run tmo20 80 HBF_COMPLETION_TIMEOUT_NS=20000000000 -- --batch 1 --profile nominal
run no_hzn 70 HBFD_THERMAL_HORIZON=0 -- --batch 1 --profile nominal
run eng_fixed 70 HBFD_ENGINE=fixed -- --batch 1 --profile nominal
run age0 70 HBF_THERMAL_MAX_AGE_NS=0 -- --batch 1 --profile nominal
run no_accel 70 HBFD_ACCEL=off -- --batch 1 --profile nominal
run nom_b8 90 HBF_DUMMY=0 -- --batch 8 --profile nominal
echo "== done [$(left)s left]"
