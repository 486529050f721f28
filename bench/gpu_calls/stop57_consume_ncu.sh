#!/bin/bash
# ONE call (~7 min, LIMIT=420; carry hbfproto, runtime_cuda/ptx, .whl): where the consume probe's issue-side cost
# goes (issue 13 item 2: +128-160 ns over the unregistered build, goal 100; stop 55 on an H100). (A) ncu
# (--clock-control none; PC sampling every 32 cycles where ncu takes --sampling-interval) of bench/devpath_cost.py's
# consume part (fixed 2 us, today's default build), every consume_* launch: the details page and, per consume_hbf
# launch, the SASS source page (executed instructions and stall samples per instruction) as CSV, plus the cubins'
# nvdisasm listings, all in ONE tar under $OUT (cn.tgz; the .ncu-rep files stay on the card). (B) the same for one
# launch of each Little kernel named in LITTLE (default both 8-load ones; `none`: no Little part). SKIP_CONSUME=1
# skips (A). The attribution is done on the CPU from the tar: bench/consume_ncu_summary.py.
set -u
LIMIT=${LIMIT:-420}
source bench/gpu_calls/env.sh
export HBFD_ACCEL=off
W=/tmp/cn; rm -rf $W /tmp/cn_work; mkdir -p $W
pack() { tar czf $OUT/cn.tgz --exclude="*.ncu-rep" -C $W . 2>/dev/null; }   # the reports stay (16 MiB a file)
which ncu || { echo "no ncu"; exit 4; }
ND=$(python3 -c "import os, triton; print(os.path.join(os.path.dirname(triton.__file__), 'backends/nvidia/bin/nvdisasm'))")
mkdir -p $W/sass
SI=(); ncu --help 2>/dev/null | grep -q -- "--sampling-interval" && SI=(--sampling-interval 0)   # 2^(5+0) cycles
if [ "${SKIP_CONSUME:-0}" != 1 ]; then   # A: the consume probe
  L=$(left); T=$(( L - 50 < 190 ? L - 50 : 190 ))
  echo "== [${L}s left] ncu of devpath_cost consume (timeout ${T}s)"
  timeout $T ncu --clock-control none --target-processes all --kernel-name "regex:^consume_(plain|hbf)$" \
      --launch-count 16 --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy \
      --section SourceCounters --section InstructionStats "${SI[@]}" --import-source no \
      -o $W/consume -f python3 bench/devpath_cost.py --out $W/dc --work /tmp/cn_work --parts consume \
      --launch-timeout 120 --budget-s $(( T - 30 )) > $W/ncu_run.log 2>&1
  echo "ncu rc=$?"; grep -E "consume (idle|one_warp)" $W/ncu_run.log | cut -c1-300; tail -3 $W/ncu_run.log | cut -c1-300
  pack
  if [ -f $W/consume.ncu-rep ]; then
    ncu --import $W/consume.ncu-rep --page details --csv > $W/details.csv 2> $W/details.err
    for i in 0 1 2 3 4 5; do
      ncu --import $W/consume.ncu-rep --kernel-name consume_hbf --launch-skip $i --launch-count 1 --page source --csv \
          --print-source sass > $W/src_consume_hbf_$i.csv 2> $W/src_consume_hbf_$i.err
      echo "consume_hbf launch $i source: $(wc -l < $W/src_consume_hbf_$i.csv) lines"
    done
    ncu --import $W/consume.ncu-rep --kernel-name consume_plain --launch-skip 1 --launch-count 1 --page source --csv \
        --print-source sass > $W/src_consume_plain_1.csv 2> $W/src_consume_plain_1.err
    for f in $(find /tmp/cn_work -name 'consume_*.cubin' 2>/dev/null); do
      $ND -c $f > $W/sass/$(basename $(dirname $f) | cut -c1-12)_$(basename $f .cubin).sass 2>/dev/null
    done
  else
    echo "no consume report"
  fi
fi
pack
# B: where a Little round's time over its 20 us goes (e65536_b8192: 8 loads per thread per round, 8 rounds, 8 waves,
# x1.062 on the H100, goal 1.05; e8192_b8192: one round per program, x1.188): one instrumented launch (the second)
# each, sampled every 2^(5+2) cycles, its source page
SL=(); [ ${#SI[@]} -gt 0 ] && SL=(--sampling-interval 2)
for P in ${LITTLE:-little_e65536_b8192 little_e8192_b8192}; do
  [ "$P" = none ] && continue
  L=$(left); T=$(( L - 30 < 150 ? L - 30 : 150 ))
  [ $T -lt 80 ] && { echo "$P skipped: ${L}s left"; continue; }
  echo "== [${L}s left] ncu of devpath_cost $P (timeout ${T}s)"
  timeout $T ncu --clock-control none --target-processes all --kernel-name "regex:^reduce_hbf$" --launch-skip 1 \
      --launch-count 1 --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy \
      --section SourceCounters "${SL[@]}" --import-source no -o $W/$P -f python3 bench/devpath_cost.py \
      --out $W/d_$P --work /tmp/cn_work --parts $P --launch-timeout 100 --budget-s $(( T - 25 )) \
      > $W/ncu_$P.log 2>&1
  echo "ncu rc=$?"; tail -2 $W/ncu_$P.log | cut -c1-300
  if [ -f $W/$P.ncu-rep ]; then
    ncu --import $W/$P.ncu-rep --page details --csv > $W/details_$P.csv 2> $W/details_$P.err
    ncu --import $W/$P.ncu-rep --page source --csv --print-source sass > $W/src_$P.csv 2> $W/src_$P.err
    echo "$P source: $(wc -l < $W/src_$P.csv) lines"
  fi
  pack
done
for f in $(find /tmp/cn_work -name 'reduce_hbf.cubin' 2>/dev/null); do
  $ND -c $f > $W/sass/$(basename $(dirname $f) | cut -c1-12)_reduce_hbf.sass 2>/dev/null
done
pack
ls -la $W | head -30
echo "== done [$(left)s left]"
