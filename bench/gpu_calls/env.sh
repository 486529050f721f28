# sourced by every call here: the wheels the device lacks (.whl/, docs/gpu-runbook.md) into /tmp/site, the tree on
# PYTHONPATH, unbuffered output, and the card named first
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD || exit 3
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv,noheader
