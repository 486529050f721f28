#!/bin/bash
# one call (stop 47): the Qwen3 decode matrix (bench/qwen3moe_decode.py --parts matrix: 48 layers, 4 tokens,
# ocp-sg2/sg3 at batch 8 and 64, ocp-sg1 tR 8 us at batch 8) with the helpers built with one define, after
# stop46_sg2hang.sh named the build under which the 48-layer ocp-sg2 run ends. The helpers are made here with nvcc
# (as setup.py's helper-ptx does) and passed through HBFCC_HELPER_PTX (every run inherits it; its own cache).
#   LIMIT=560 DEF=-DHBF_LEADER_CHECKED=1 bash bench/gpu_calls/stop47_sg2matrix.sh   (carry: hbfproto, runtime_cuda/ptx, .whl)
# DEF empty: the default helpers. One tar $OUT/s47m.tgz (the decode JSON and each run's log and run.json).
set -u
source bench/gpu_calls/env.sh
W=/tmp/s47m; mkdir -p $W/ptx
python3 -m hbfd.warmup 2>&1 | tail -1
if [ -n "${DEF:-}" ]; then
  nvcc -std=c++17 -O3 -arch=compute_90a -rdc=true -ptx -Iruntime_cuda/include $DEF runtime_cuda/src/hbf_helpers.cu \
      -o $W/ptx/hbf_helpers.ptx && sed -i 's/^\.visible \.func/.weak .func/' $W/ptx/hbf_helpers.ptx || exit 4
  export HBFCC_HELPER_PTX=$W/ptx/hbf_helpers.ptx
  echo "helpers built with $DEF"
fi
echo "$DEF" > $W/define.txt
python3 bench/qwen3moe_decode.py --parts matrix --out $W/res --runs-dir $W/runs --cache $W/cache --timeout 150 \
    --budget-s $(( $(left) - 25 )) 2>&1 | grep -v "not admitted" | tail -40
for d in $W/runs/*/; do tail -c 3000 $d/child.log > $d/child_tail.txt 2>/dev/null; done
# the globs expand inside $W (stop 47's call expanded them in the tree's root: only res/ came back)
(cd $W && tar czf $OUT/s47m.tgz res define.txt $(ls runs/*/run.json runs/*/run.partial.json runs/*/child_tail.txt \
    2>/dev/null))
echo "== done [$(left)s left]"
