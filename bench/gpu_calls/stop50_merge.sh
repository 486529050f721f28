#!/bin/bash
# one call (~8-9 min with LIMIT=560): merged requests (wt/merge13; hbfcc HBFCC_MERGE_LOADS, hbfcc/passes/timing.py
# _merge_sets, docs/design.md §3.3 "Merged requests", docs/RESULTS.md "wt/merge13"). Issue 13's masked tail: the quick
# matrix's reduce_float16_e8192_b8192_w4_g1024_tail ran x25 plain (207 us vs 8 us) at fixed 0 ns, 262,144 requests and
# 134 MB of media bytes for 16.7 MB of program bytes: Triton could not vectorize it, so each thread issues 64 scalar
# ld.global.b16 (8 per 16 bytes), each its own warp-request, in 39 issue groups (one run of 29 hoisted issues, then 35
# lone ones). With the merge: 8 requests of 8 per warp in 8 groups (what the vectorized build books), the issues of the
# run together; on the CPU: the groups' served path 2,422 -> 901 PTX instructions per thread, ptxas spill stores 212 -> 188 B
# (tests/hbfcc/test_merge_loads.py, bench/merge_loads_static.py). This call:
#   1. correctness with the merge on (the default): bench/runtime_proofs.py --only semantic (the helpers and the
#      inline path on the card: the baseline that they still work with this rewrite);
#   2. the quick device-path matrix at fixed 0 ns, HBFCC_MERGE_LOADS=0 then =1, each in its OWN work dir, removed
#      before its build (a warm Triton cache from one build gives wrong results for the other);
#   3. side by side per case: ratio (hbf / plain) off, on, on/off; requests, media bytes and program bytes off -> on;
#      registers; whether outputs were identical.
# What to look for: the tail case's requests 262,144 -> ~32,768 and media bytes 134 MB -> ~16.8 MB (program bytes
# unchanged, 16.7 MB), its ratio well below x25; every other case's counters unchanged or lower (a kernel with nothing
# to merge keeps its counts; its code may still move: the copies and moved loads now go group by group); every output
# identical. A `mismatch`, a hang or a failed proof with the merge on is a correctness bug (only timing code changed).
# Carry: hbfproto, runtime_cuda/ptx, .whl (as every call). ONE tar under $OUT (mg.tgz), rewritten after every part.
# wt/merge13b: the first card run (H100) booked the tail's 262,144 requests with the merge on too: its range (the
# tensor as registered, n * 2 = 16,777,142 bytes) does not end 32-byte aligned, and the groups' band check wanted it
# to, so every group ran site by site, merged or not. Fixed (the band check wants the length a multiple of the
# widest group access). QUICK form (~2 min): ONLY=<comma list of case-name substrings> (devpath_matrix --only) runs
# those cases without the nvcc kernels and without part 1 (RP=1 keeps it); a LIMIT under 400 s without ONLY takes
# ONLY=w4_g1024,w1_g4224,e65536_b65536_w4_g512 (the tail, its vectorized twin, the two cases whose time changed):
#   LIMIT=240 bash bench/gpu_calls/stop50_merge.sh
# Expect (fixed 0 ns, merge on): the tail 32,768 requests, media bytes 16,777,152 (program bytes 16,777,142); off:
# 262,144 and 134.2 MB as before, but served by the group path now (its time below the x25 of before).
set -u
source bench/gpu_calls/env.sh
ONLY=${ONLY:-}
[ -z "$ONLY" ] && [ "$LIMIT" -lt 400 ] && ONLY=w4_g1024,w1_g4224,e65536_b65536_w4_g512
RP=${RP:-$([ -n "$ONLY" ] && echo 0 || echo 1)}
MINB=$([ -n "$ONLY" ] && echo 45 || echo 110)      # the whole quick matrix took 36 s on the H100
SEL=(); [ -n "$ONLY" ] && SEL=(--only "$ONLY" --no-nvcc)
echo "ONLY=${ONLY:-all quick cases} RP=$RP"
python3 -m hbfd.warmup 2>&1 | tail -1
W=/tmp/mg; mkdir -p $W

