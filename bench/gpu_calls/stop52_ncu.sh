#!/bin/bash
# one call (~3-5 min, LIMIT=300): where today's stream cost goes (issue 13 item 2: reduce x1.82, copy x1.36 on the
# H100 in stop 51, goal 1.3). ncu (--clock-control none) of bench/devpath_cost.py's stream part (fixed 0 ns, the
# whole-program default build, the range registered), plain and instrumented reduce and copy, one pair each
# (--reps 1), the same sections as the 2026-12-02 run (bench/results/stream_ncu_r1: then x2.52, 118 registers, the
# loop not unrolled, x5.4 instructions) plus SpeedOfLight and InstructionStats; then per kernel the details page and the
# SASS source page (executed instructions and stall samples per instruction) exported as CSV and summarized by
# bench/stream_ncu_summary.py (SASS lines, instructions per warp, LDG sites and their executions, %globaltimer reads,
# CALLs executed, branches, top stall lines, scheduler and occupancy metrics). Everything in ONE tar under $OUT
# (sn.tgz), rewritten after each step. Carry: hbfproto, runtime_cuda/ptx, .whl.
set -u
source bench/gpu_calls/env.sh
python3 -m hbfd.warmup 2>&1 | tail -1
W=/tmp/sn; rm -rf $W /tmp/sn_work; mkdir -p $W
pack() { tar czf $OUT/sn.tgz -C $W . 2>/dev/null; }
which ncu || { echo "no ncu"; exit 4; }
L=$(left); T=$(( L - 60 ))
echo "== [${L}s left] ncu of devpath_cost stream (timeout ${T}s)"
timeout $T ncu --clock-control none --target-processes all --kernel-name "regex:^(reduce|copy)_(plain|hbf)$" \
    --launch-count 12 --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
    --section SourceCounters --section SpeedOfLight --section InstructionStats --import-source no \
    -o $W/stream -f python3 bench/devpath_cost.py --out $W/dc --work /tmp/sn_work --parts stream --reps 1 \
    --launch-timeout 120 --rep-limit-s 60 --budget-s $(( T - 40 )) > $W/ncu_run.log 2>&1
echo "ncu rc=$?"; tail -5 $W/ncu_run.log | cut -c1-300
pack
[ -f $W/stream.ncu-rep ] || { echo "no report"; exit 0; }
ncu --import $W/stream.ncu-rep --page details --csv > $W/details.csv 2> $W/details.err
for k in reduce_plain reduce_hbf copy_plain copy_hbf; do
  ncu --import $W/stream.ncu-rep --kernel-name $k --launch-skip 0 --launch-count 1 --page source --csv \
      --print-source sass > $W/src_$k.csv 2> $W/src_$k.err
  echo "$k source: $(wc -l < $W/src_$k.csv) lines"
done
# the instrumented cubins' listings (Triton's nvdisasm), so the summary splits the executed instructions and the
# calls by function (ptxas's per-kernel helper copies)
ND=$(python3 -c "import os, triton; print(os.path.join(os.path.dirname(triton.__file__), 'backends/nvidia/bin/nvdisasm'))")
mkdir -p $W/sass
for f in $(find /tmp/sn_work -name '*_hbf.cubin' 2>/dev/null); do
  $ND -c $f > $W/sass/$(basename $(dirname $f) | cut -c1-12)_$(basename $f .cubin).sass 2>/dev/null
done
pack
python3 bench/stream_ncu_summary.py --dir $W --out $W/summary.json 2>&1 | tail -60
pack
echo "== done [$(left)s left]"
