# sourced by every call here: the call's clock (`left`: seconds of $LIMIT, default 570, still to go), the wheels
# the device lacks (.whl/, docs/gpu-runbook.md) into /tmp/site, the tree on PYTHONPATH, unbuffered output, and the
# card named first
T0=$(date +%s); LIMIT=${LIMIT:-570}
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD || exit 3
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv,noheader
# bench/tma_triton.py twice (run1, run2 under $W: the spread between runs), each given what is left of $LIMIT (at most
# 220 s; skipped under 100 s), with the flags given, its log's result lines shown and $W packed into $OUT/$TGZ after
# each (stop 50 on; stops 45-49 spell it out): W=/tmp/x TGZ=x.tgz tma_runs --graph-native --no-graph
tma_runs() {
  local name L T
  mkdir -p $W/run1 $W/run2
  for name in run1 run2; do
    L=$(left); [ $L -lt 100 ] && { echo "$name skipped: ${L}s left"; continue; }
    echo "== [${L}s left] tma_triton $* $name"
    T=$(( L - 20 < 220 ? L - 20 : 220 ))
    timeout $T python3 bench/tma_triton.py "$@" --out $W/$name --budget-s $(( T - 60 )) --case-timeout 120 \
        > $W/$name/log.txt 2>&1
    echo "$name rc=$?"; grep -E "ok=|native cost|HBF_GRAPH_NATIVE" $W/$name/log.txt | tail -7 | cut -c1-600
    tar czf $OUT/$TGZ -C $W . 2>/dev/null
  done
}
