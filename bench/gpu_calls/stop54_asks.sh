#!/bin/bash
# one call (~2 min, LIMIT=200; carry hbfproto, runtime_cuda/ptx, .whl): issue 13's open question of stop 53 -- the
# stream reduce's threads ask `__hb_inline_until` 2.2 times in ~10 us lives although every answer path reads as
# >= 0.5 ms (docs/design.md "Where each stands after stop 53"). Builds the helpers with -DHB_DEBUG_ASKS (each ask in
# one 1 us slot of 512 prints `hb-ask sm= op= now= ret= in=` from the asking group's lowest lane; the debug build costs
# the reduce ~5 registers, 128 -> 133 on the CPU) and runs devpath_cost's stream_reduce and little_e65536_b8192 with
# it (HBFCC_HELPER_PTX / HBF_HELPER_PTX), then summarizes the answers: how many, how many negative ("ask again at"),
# the distribution of ret - now for the positive ones, per SM. Everything under $OUT/asks (log, asks.json).
set -u
source bench/gpu_calls/env.sh
export HBFD_ACCEL=off
W=/tmp/asks; rm -rf $W; mkdir -p $W $OUT/asks
HBF_HELPER_NVCC_FLAGS=-DHB_DEBUG_ASKS python3 setup.py helper-ptx direct $W/hbf_helpers.ptx || exit 4
L=$(left); T=$(( L - 25 < 150 ? L - 25 : 150 ))
echo "== [${L}s left] devpath_cost stream_reduce, little_e65536_b8192 with the debug helpers (timeout ${T}s)"
HBFCC_HELPER_PTX=$W/hbf_helpers.ptx HBF_HELPER_PTX=$W/hbf_helpers.ptx timeout $T python3 bench/devpath_cost.py \
    --out $W/dc --work $W/work --parts stream_reduce,little_e65536_b8192 --launch-timeout 10 --budget-s $(( T - 20 )) \
    > $W/log.txt 2>&1
echo "rc=$?"; grep -v "^hb-ask" $W/log.txt | tail -5 | cut -c1-300
python3 - $W/log.txt $OUT/asks/asks.json <<'PY'
import json, re, sys
import numpy as np
rows = [tuple(int(x) for x in m.groups()) for m in
        re.finditer(r"^hb-ask sm=(\d+) op=(\d+) now=(\d+) ret=(-?\d+) in=(-?\d+)$", open(sys.argv[1]).read(), re.M)]
out = {"asks_printed": len(rows), "what": "asks of __hb_inline_until in one 1 us slot of 512 (HB_DEBUG_ASKS build)"}
if rows:
    a = np.array(rows, dtype=np.int64)
    pos = a[a[:, 4] > 0, 4]
    out.update({"negative": int((a[:, 3] < 0).sum()), "positive": int(pos.size),
                "in_ns_quantiles": {q: int(np.quantile(pos, q / 100)) for q in (1, 10, 50, 90, 99)} if pos.size else {},
                "in_ns_under_20us": int((pos < 20_000).sum()), "sms": int(np.unique(a[:, 0]).size),
                "first_rows": rows[:20]})
json.dump(out, open(sys.argv[2], "w"), indent=1)
print(json.dumps({k: v for k, v in out.items() if k != "first_rows"}))
PY
cp $W/log.txt $OUT/asks/ 2>/dev/null; cp -r $W/dc $OUT/asks/ 2>/dev/null
echo "== done [$(left)s left]"
