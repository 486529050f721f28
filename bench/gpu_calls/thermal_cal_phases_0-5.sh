#!/bin/bash
set -u
source bench/gpu_calls/env.sh
timeout 575 python3 bench/thermal_calibrate.py --record $OUT/rec --phases 0-5 --no-fit 2>&1 | tail -40
echo rc=${PIPESTATUS[0]}
