#!/bin/bash
# one call (~5 min, LIMIT=420): issue 13 item 2 with today's main (issue groups, hoisted loads, the group-synced
# helpers, the native entry): the stream, probe, consume and Little parts of bench/devpath_cost.py side by side as in
# r7-r10 (Little with 8 loads in flight was last measured before issue groups: x1.54, goal within 5 %), then the
# launch gate's host cost per launch with the real driver (wt/gate13's bench, item 3 of the stop-49 order) against
# the session before the per-range allocation cache (3f0bff0: one cuMemGetAddressRange per int argument and launch),
# and bench/alloc_partition.py: does cuMemGetAddressRange partition the address space (the cache's assumption), with
# torch's classic and expandable-segments allocators.
# Everything in ONE tar under $OUT (s50c.tgz), rewritten after every part. Carry: hbfproto, runtime_cuda/ptx, .whl.
set -u
source bench/gpu_calls/env.sh
python3 -m hbfd.warmup 2>&1 | tail -1
W=/tmp/s50c; rm -rf $W; mkdir -p $W/dc
pack() { tar czf $OUT/s50c.tgz -C $W . 2>/dev/null; }
L=$(left); T=$(( L - 90 < 260 ? L - 90 : 260 ))
if [ "${DC:-1}" = 1 ]; then      # DC=0: the gate and the partition check only
  echo "== [${L}s left] devpath_cost stream,probe,consume,little (timeout ${T}s)"
  timeout $T python3 bench/devpath_cost.py --out $W/dc --work /tmp/s50c_work --parts stream,probe,consume,little \
      --budget-s $(( T - 40 )) > $W/dc/log.txt 2>&1
  echo "devpath_cost rc=$?"; tail -25 $W/dc/log.txt | cut -c1-400
  pack
fi
L=$(left)
if [ $L -gt 60 ]; then
  echo "== [${L}s left] gate_overhead --driver-cost"
  git show 3f0bff0:runtime_cuda/session.py > /tmp/session_prev.py 2>/dev/null || cp /dev/null /tmp/session_prev.py
  BL=""; [ -s /tmp/session_prev.py ] && BL="--baseline /tmp/session_prev.py"
  timeout $(( L - 60 )) python3 bench/gate_overhead.py --driver-cost --rounds 11 --n 1000 $BL \
      --out $W/gate_overhead.json > $W/gate_log.txt 2>&1
  echo "gate rc=$?"; tail -30 $W/gate_log.txt | cut -c1-300
fi
pack
L=$(left)
if [ $L -gt 30 ]; then
  echo "== [${L}s left] alloc_partition"
  timeout $(( L - 10 )) python3 bench/alloc_partition.py --out $W/alloc_partition.json 2>&1 | tail -8
fi
pack
