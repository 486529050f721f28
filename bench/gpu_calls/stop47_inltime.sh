#!/bin/bash
# one call (~8-9 min): the inline path's own time counter (wt/inltime; helper ABI 8, hbfcc HBFCC_INLINE_TIME,
# docs/design.md §3.3 "The inline path's own time", docs/RESULTS.md "wt/inltime: an inline-time counter (CPU)").
# The quick device-path matrix at fixed 0 ns twice, each with its own Triton/hbfcc caches (the knob changes the
# rewritten PTX): `off` (HBFCC_INLINE_TIME=0, the default: no timer, the flushes pass 0) and `on` (=1: every served
# inline path reads %globaltimer again at its end and adds its time on the leader lane; the kernel counters'
# inline_ns). Then bench/explain_devpath.py on both. What to look for:
# - the timer's cost: the per-case ratios (hbf / plain) side by side, on/off (one more clock read per served path:
#   expected a few percent where the inline path dominates; larger would keep the knob off by default);
# - what the counters explain now: counted share of the difference, off (stop 45: ~0 % where inline) vs on, the
#   inline share of the difference, and the measured inline ns per inline request against stop 45/46's residual
#   per inline request (~400 ns median). Under-explained with the timer on = instrumentation time outside the timed
#   stretches (band test, first clock read, occupancy): the residual says how much.
# Needs the ABI 8 helpers: carry runtime_cuda/ptx rebuilt by `make helpers-ptx` (both flushes take inline_ns).
# ONE tar under $OUT (it.tgz), rewritten after every part.
set -u
source bench/gpu_calls/env.sh
python3 -m hbfd.warmup 2>&1 | tail -1
grep -q '__hb_kernel_flush_param_8' runtime_cuda/ptx/hbf_helpers.ptx || { echo "runtime_cuda/ptx is not the ABI 8 build (make helpers-ptx)"; exit 3; }
W=/tmp/it; mkdir -p $W
# each variant compiles Triton + hbfcc (~60-90 s of its budget) in its own work dir: the marker line differs
# ("inline-time on"), and the artifact store must not hand one build's rewrite to the other
for v in off on; do
  L=$(left)
  case $v in
    off) E=(HBFCC_INLINE_TIME=0); WK=/tmp/itw0; B=$(( (L - 60) / 2 ));;   # half: leave the other its share
    on) E=(HBFCC_INLINE_TIME=1); WK=/tmp/itw1; B=$(( L - 60 ));;
  esac
  B=$(( B > 220 ? 220 : B ))
  [ $B -lt 120 ] && { echo "dm $v skipped: ${L}s left"; continue; }
  echo "== [${L}s left] ${E[*]} ($v), budget ${B}s"
  env "${E[@]}" timeout $(( B + 25 )) python3 bench/devpath_matrix.py --quick --sources fixed0 --budget-s $B \
      --work $WK --out $W/dm_$v > $W/dm_$v.log 2>&1; echo "dm $v rc=$?"
  tail -3 $W/dm_$v.log | cut -c1-300
  f=$(ls $W/dm_$v/*.json 2>/dev/null | head -1)
  [ -n "$f" ] && python3 bench/explain_devpath.py "$f" --out $W/explain_$v.json > $W/explain_$v.log 2>&1
  echo "explain $v rc=$?"; head -2 $W/explain_$v.log | cut -c1-300
  tar czf $OUT/it.tgz -C $W .
done
python3 - $W <<'PY' | tee $W/side_by_side.txt
import json, sys
W = sys.argv[1]
def load(v):
    try:
        runs = json.load(open(f"{W}/explain_{v}.json"))["runs"]
    except Exception as e:
        print(f"{v}: no explanation ({e})")
        return {}, {}
    e = next(iter(runs.values())).get("fixed0") or {}
    return {c["name"]: c for c in e.get("cases", [])}, e
(off, eo), (on, en) = load("off"), load("on")
f = lambda x, s="{:.2f}": "-" if x is None else s.format(x)  # noqa: E731
for v, e in (("off", eo), ("on", en)):
    print(f"{v:3s} counted share median {f(e.get('counted_share_median'))}  inline share median "
          f"{f(e.get('inline_share_of_delta_median'))}  timed cases {e.get('inline_timed_cases')}  residual/inline req "
          f"{f(e.get('residual_ns_per_inline_request_median'), '{:.0f}')} ns  measured inline ns/inline req "
          f"{f(e.get('inline_ns_per_inline_request_median'), '{:.0f}')}")
print(f"{'case':44s} | {'ratio off':>9s} {'ratio on':>9s} {'on/off':>7s} | {'counted off':>11s} {'counted on':>10s} "
      f"{'inline':>7s} | {'resid/inl off':>13s} {'inl ns/req on':>13s} {'resid/inl on':>12s}")
for n in list(dict.fromkeys([*off, *on])):
    a, b = off.get(n) or {}, on.get(n) or {}
    ra, rb = a.get("ratio"), b.get("ratio")
    print(f"{n[:44]:44s} | {f(ra):>9s} {f(rb):>9s} {f(rb / ra if ra and rb else None, '{:.3f}'):>7s} | "
          f"{f(a.get('counted_share_of_delta')):>11s} {f(b.get('counted_share_of_delta')):>10s} "
          f"{f(b.get('inline_share_of_delta')):>7s} | {f(a.get('residual_ns_per_inline_request'), '{:.0f}'):>13s} "
          f"{f(b.get('inline_ns_per_inline_request'), '{:.0f}'):>13s} "
          f"{f(b.get('residual_ns_per_inline_request'), '{:.0f}'):>12s}")
PY
tar czf $OUT/it.tgz -C $W .
echo "== done [$(left)s left]"
