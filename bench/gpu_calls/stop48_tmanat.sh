#!/bin/bash
# one call (~3 min; LIMIT=300 is ample): issue 15's native cost of the Triton TMA kernels' _hbf builds in CUDA graphs,
# after wt/nat15 (docs/RESULTS.md "wt/nat15: the TMA native cost, the switch in the constant bank (CPU)"). Stop 47
# measured, detached: attn_fwd x1.035, matmul_dev x1.055, matmul_host x1.097. Now hbfcc's prologue reads the attach
# switch from the module's constant bank first (__hb_detached, one ULDC + branch: no LDC/LDG before the native body),
# and (stop 48's run) the native copy declared its own registers (HBFCC_NATIVE_SCOPE=1: ptxas zeroes the accumulators
# as in the plain build; opt-in since: slower on 2 of 3). Per kernel, each against the plain build's graph (PAIRS pairs):
#   hbf           the session's choice, nothing registered: detached (__hb_state 0, __hb_detached 1); the goal (<= 1.02)
#   hbf_attached  the words forced attached, nothing registered (the prologue loads the band, span 0): the before
#   hbfscope      the hbf build with HBFCC_NATIVE_SCOPE=1 (the copy in its own register scope; in stop 48 this was the
#                 default and the variant was "hbfshared" with =0: the own scope lost on 2 of 3 kernels, so =0 is hbf now)
#   probe_c0      the plain PTX through the probe wrapper with NO edit (its SASS is the plain build's, instruction for
#                 instruction, on the CPU): what the probe build path itself costs (stop 47: every matmul_host probe,
#                 even c1, ran x1.08)
#   probe_ld1 / probe_ld3 / probe_smem / probe_ld3smem / probe_c1   one part of the difference each, as in stop 47
# and the graph rule on the card (graph_replay_selection, now with the switch: [1, 0, 1] at capture / registered /
# unregistered), and the switch's stream order (switch_stream_order: with the inputs registered, a detach and the
# session's attach written as memsets between launches, no host sync: every launch must count its TMA copies; a
# stale constant-bank switch would run native and count none). Two runs of the bench (run1, run2: the spread between runs). Everything in ONE tar under $OUT
# (s48n.tgz), rewritten after every part. Carry: hbfproto, runtime_cuda/ptx, .whl (as every call).
set -u
source bench/gpu_calls/env.sh
export HBF_CONST_SWITCH=1   # the constant-bank switch (default on since this call confirmed it in stop 48)
python3 -m hbfd.warmup 2>&1 | tail -1
W=/tmp/s48n; mkdir -p $W/run1 $W/run2
pack() { tar czf $OUT/s48n.tgz -C $W . 2>/dev/null; }
tt() {   # name
  local name=$1
  local L=$(left); [ $L -lt 100 ] && { echo "$name skipped: ${L}s left"; return; }
  echo "== [${L}s left] tma_triton $name"
  local T=$(( L - 20 < 200 ? L - 20 : 200 ))
  timeout $T python3 bench/tma_triton.py --out $W/$name --budget-s $(( T - 50 )) --case-timeout 110 > $W/$name/log.txt 2>&1
  echo "$name rc=$?"; grep -E "ok=|native cost" $W/$name/log.txt | tail -7 | cut -c1-600
  pack
}
tt run1
tt run2
python3 - $W <<'PY' | tee $W/graph.txt
import json, sys
from pathlib import Path
w = Path(sys.argv[1])
out = {}
for run in ("run1", "run2"):
    p = w / run / "tma_triton.json"
    cases = json.loads(p.read_text()).get("cases", {}) if p.is_file() else {}
    for k, c in sorted(cases.items()):
        g = c.get("native_cost_graph") or {}
        v = {n: {f: x.get(f) for f in ("ratio_median", "ratio_min_max", "extra_us_median", "plain_ms_median",
                                        "ms_median", "hb_state_at_replay", "hb_detached_at_replay", "error")}
             for n, x in (g.get("variants") or {}).items()}
        rs = c.get("graph_replay_selection") or {}
        so = c.get("switch_stream_order") or {}
        out.setdefault(k, {})[run] = {"ok": c.get("ok"), "variants": v, "graph_replay_selection": rs,
                                      "switch_stream_order": so,
                                      "variants_identical": c.get("variants_identical"),
                                      "probes_identical": c.get("probes_identical"),
                                      "launch_selection": c.get("launch_selection"),
                                      "n_regs_plain_hbf": (c.get("admission") or {}).get("n_regs_plain_hbf"),
                                      "error": c.get("error") or g.get("error")}
        print(k, run, "ok", c.get("ok"), "replay rule ok", rs.get("ok"), rs.get("switch_at_capture_registered_unregistered"),
              "switch stream order ok", so.get("ok"), so.get("tma_copies"), "/", so.get("tma_copies_want"),
              "variants identical", c.get("variants_identical"), "probes identical", c.get("probes_identical"))
        for n, x in v.items():
            print("   %-14s x%s  +%s us  (%s, switch %s)" % (
                n, None if x["ratio_median"] is None else round(x["ratio_median"], 4), x["extra_us_median"],
                x.get("hb_state_at_replay") or x.get("error") or "", x.get("hb_detached_at_replay")))
(w / "graph.json").write_text(json.dumps(out, indent=1, default=str))
PY
pack
echo "== done [$(left)s left]"
