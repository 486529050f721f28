#!/bin/bash
set -u
source bench/gpu_calls/env.sh
mkdir -p $OUT/cap
for spec in "gen16|--parts generated --gen-gib 16 --gen-frames-gib 2 --chunk-gib 4" "rw8|--parts rw --rw-gib 8 --rw-frames-gib 1 --rw-passes 1" "sm|--parts stress,moe" "gen200|--parts generated --gen-gib ${GEN_GIB:-200} --gen-frames-gib 8 --chunk-gib 8"; do
  n=${spec%%|*}; a=${spec#*|}
  case " ${PARTS:-gen16 rw8 sm gen200} " in *" $n "*) ;; *) continue;; esac
  L=$(left); echo "== [$L s left] $n"; [ $L -gt 40 ] || break
  HBF_CAPACITY_DEVICE=1 timeout $(( L-15 )) python3 bench/capacity_gpu.py $a --out $OUT/cap/$n.json --work /tmp/cw_$n > $OUT/cap/$n.log 2>&1; echo "$n rc=$?"; tail -6 $OUT/cap/$n.log
done
echo "== done [$(left)s left]"
