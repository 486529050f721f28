#!/bin/bash
# one call (~5-6 min): the two short checks in one machine call, so they share one start: issue 17's inline counters
# in the live activity (stop45_liveinl.sh, ~2-3 min) and issue 16's MoE goal at 1 ms / 100 us per access
# (stop45_moe_gap.sh, ~1-2 min). Each keeps its own tar under $OUT (li.tgz, mg.tgz). Carry `hbfproto`,
# `runtime_cuda/ptx` (ABI 7: make helpers-ptx), `.whl`.
set -u
T00=$(date +%s); TOTAL=${LIMIT:-400}
LIMIT=$(( TOTAL - 150 )) bash bench/gpu_calls/stop45_liveinl.sh
LIMIT=$(( TOTAL - ($(date +%s) - T00) - 10 )) bash bench/gpu_calls/stop45_moe_gap.sh
