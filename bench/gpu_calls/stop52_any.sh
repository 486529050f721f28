#!/bin/bash
# one call on any card (LIMIT=560; carry hbfproto, runtime_cuda/ptx, .whl), what stop 52 wants first:
#   1. issue 15: the graph diagnostic for matmul_host alone (stop51_gdiag.sh KERNELS=matmul_host, ~2.5 min): variant
#      f_const (the plain kernel + one unused 200-byte .const) against a (plain's params) says whether the native
#      entry's module constant bank is the +0.43 us per graph launch; e_plain (the function from a fresh module of the
#      plain cubin) says whether a native entry from the plain module (wt/natmod15, HBF_NATIVE_MODULE=plain) costs plain;
#   2. issue 13: ncu of today's stream kernels (stop52_ncu.sh, ~3-4 min): where reduce x1.82 / copy x1.36 go now.
# Each part's tar under $OUT (s51d.tgz, sn.tgz), rewritten after each step.
set -u
source bench/gpu_calls/env.sh
L=$(left)
if [ $L -gt 200 ]; then
  echo "== [${L}s left] stop51_gdiag.sh KERNELS=matmul_host"
  KERNELS=matmul_host LIMIT=$(( L - 250 > 150 ? 200 : L - 40 )) bash bench/gpu_calls/stop51_gdiag.sh
fi
L=$(left)
if [ $L -gt 150 ]; then
  echo "== [${L}s left] stop52_ncu.sh"
  LIMIT=$(( L - 5 )) bash bench/gpu_calls/stop52_ncu.sh
else
  echo "ncu skipped: ${L}s left"
fi
echo "== done [$(left)s left]"
