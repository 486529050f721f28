#!/bin/bash
# one call (~6-9 min, LIMIT=560): issue 13's stream cost with the helpers linked separately under the body's own cap
# (wt/sepcap13; docs/hbfcc.md "The separate link", docs/RESULTS.md "wt/sepcap13"). bench/devpath_cost.py --parts
# stream,consume,little (fixed 0 ns / 2 us / 20 us) side by side on ONE machine, each variant in a --work dir of its
# own removed before its build (fresh Triton and hbfcc caches, the helper object assembled again):
#   whole      the default whole-program build (stop 50 on an H100: reduce x1.82, copy x1.38)
#   sep_plain  HBFCC_LINK=separate HBFCC_SEPARATE_CAP=plain  (today's separate link: cap max(plain, 64))
#   sep_body   HBFCC_LINK=separate HBFCC_SEPARATE_CAP=body   (cap = the body's need with do-nothing helpers; on the
#              CPU its body still spills in the loop: the ABI calls keep what is live across them)
#   sep_body_ci  the same with HBFCC_CALL_ISOLATION=1 (nothing live across a helper call: the body does not spill
#              at its cap on the CPU; reduce 80 registers / 6 blocks per SM, whole 128 / 4, plain 41 / 10)
#   whole_ci   HBFCC_CALL_ISOLATION=1 alone (reduce 96 / 5 on the CPU) -- only when time is left
#   share / noshare: HBFCC_SHARE_UNTIL=1 / =0 (stop 52; share is today's default build); before53: LOADS_FIRST=0
#              FULL_WARP=0 (stop 52's default); lf / fw / lffw: LOADS_FIRST=all / FULL_WARP=all / both (the others 0);
#              fwall: today's default with FULL_WARP=all; lf1: today's default with LOADS_FIRST=1 (stop 54's order:
#              the loads after the group's band check, clock and until check); fwauto: HBFCC_FULL_WARP=auto (stop 54:
#              `all` per kernel where ptxas gives it no more registers); earlyclock: HBFCC_EARLY_CLOCK=1 (stop 53; its run
#              was named lateclock when the knob's default was briefly 1); pf1: HBFCC_PREFETCH_NEXT=1 (stop 55: an L2
#              prefetch of a loop's next-iteration loads on its back-edge; the default since); pf0 / pf2 / pf3:
#              HBFCC_PREFETCH_NEXT=0 / 2 / 3 (none; the next two / three iterations); pf1lf1: with HBFCC_LOADS_FIRST=1 too;
#              pg: HBFCC_PREFETCH_GROUP=1 (stop 56: an issue group prefetches its loads into L2 before its code)
#   itime      the whole build with HBFCC_INLINE_TIME=1 (the served inline paths time themselves: inline_ns; not in
#              the default list) -- VARIANTS="..." picks and orders the variants (stop51_any.sh does)
# A step that does not end in --launch-timeout (10 s) is recorded as a hang, not fatal; every variant has its own
# timeout. Per variant sepcap.txt gets: per stream kernel ratio, registers plain->hbf, blocks/SM, spills, identical,
# status, link mode and caps; consume's added ns and Little's measured/Little. Everything in ONE tar under $OUT
# (sc.tgz), rewritten after every variant. Carry: hbfproto, runtime_cuda/ptx, .whl.
# PARTS (default stream,consume,little): devpath_cost's --parts; WARMUP=0 skips hbfd's ~150 s numba warm-up of a fresh
# machine (HBFD_ACCEL=off: the numpy engine; the fixed and fast sources serve these kernels on the device).
set -u
source bench/gpu_calls/env.sh
if [ "${WARMUP:-1}" = 1 ]; then python3 -m hbfd.warmup 2>&1 | tail -1; else export HBFD_ACCEL=off; fi
W=/tmp/sc; rm -rf $W; mkdir -p $W
pack() { tar czf $OUT/sc.tgz -C $W . 2>/dev/null; }
for v in ${VARIANTS:-whole sep_plain sep_body sep_body_ci whole_ci}; do
  case $v in
    whole) E=(HBFCC_LINK=whole);;
    sep_plain) E=(HBFCC_LINK=separate HBFCC_SEPARATE_CAP=plain);;
    sep_body) E=(HBFCC_LINK=separate HBFCC_SEPARATE_CAP=body);;
    sep_body_ci) E=(HBFCC_LINK=separate HBFCC_SEPARATE_CAP=body HBFCC_CALL_ISOLATION=1);;
    whole_ci) E=(HBFCC_LINK=whole HBFCC_CALL_ISOLATION=1);;
    itime) E=(HBFCC_LINK=whole HBFCC_INLINE_TIME=1);;
    share) E=(HBFCC_LINK=whole HBFCC_SHARE_UNTIL=1);;      # the default build, named for stop52_share.sh's A/B
    noshare) E=(HBFCC_LINK=whole HBFCC_SHARE_UNTIL=0);;    # one until per op, as before stop 52
    before53) E=(HBFCC_LINK=whole HBFCC_LOADS_FIRST=0 HBFCC_FULL_WARP=0);;   # the default build of stop 52
    lf) E=(HBFCC_LINK=whole HBFCC_LOADS_FIRST=all HBFCC_FULL_WARP=0);;      # a group's loads before its timing code
    fw) E=(HBFCC_LINK=whole HBFCC_LOADS_FIRST=0 HBFCC_FULL_WARP=all);;      # constant-mask collectives, whole warp
    lffw) E=(HBFCC_LINK=whole HBFCC_LOADS_FIRST=all HBFCC_FULL_WARP=all);;
    fwall) E=(HBFCC_LINK=whole HBFCC_FULL_WARP=all);;                       # the default, full warp in every group
    lf1) E=(HBFCC_LINK=whole HBFCC_LOADS_FIRST=1);;                         # stop 54's order: loads after the until check
    fwauto) E=(HBFCC_LINK=whole HBFCC_FULL_WARP=auto);;                     # per kernel: all where no register rises
    lf1fwauto) E=(HBFCC_LINK=whole HBFCC_LOADS_FIRST=1 HBFCC_FULL_WARP=auto);;   # both (stop 54)
    earlyclock) E=(HBFCC_LINK=whole HBFCC_EARLY_CLOCK=1);;                  # the group's clock before its setup
    pf1) E=(HBFCC_LINK=whole HBFCC_PREFETCH_NEXT=1);;                       # stop 55: next iteration's loads into L2
    pf0) E=(HBFCC_LINK=whole HBFCC_PREFETCH_NEXT=0);;                       # without it (the default before stop 55)
    pf2) E=(HBFCC_LINK=whole HBFCC_PREFETCH_NEXT=2);;                       # the next two iterations
    pf3) E=(HBFCC_LINK=whole HBFCC_PREFETCH_NEXT=3);;
    pf1lf1) E=(HBFCC_LINK=whole HBFCC_PREFETCH_NEXT=1 HBFCC_LOADS_FIRST=1);;
    pg) E=(HBFCC_LINK=whole HBFCC_PREFETCH_GROUP=1);;                       # stop 56: a group's loads into L2 first
    pgauto) E=(HBFCC_LINK=whole HBFCC_PREFETCH_GROUP=auto);;                # stop 58: pg where ptxas gives no more registers
    pg0) E=(HBFCC_LINK=whole HBFCC_PREFETCH_GROUP=0);;                      # without it (the default before stop 58)
    auto2) E=(HBFCC_LINK=whole HBFCC_PREFETCH_GROUP=auto HBFCC_EARLY_CLOCK=auto);;   # stop 58: both in the variant
    off2) E=(HBFCC_LINK=whole HBFCC_PREFETCH_GROUP=0 HBFCC_EARLY_CLOCK=0);;  # neither (the default before stop 58)
    *) echo "unknown variant $v"; continue;;
  esac
  L=$(left); T=$(( L - 20 < 130 ? L - 20 : 130 ))
  [ $T -lt 90 ] && { echo "$v skipped: ${L}s left" | tee -a $W/sepcap.txt; continue; }
  WK=/tmp/sc_work_$v; rm -rf $WK
  echo "== [${L}s left] $v: ${E[*]} (timeout ${T}s)"
  env "${E[@]}" timeout $T python3 bench/devpath_cost.py --out $W/$v --work $WK --parts ${PARTS:-stream,consume,little} \
      --launch-timeout 10 --budget-s $(( T - 30 )) > $W/$v.log 2>&1
  echo "$v rc=$?"
  python3 bench/gpu_calls/sepcap_summary.py $v $W/$v/devpath_cost.json 2>&1 | tee -a $W/sepcap.txt
  pack
done
echo "== done [$(left)s left]"
pack
