#!/bin/bash
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 3
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv,noheader
timeout 575 python3 bench/thermal_calibrate.py --record $OUT/rec --phases 0-5 --no-fit 2>&1 | tail -40
echo rc=${PIPESTATUS[0]}
