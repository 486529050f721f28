#!/bin/bash
# one call (LIMIT=420; carry hbfproto, runtime_cuda/ptx, .whl), two questions of stop 52 in priority order:
#   1. issue 13: HBFCC_SHARE_UNTIL (default 1; one until ask serves loads and stores) against HBFCC_SHARE_UNTIL=0 (the
#      build of before: stop 52's ncu found 2.25 asks per warp in the stream reduce, the asks and their flushes 26 % of
#      its instructions): bench/devpath_cost.py stream_reduce, stream_copy, little_e65536_b8192, each variant in its own
#      --work dir (fresh caches), side by side on this machine;
#   2. issue 18: stop52_jit.sh's part A (capi_sample --jit: the HBFCC_JIT=1 build's first load, native and modeled
#      runs identical) when >= 150 s are left.
# ONE tar under $OUT (s52s.tgz), rewritten after every step.
set -u
source bench/gpu_calls/env.sh
# a fresh machine compiles hbfd's numba twins for ~150 s in the warm-up: WARMUP=0 skips it and runs hbfd's numpy
# engine instead (HBFD_ACCEL=off; the fixed and fast sources serve these kernels on the device)
if [ "${WARMUP:-1}" = 1 ]; then python3 -m hbfd.warmup 2>&1 | tail -1; else export HBFD_ACCEL=off; fi
W=/tmp/s52s; rm -rf $W; mkdir -p $W
pack() { tar czf $OUT/s52s.tgz -C $W --exclude=capi . 2>/dev/null; }
# VARIANTS (default "share noshare"): share = the default build, noshare = HBFCC_SHARE_UNTIL=0, lf = HBFCC_LOADS_FIRST=1
# (a group's loads before its timing code: registers unchanged on reduce/copy on the CPU, more on sreduce and the
# one-round Little kernels), e.g. VARIANTS="share lf" JIT=0 for the loads-first A/B alone
for v in ${VARIANTS:-share noshare}; do
  case $v in
    share) E=(HBFCC_SHARE_UNTIL=1);;
    noshare) E=(HBFCC_SHARE_UNTIL=0);;
    lf) E=(HBFCC_LOADS_FIRST=1);;
    *) echo "unknown variant $v"; continue;;
  esac
  L=$(left); T=$(( L - 20 < 110 ? L - 20 : 110 ))
  [ $T -lt 70 ] && { echo "$v skipped: ${L}s left" | tee -a $W/share.txt; continue; }
  WK=/tmp/s52s_work_$v; rm -rf $WK
  echo "== [${L}s left] $v: ${E[*]} (timeout ${T}s)"
  env "${E[@]}" timeout $T python3 bench/devpath_cost.py --out $W/$v --work $WK \
      --parts stream_reduce,stream_copy,little_e65536_b8192 --launch-timeout 10 --budget-s $(( T - 25 )) > $W/$v.log 2>&1
  echo "$v rc=$?"
  python3 - $v $W/$v/devpath_cost.json <<'PY' 2>&1 | tee -a $W/share.txt
import json, sys
v, path = sys.argv[1], sys.argv[2]
try:
    d = json.load(open(path))
except Exception as e:
    print(f"{v}: no result ({type(e).__name__}: {e})"); sys.exit(0)
for name, p in (d.get("parts") or {}).items():
    if name.startswith("stream_"):
        kh = p.get("kernel_hbf") or {}
        pa = ((p.get("pairs") or {}).get("pair_ratio") or {})
        print(f"  {v:8s} {name:15s} {str(p.get('status')):8s} x{pa.get('median') or 0:5.3f} (p10 {pa.get('p10')}, p90 "
              f"{pa.get('p90')}) regs {kh.get('n_regs')} blocks/SM {kh.get('blocks_per_sm')} identical {p.get('identical')}")
    else:
        print(f"  {v:8s} {name:15s} {str(p.get('status')):8s} {str(p.get('detail') or p.get('error') or '')[:200]}")
for k, x in (d.get("summary") or {}).items():
    if k.startswith("little"):
        print(f"  {v:8s} {k}: {json.dumps(x, default=str)[:240]}")
PY
  pack
done
L=$(left)
if [ "${JIT:-1}" = 1 ] && [ $L -ge 150 ]; then
  echo "== [${L}s left] capi_sample --jit (timeout $(( L - 15 ))s)"
  timeout $(( L - 15 )) python3 bench/capi_sample.py --jit --profile ocp-sg1 --n 262144 --iters 1 --reps 3 \
      --run-timeout 40 --work $W/capi --out $W/capi_jit.json > $W/capi_jit.log 2>&1
  echo "capi rc=$?"; tail -8 $W/capi_jit.log | cut -c1-400
  python3 -c "
import json,sys
try: r=json.load(open('$W/capi_jit.json'))
except Exception as e: print('no result', e); sys.exit(0)
for k in ('ok','identical_native','identical_modeled','bind','build_s','jit','jit_load','times_ms'):
    if k in r: print(' ', k, json.dumps(r[k], default=str)[:700])"
  pack
else
  echo "capi --jit skipped: ${L}s left"
fi
pack
echo "== done [$(left)s left]"
