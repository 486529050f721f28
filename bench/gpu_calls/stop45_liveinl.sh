#!/bin/bash
# one call (~2-3 min): issue 17 item 2 for the INLINE issue path (helper ABI 7, docs/design.md §3.1/§3.3,
# docs/RESULTS.md "Issue 17: inline requests in the live activity (CPU)"). bench/live_inline.py builds one persistent
# FIXED-source grid-stride kernel (one block per SM, 64 MiB registered, every load waited) twice with hbfcc as nvcc --
# HBFCC_INLINE_LIVE=0 (the code of before: inline counters reach the shards at thread exit only) and =1 (the default:
# flushed at every until point) -- and runs both under one hbfd, sampling the control region's live activity from host
# memory every ~5 ms. What to look for: off -- live load requests flat (<= 5 %) until the kernel ends; on -- >= 30 %
# of the kernel's load requests already published at half its busy time; both -- inline_requests ~ load requests.
# Needs the ABI 7 helpers: carry runtime_cuda/ptx rebuilt by `make helpers-ptx` (__hb_inline_until_live).
# ONE tar under $OUT (li.tgz), rewritten after every part.
set -u
source bench/gpu_calls/env.sh
python3 -m hbfd.warmup 2>&1 | tail -1
grep -q '__hb_inline_until_live' runtime_cuda/ptx/hbf_helpers.ptx || { echo "runtime_cuda/ptx is not the ABI 7 build (make helpers-ptx)"; exit 3; }
W=/tmp/li; mkdir -p $W
# part 1: 2 us per read, ~3 s modeled per kernel (the two builds ~10 s; each kernel ~3-4 s)
L=$(left)
if [ $L -gt 120 ]; then
  echo "== [${L}s left] live_inline 2 us x 3 s"
  timeout $(( L - 60 > 240 ? 240 : L - 60 )) python3 bench/live_inline.py --out $W/r2us --work /tmp/liw \
      --read-ns 2000 --target-s 3 > $W/r2us.log 2>&1; echo "live_inline 2us rc=$?"
  tail -4 $W/r2us.log | cut -c1-400
  tar czf $OUT/li.tgz -C $W .
else
  echo "live_inline 2us skipped: ${L}s left"
fi
# part 2 (if time is left): 20 us per read (fewer, longer waits: the until points come from the lanes' asks, not
# the accesses), built again (~10 s)
L=$(left)
if [ $L -gt 120 ]; then
  echo "== [${L}s left] live_inline 20 us x 4 s"
  timeout $(( L - 40 > 200 ? 200 : L - 40 )) python3 bench/live_inline.py --out $W/r20us --work /tmp/liw20 \
      --read-ns 20000 --target-s 4 > $W/r20us.log 2>&1; echo "live_inline 20us rc=$?"
  tail -4 $W/r20us.log | cut -c1-400
else
  echo "live_inline 20us skipped: ${L}s left"
fi
tar czf $OUT/li.tgz -C $W .
echo "== done [$(left)s left]"
