#!/bin/bash
# one call (~4-6 min; LIMIT=570): HBFCC_JIT=1 builds (wt/jit18, issue 18 item 3: cheap builds) on the card. hbfcc's nvcc
# wrapper builds every real target sm_XX as its virtual compute_XX: the object embeds the REWRITTEN PTX only (no SASS;
# the build costs ~plain: docs/RESULTS.md "wt/jit18"), the launch bound decided as in an SASS build, and the CUDA driver
# JIT-compiles the PTX when the program loads the module (its compute cache keeps the machine code). Not yet run on a GPU:
# does a JIT build run modeled, bit-identical, and what does the first load cost?
#   A. bench/capi_sample.py --jit: the cudart <<<>>> sample (3 kernels, two timing ranges) built through hbfcc's CMake
#      integration with HBFCC_JIT=1 (plain nvcc beside it); runs: plain, hbfcc native, hbfcc modeled (ocp-sg1, the fast
#      device source, n = 256 Ki, 1 iteration, 3 reps); before them the JIT build's native run on an EMPTY
#      CUDA_CACHE_PATH (the first load: the driver's JIT), twice more on the filled cache, the plain build beside them.
#      Printed: ok, outputs identical (native, modeled, first-load run), bind (3 kernels admitted), first-load vs cached
#      process wall time (jit_cost_ns), the compute cache's size, the program's ELF/PTX images (cuobjdump).
#   B. bench/hbfcc_identity.py --jit: the identity program (vector/scalar/predicated/generic/volatile/acquire-release/
#      atomics/cp.async/pointer chasing) built with HBFCC_JIT=1, run unbound on an empty compute cache: outputs
#      bit-identical to the plain build's, per-kernel time ratios.
#   C. (if >= 150 s are left) A again WITHOUT --jit (the eager SASS build, same sizes, --reuse-build keeps plain):
#      the modeled times of the two builds side by side (the same machine code is expected: same ptxas generation).
# Everything in ONE tar under $OUT (s52j.tgz), rewritten after each part. Carry: hbfproto, runtime_cuda/ptx, .whl.
#   LIMIT=570 bash bench/gpu_calls/stop52_jit.sh
set -u
source bench/gpu_calls/env.sh
python3 -m hbfd.warmup 2>&1 | tail -1
W=/tmp/s52j
mkdir -p $W
pack() { tar czf $OUT/s52j.tgz -C $W --exclude=capi --exclude=capi_eager . 2>/dev/null; }
show() {   # the result JSON's verdicts, one screen
python3 - "$1" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    print("  no result:", e); sys.exit(0)
keys = ("ok", "identical_native", "identical_modeled", "bind", "build_s", "jit", "jit_load", "times_ms",
        "counters_median", "identical_all", "instrumented_all", "nvcc", "nvcc_build_s_hbfcc", "hbf_run_wall_ns")
for k in keys:
    if k in r:
        v = r[k]
        if k == "times_ms":
            v = {n: round(x["median"], 4) for n, x in v.items()}
        if k == "nvcc" and isinstance(v, dict):
            v = {"identical": v.get("identical"), "error": v.get("error"),
                 "ratios": {n: round(x["ratio"], 3) for n, x in v.get("kernel_ms_median", {}).items()}}
        print(f"  {k}: {json.dumps(v, default=str)[:900]}")
PY
}

L=$(left)
if [ $L -gt 120 ]; then
  T=$(( L - 150 < 300 ? L - 150 : 300 )); [ $T -lt 120 ] && T=$(( L - 20 ))
  echo "== [${L}s left] A: capi_sample --jit (timeout ${T}s)"
  timeout $T python3 bench/capi_sample.py --jit --profile ocp-sg1 --n 262144 --iters 1 --reps 3 --run-timeout 40 \
      --work $W/capi --out $W/capi_jit.json > $W/capi_jit.log 2>&1
  echo "A rc=$?"; show $W/capi_jit.json; tail -5 $W/capi_jit.log | cut -c1-400
  mv $W/capi_sample.summary.json $W/capi_jit.summary.json 2>/dev/null
  pack
else
  echo "A skipped: ${L}s left"
fi

L=$(left)
if [ $L -gt 90 ]; then
  echo "== [${L}s left] B: hbfcc_identity --jit"
  timeout $(( L - 20 < 200 ? L - 20 : 200 )) python3 bench/hbfcc_identity.py --jit --out $W/ident > $W/ident.log 2>&1
  echo "B rc=$?"; show $W/ident/hbfcc_identity_jit.json; tail -3 $W/ident.log | cut -c1-400
  pack
else
  echo "B skipped: ${L}s left"
fi

L=$(left)
if [ $L -gt 150 ]; then
  echo "== [${L}s left] C: capi_sample eager (the same sizes, for the modeled times side by side)"
  mkdir -p $W/capi_eager; cp -r $W/capi/plain $W/capi_eager/ 2>/dev/null
  timeout $(( L - 20 )) python3 bench/capi_sample.py --profile ocp-sg1 --n 262144 --iters 1 --reps 3 --run-timeout 40 \
      --work $W/capi_eager --reuse-build --out $W/capi_eager.json > $W/capi_eager.log 2>&1
  echo "C rc=$?"; show $W/capi_eager.json
  pack
else
  echo "C skipped: ${L}s left"
fi
pack
echo "== done [$(left)s left]"
