#!/bin/bash
# Whole-program builds through hbfcc-ptxas of one source tree, for a byte comparison of two trees' cubins
# (docs/RESULTS.md, "Issue 18: -rdc kernels within their register caps").
# usage: bench/rdc_identity.sh SRC_ROOT OUTDIR   (then: for c in A/*.cubin; do cmp $c B/$(basename $c); done)
# The fixtures and the helper PTX come from this script's tree (HELPER= to choose another helper), the hbfcc
# code from SRC_ROOT; nvcc/ptxas from PATH; the Python from HBF_PYTHON (default: python3).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
out=$2
mkdir -p "$out/ptx"
export PYTHONPATH=$1 HBFCC_CACHE_DIR=$out/cache HBFCC_ARTIFACT_DIR=$out/store
export HBFCC_HELPER_PTX=${HELPER:-$here/runtime_cuda/ptx/hbf_helpers.ptx}
py=${HBF_PYTHON:-python3}
for f in "$here"/tests/fixtures/cuda/*.cu; do
  b=$(basename "$f" .cu)
  nvcc -arch=sm_90a -ptx "$f" -o "$out/ptx/$b.ptx" 2>/dev/null || echo "nvcc failed: $b"
done
for p in "$out"/ptx/*.ptx "$here"/tests/fixtures/triton/*.ptx; do
  b=$(basename "$p" .ptx)
  "$py" -m hbfcc.cli ptxas -arch=sm_90a "$p" -o "$out/$b.cubin" >/dev/null 2>"$out/$b.err" || echo "FAIL $b"
done
