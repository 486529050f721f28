#!/bin/bash
# one call (~8-9 min with LIMIT=560): cold-call register isolation (wt/csave; hbfcc HBFCC_CALL_ISOLATION, the
# call_isolation stage hbfcc/passes/call_isolation.py, docs/design.md §3.8, docs/RESULTS.md "wt/csave: cold-call
# register isolation (CPU)"). Around every helper call the registers live across it go to a per-thread .local buffer
# (st.volatile/ld.volatile, generic address) and come back after it; re-executable values (constants, kernel
# parameters, %tid...) are redone instead. On the CPU: custom_reduce 122 -> 72 registers, the quick matrix's kernels
# fewer registers / more blocks per SM, a few corpus kernels MORE (the knob is off by default). This call:
#   1. correctness on the card with the knob on: bench/runtime_proofs.py --only semantic,hbfcc_built (hbfcc_built
#      rewrites the microbench's plain twins with `hbfcc rewrite`, which reads the knob, and compares values and
#      memory with the plain build; semantic exercises the helpers themselves: the baseline that they still work);
#   2. the quick device-path matrix at fixed 0 ns and the fast source, knob off then on, each its own --work (Triton
#      and hbfcc caches: the marker line says "call-isolation on", the artifact store must not hand one build's
#      rewrite to the other), budgets from `left`;
#   3. side by side per case and source: ratio (hbf / plain) off, on, on/off; registers plain -> off -> on;
#      blocks/SM plain -> off -> on; spills; whether outputs were identical.
# What to look for: on/off < 1 where blocks/SM rose (the cost goal of issue 13: fixed0 <= 1.3x plain); any
# `identical False` or a failed proof with the knob on is a correctness bug (the stage must preserve semantics by
# construction). ONE tar under $OUT (cs.tgz), rewritten after every part.
set -u
source bench/gpu_calls/env.sh
python3 -m hbfd.warmup 2>&1 | tail -1
W=/tmp/cs; mkdir -p $W

# 1. correctness with the knob on (own hbfcc cache/artifact store; the bench makes its own temp work dirs)
L=$(left); B=$(( L - 330 )); B=$(( B > 150 ? 150 : B ))
if [ $B -ge 60 ]; then
  echo "== [${L}s left] runtime_proofs semantic,hbfcc_built with HBFCC_CALL_ISOLATION=1, timeout ${B}s"
  HBFCC_CALL_ISOLATION=1 HBFCC_CACHE_DIR=$W/hcache_rp timeout $B python3 bench/runtime_proofs.py --out $W/rp \
      --only semantic,hbfcc_built > $W/rp.log 2>&1; echo "runtime_proofs rc=$?"
  grep -E "^\[.*\] (semantic|hbfcc_built):" $W/rp.log | cut -c1-400
else
  echo "runtime_proofs skipped: ${L}s left"
fi
tar czf $OUT/cs.tgz -C $W .

# 2. the quick matrix, knob off then on
for v in off on; do
  L=$(left)
  case $v in
    off) E=(HBFCC_CALL_ISOLATION=0); WK=/tmp/csw0; B=$(( (L - 50) / 2 ));;   # half: leave the other its share
    on) E=(HBFCC_CALL_ISOLATION=1); WK=/tmp/csw1; B=$(( L - 50 ));;
  esac
  B=$(( B > 220 ? 220 : B ))
  [ $B -lt 110 ] && { echo "dm $v skipped: ${L}s left"; continue; }
  echo "== [${L}s left] ${E[*]} ($v), budget ${B}s"
  env "${E[@]}" timeout $(( B + 25 )) python3 bench/devpath_matrix.py --quick --sources fixed0,fast --budget-s $B \
      --work $WK --out $W/dm_$v > $W/dm_$v.log 2>&1; echo "dm $v rc=$?"
  tail -3 $W/dm_$v.log | cut -c1-300
  tar czf $OUT/cs.tgz -C $W .
done

# 3. side by side
python3 - $W <<'PY' | tee $W/side_by_side.txt
import glob, json, statistics, sys
W = sys.argv[1]
def load(v):
    fs = sorted(glob.glob(f"{W}/dm_{v}/*.json"))
    if not fs:
        print(f"{v}: no matrix result")
        return {}
    d = json.load(open(fs[0]))
    return {(src, c["name"]): c for src, s in d.get("sources", {}).items() for c in (s.get("cases") or []) if c}
off, on = load("off"), load("on")
f = lambda x, s="{:.2f}": "-" if x is None else s.format(x)  # noqa: E731
def k1(x):   # a multi-kernel case records {kernel: info}: its first kernel
    x = x if isinstance(x, dict) else {}
    if x and "n_regs" not in x:
        x = next(iter(x.values()))
    return x if isinstance(x, dict) else {}
print(f"{'source':6s} {'case':40s} | {'x off':>6s} {'x on':>6s} {'on/off':>6s} | {'regs plain>off>on':>17s} | "
      f"{'blk/SM plain>off>on':>19s} | {'spills on':>9s} | identical off/on")
rat = {}
for k in list(dict.fromkeys([*off, *on])):
    a, b = off.get(k) or {}, on.get(k) or {}
    ra, rb = a.get("ratio"), b.get("ratio")
    kp = k1(a.get("kernel_plain") or b.get("kernel_plain"))
    ka, kb = k1(a.get("kernel_hbf")), k1(b.get("kernel_hbf"))
    ida = all((a.get("identical") or {"-": False}).values()) if a else None
    idb = all((b.get("identical") or {"-": False}).values()) if b else None
    if ra and rb:
        rat.setdefault(k[0], []).append((ra, rb))
    print(f"{k[0][:6]:6s} {k[1][:40]:40s} | {f(ra):>6s} {f(rb):>6s} {f(rb / ra if ra and rb else None, '{:.3f}'):>6s} | "
          f"{str(kp.get('n_regs')):>5s}>{str(ka.get('n_regs')):>5s}>{str(kb.get('n_regs')):>5s} | "
          f"{str(kp.get('blocks_per_sm')):>6s}>{str(ka.get('blocks_per_sm')):>5s}>{str(kb.get('blocks_per_sm')):>5s} | "
          f"{str(kb.get('n_spills')):>9s} | {ida}/{idb}  {a.get('status')}/{b.get('status')}")
for src, rs in rat.items():
    print(f"{src}: median ratio off x{statistics.median(r[0] for r in rs):.2f} on x{statistics.median(r[1] for r in rs):.2f}"
          f"  median on/off {statistics.median(r[1] / r[0] for r in rs):.3f}  ({len(rs)} cases)")
PY
tar czf $OUT/cs.tgz -C $W .
echo "== done [$(left)s left]"
