#!/bin/bash
# one call (~2 min, LIMIT=200; carry hbfproto, runtime_cuda/ptx, .whl): issue 13's open question of stop 53 -- the
# stream reduce's threads ask `__hb_inline_until` 2.2 times in ~10 us lives although every answer path reads as
# >= 0.5 ms (docs/design.md "Where each stands after stop 53"). Builds the helpers with -DHB_DEBUG_ASKS (every ask of
# the blocks whose index is a multiple of 1024 prints `hb-ask sm= op= now= ret= in= blk= w= m=` from the asking group's
# lowest lane; the debug build costs the reduce a few registers) and runs devpath_cost's stream_reduce, consume and
# little_e65536_b8192 with it (HBFCC_HELPER_PTX / HBF_HELPER_PTX), then summarizes the answers: how many, how many
# negative ("ask again at"), the distribution of ret - now for the positive ones, and the asks per warp life (a warp's
# asks, block and warp index equal, split where 200 us pass without one: one life per launch). Under $OUT/asks.
set -u
source bench/gpu_calls/env.sh
export HBFD_ACCEL=off
W=/tmp/asks; rm -rf $W; mkdir -p $W $OUT/asks
if [ "${ONLY_FOREVER:-0}" = 0 ]; then
HBF_HELPER_NVCC_FLAGS=-DHB_DEBUG_ASKS python3 setup.py helper-ptx direct $W/hbf_helpers.ptx || exit 4
L=$(left); T=$(( L - 25 < 150 ? L - 25 : 150 ))
echo "== [${L}s left] devpath_cost stream_reduce, consume, little_e65536_b8192 with the debug helpers (timeout ${T}s)"
HBFCC_HELPER_PTX=$W/hbf_helpers.ptx HBF_HELPER_PTX=$W/hbf_helpers.ptx timeout $T python3 bench/devpath_cost.py \
    --out $W/dc --work $W/work --parts stream_reduce,consume,little_e65536_b8192 --launch-timeout 10 --budget-s $(( T - 20 )) \
    > $W/log.txt 2>&1
echo "rc=$?"; grep -v "^hb-ask" $W/log.txt | tail -5 | cut -c1-300
python3 - $W/log.txt $OUT/asks/asks.json <<'PY'
import json, re, sys
from collections import Counter, defaultdict
import numpy as np
rows = [tuple(int(x, 16) if i == 7 else int(x) for i, x in enumerate(m.groups())) for m in re.finditer(
    r"^hb-ask sm=(\d+) op=(\d+) now=(\d+) ret=(-?\d+) in=(-?\d+) blk=(\d+) w=(\d+) m=([0-9a-f]+)$",
    open(sys.argv[1]).read(), re.M)]
out = {"asks_printed": len(rows),
       "what": "every ask of __hb_inline_until from blocks whose index is a multiple of 1024 (HB_DEBUG_ASKS build)"}
if rows:
    a = np.array(rows, dtype=np.int64)
    pos = a[a[:, 4] > 0, 4]
    out.update({"negative": int((a[:, 3] < 0).sum()), "positive": int(pos.size),
                "negative_values_first": [int(v) for v in a[a[:, 3] < 0, 3][:10]],
                "in_ns_quantiles": {q: int(np.quantile(pos, q / 100)) for q in (1, 10, 50, 90, 99)} if pos.size else {},
                "in_ns_under_20us": int((pos < 20_000).sum()), "sms": int(np.unique(a[:, 0]).size),
                "masks": dict(Counter(f"{m:x}" for m in a[:, 7]).most_common(5))})
    lives = defaultdict(list)                      # (blk, warp) -> ask times; split into lives at 200 us gaps
    for r in rows:
        lives[(r[5], r[6])].append((r[2], r[3]))
    per_life, gaps, until_left = [], [], []
    for k, v in lives.items():
        v.sort()
        life = [v[0]]
        for x in v[1:]:
            if x[0] - life[-1][0] > 200_000:
                per_life.append(len(life)); life = [x]
            else:
                gaps.append(x[0] - life[-1][0])
                until_left.append(life[-1][1] - x[0])   # the previous answer, less this ask's time
                life.append(x)
        per_life.append(len(life))
    out["asks_per_warp_life"] = dict(sorted(Counter(per_life).items()))
    if gaps:
        out["reask_gap_ns_quantiles"] = {q: int(np.quantile(gaps, q / 100)) for q in (1, 10, 50, 90, 99)}
        out["reask_previous_answer_minus_now_ns_quantiles"] = {q: int(np.quantile(until_left, q / 100))
                                                               for q in (1, 10, 50, 90, 99)}
    out["first_rows"] = rows[:40]
json.dump(out, open(sys.argv[2], "w"), indent=1)
print(json.dumps({k: v for k, v in out.items() if k != "first_rows"}))
PY
cp $W/log.txt $OUT/asks/ 2>/dev/null; cp -r $W/dc $OUT/asks/ 2>/dev/null
echo "== [$(left)s left] load_wait_probe (.cg and plain loads)"
mkdir -p /tmp/lwp && nvcc -arch=sm_90a -O3 -o /tmp/lwp/lwp bench/probes/load_wait_probe.cu && \
    timeout 60 /tmp/lwp/lwp 2>&1 | tee $OUT/asks/load_wait_probe.txt
fi   # ONLY_FOREVER
if [ "${FOREVER:-1}" = 1 ]; then
L=$(left); T=$(( L - 40 < 120 ? L - 40 : 120 ))
if [ $T -ge 60 ]; then  # FOREVER=0 skips this part
  echo "== [${L}s left] the re-asks' cost: stream_reduce and consume, package helpers vs -DHB_DEBUG_UNTIL_FOREVER (${T}s)"
  HBF_HELPER_NVCC_FLAGS=-DHB_DEBUG_UNTIL_FOREVER python3 setup.py helper-ptx direct $W/forever.ptx || exit 4
  for v in pkg forever; do
    H=runtime_cuda/ptx/hbf_helpers.ptx; [ $v = forever ] && H=$W/forever.ptx
    HBFCC_HELPER_PTX=$H HBF_HELPER_PTX=$H timeout $(( T / 2 )) python3 bench/devpath_cost.py --out $W/re_$v \
        --work $W/rework_$v --parts stream_reduce,consume --launch-timeout 10 --budget-s $(( T / 2 - 15 )) \
        > $W/re_$v.log 2>&1
    echo "$v rc=$?"; python3 bench/gpu_calls/sepcap_summary.py $v $W/re_$v/devpath_cost.json
    mkdir -p $OUT/asks/re_$v; cp $W/re_$v/devpath_cost.json $W/re_$v.log $OUT/asks/re_$v/ 2>/dev/null
  done
fi
fi
echo "== done [$(left)s left]"
