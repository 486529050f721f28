# sourced by every call here: the call's clock (`left`: seconds of $LIMIT, default 570, still to go), the wheels
# the device lacks (.whl/, docs/gpu-runbook.md) into /tmp/site, the tree on PYTHONPATH, unbuffered output, and the
# card named first
T0=$(date +%s); LIMIT=${LIMIT:-570}
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD || exit 3
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv,noheader
