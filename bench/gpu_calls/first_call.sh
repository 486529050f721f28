#!/bin/bash
# the session's first call when the kind is not known in advance: on an H200 the thermal calibration's first half
# (issue 17), anything else stop51_any.sh (the merge13b check, the device path's cost with and without the inline timer) -- both
# need only the usual carry. THERMAL=0: stop51_any.sh on an H200 too (when the session cannot afford both thermal
# calls, ~1,200 s of device time)
set -u
if [ "${THERMAL:-1}" = 1 ] && nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  echo "== H200: thermal_cal_phases_0-5"; bash bench/gpu_calls/thermal_cal_phases_0-5.sh
else
  echo "== not an H200: stop51_any.sh"; LIMIT=${LIMIT:-560} bash bench/gpu_calls/stop51_any.sh
fi