# 1. correctness with the merge on (the bench makes its own temp work dirs)
L=$(left); B=$(( L - 330 )); B=$(( B > 120 ? 120 : B ))
if [ "$RP" = 1 ] && [ $B -ge 60 ]; then
  echo "== [${L}s left] runtime_proofs semantic (HBFCC_MERGE_LOADS=1), timeout ${B}s"
  HBFCC_MERGE_LOADS=1 HBFCC_CACHE_DIR=$W/hcache_rp timeout $B python3 bench/runtime_proofs.py --out $W/rp \
      --only semantic > $W/rp.log 2>&1; echo "runtime_proofs rc=$?"
  grep -E "^\[.*\] semantic:" $W/rp.log | cut -c1-400
else
  echo "runtime_proofs skipped: ${L}s left, RP=$RP"
fi
tar czf $OUT/mg.tgz -C $W .

# 2. the quick matrix at fixed 0 ns, merge off then on, each in a fresh work dir of its own
for v in off on; do
  L=$(left)
  case $v in
    off) E=(HBFCC_MERGE_LOADS=0); WK=/tmp/mgw0; B=$(( (L - 50) / 2 ));;   # half: leave the other its share
    on) E=(HBFCC_MERGE_LOADS=1); WK=/tmp/mgw1; B=$(( L - 50 ));;
  esac
  B=$(( B > 220 ? 220 : B ))
  [ $B -lt $MINB ] && { echo "dm $v skipped: ${L}s left"; continue; }
  rm -rf $WK
  echo "== [${L}s left] ${E[*]} ($v), budget ${B}s, work $WK (fresh)"
  env "${E[@]}" HBFCC_CACHE_DIR=$WK/hcache timeout $(( B + 25 )) python3 bench/devpath_matrix.py --quick \
      --sources fixed0 --budget-s $B --work $WK --out $W/dm_$v ${SEL[@]+"${SEL[@]}"} > $W/dm_$v.log 2>&1; echo "dm $v rc=$?"
  tail -3 $W/dm_$v.log | cut -c1-300
  tar czf $OUT/mg.tgz -C $W .
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
def cnt(c):   # (requests, media bytes, program bytes) of the checked launch
    cs = c.get("counters") or {}
    if cs and "ops_total" not in cs:
        cs = next(iter(cs.values()), {}) if all(isinstance(x, dict) for x in cs.values()) else cs
    t = (cs or {}).get("ops_total") or {}
    return t.get("requests"), t.get("bytes"), t.get("program_bytes")
print(f"{'source':6s} {'case':44s} | {'x off':>6s} {'x on':>6s} {'on/off':>6s} | {'requests off>on':>21s} | "
      f"{'media MB off>on':>15s} | {'prog MB off>on':>15s} | {'regs off>on':>9s} | identical off/on")
rat = []
for k in list(dict.fromkeys([*off, *on])):
    a, b = off.get(k) or {}, on.get(k) or {}
    ra, rb = a.get("ratio"), b.get("ratio")
    ka, kb = k1(a.get("kernel_hbf")), k1(b.get("kernel_hbf"))
    ida = all((a.get("identical") or {"-": False}).values()) if a else None
    idb = all((b.get("identical") or {"-": False}).values()) if b else None
    (qa, ma, pa), (qb, mb, pb) = cnt(a), cnt(b)
    mbf = lambda x: "-" if x is None else f"{x / 1e6:.1f}"  # noqa: E731
    if ra and rb:
        rat.append((ra, rb))
    print(f"{k[0][:6]:6s} {k[1][:44]:44s} | {f(ra):>6s} {f(rb):>6s} {f(rb / ra if ra and rb else None, '{:.3f}'):>6s} | "
          f"{str(qa):>10s}>{str(qb):>10s} | {mbf(ma):>7s}>{mbf(mb):>7s} | {mbf(pa):>7s}>{mbf(pb):>7s} | "
          f"{str(ka.get('n_regs')):>4s}>{str(kb.get('n_regs')):>4s} | {ida}/{idb}  {a.get('status')}/{b.get('status')}")
if rat:
    print(f"fixed0: median ratio off x{statistics.median(r[0] for r in rat):.2f} on x{statistics.median(r[1] for r in rat):.2f}"
          f"  median on/off {statistics.median(r[1] / r[0] for r in rat):.3f}  ({len(rat)} cases)")
PY
tar czf $OUT/mg.tgz -C $W .
echo "== done [$(left)s left]"
