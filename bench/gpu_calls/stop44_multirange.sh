#!/bin/bash
# one call (~8-9 min): stop 44's multi-range inline path (helper ABI 6, docs/design.md §3.3 "Several ranges inline")
# on the card: the quick stress matrix at fixed 0 ns with the path on (HBF_INLINE_MULTI=1, the default) and off
# (HBF_INLINE_MULTI=0: the one-range descriptor of before), the SAME cubins (the knob is read where the runtime
# builds the launch descriptor, runtime_cuda/knobs.py), one Triton/hbfcc cache for both, side by side per case:
# ratio one launch / back to back, requests, inline_requests. What to look for: add4 (4 input ranges) and the copy
# read-write case (2 ranges) inline (inline_requests ~ requests, ratio near the single-range copies' 1.06-2.68);
# the single-range cases unchanged (their code path is the one of before). Third, if time is left: a build without
# the re-check code (HBFCC_INLINE_MULTI=0): the single-range cases' cost of the code's presence. Needs the ABI 6 helpers: carry
# runtime_cuda/ptx rebuilt by `make helpers-ptx` after 1678202 (192-byte __hb_cdesc).
# ONE tar under $OUT (mr.tgz), rewritten after every part.
set -u
source bench/gpu_calls/env.sh
python3 -m hbfd.warmup 2>&1 | tail -1
grep -q '__hb_cdesc\[192\]' runtime_cuda/ptx/hbf_helpers.ptx || { echo "runtime_cuda/ptx is not the ABI 6 build (make helpers-ptx)"; exit 3; }
W=/tmp/mr; mkdir -p $W
# multi: the default (compiles Triton + hbfcc, ~60-90 s of its budget); single: the same cubins, HBF_INLINE_MULTI=0
# (the one-range descriptor); nocode: a build without the re-check (HBFCC_INLINE_MULTI=0, its own caches: it
# recompiles) -- does the re-check's mere presence slow the single-range cases (ptxas schedules around it)?
for v in multi single nocode; do
  L=$(left)
  case $v in
    multi) E=(HBF_INLINE_MULTI=1); B=140; WK=/tmp/mrw;;
    single) E=(HBF_INLINE_MULTI=0); B=110; WK=/tmp/mrw;;
    nocode) E=(HBFCC_INLINE_MULTI=0 HBF_INLINE_MULTI=1); B=$(( L - 50 > 140 ? 140 : L - 50 )); WK=/tmp/mrw0;;
  esac
  [ $L -lt $(( B + 40 )) ] || [ $B -lt 100 ] && { echo "dm $v skipped: ${L}s left"; continue; }
  echo "== [${L}s left] ${E[*]} ($v), budget ${B}s"
  env "${E[@]}" timeout $(( B + 25 )) python3 bench/devpath_matrix.py --quick --sources fixed0 --budget-s $B \
      --work $WK --out $W/dm_$v > $W/dm_$v.log 2>&1; echo "dm $v rc=$?"
  tail -3 $W/dm_$v.log | cut -c1-300
  tar czf $OUT/mr.tgz -C $W .
done
python3 - $W <<'PY' | tee $W/side_by_side.txt
import glob, json, sys
W = sys.argv[1]
def load(v):
    for f in glob.glob(f"{W}/dm_{v}/*.json"):
        try:
            d = json.load(open(f))
        except Exception:
            continue
        if "sources" in d:
            return {c["name"]: c for c in d["sources"].get("fixed0", {}).get("cases", [])}, d.get("summary", {})
    return {}, {}
runs = {v: load(v) for v in ("multi", "single", "nocode")}
for v, (_, s) in runs.items():
    for k, x in s.items():
        r = x.get("ratio") or {}
        print(f"{v:7s} {k} {x.get('counts')} median x{r.get('median', 0):.2f} p10 {r.get('p10', 0):.2f} p90 {r.get('p90', 0):.2f}")
def cell(c):
    if not c:
        return "-"
    k = c.get("counters") or {}
    req = (k.get("ops_total") or {}).get("requests", 0)
    return (f"{c.get('status')} x{c.get('ratio') or 0:.2f} b2b x{c.get('ratio_b2b') or 0:.2f} "
            f"inl {k.get('inline_requests', 0)}/{req}")
names = list(dict.fromkeys([n for v in runs.values() for n in v[0]]))
print(f"{'case':46s} | {'multi (HBF_INLINE_MULTI=1)':44s} | {'single (=0)':44s} | nocode (HBFCC_INLINE_MULTI=0)")
for n in names:
    print(f"{n[:46]:46s} | {cell(runs['multi'][0].get(n)):44s} | {cell(runs['single'][0].get(n)):44s} | {cell(runs['nocode'][0].get(n))}")
PY
tar czf $OUT/mr.tgz -C $W .
echo "== done [$(left)s left]"
