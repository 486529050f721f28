#!/bin/bash
# one call (~9 min) when device time is short: stop50_gnat.sh (native entries in graphs, LIMIT 330: run1 and most of
# run2), then stop50_cost.sh without devpath_cost (DC=0: the gate's host cost with the real driver against the session
# before the per-range allocation cache, and bench/alloc_partition.py). Two tars under $OUT (s50g.tgz, s50c.tgz).
set -u
LIMIT=330 bash bench/gpu_calls/stop50_gnat.sh
DC=0 LIMIT=${REST:-190} bash bench/gpu_calls/stop50_cost.sh
