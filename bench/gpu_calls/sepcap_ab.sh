# Sourced by the GPU calls that compare builds side by side (stop56_pg.sh, stop58_pgauto.sh): `ab "V1 V2 ..."` runs
# stop51_sepcap.sh's variants in that order, parts stream, consume, little (PARTS overrides), into
# $OUT/sepcap_V1_V2_... (sepcap.txt and each variant's devpath_cost.json). Needs `left` (the call's seconds left);
# AB_MIN (default 200): fewer seconds left than this skips it; AB_CAP (default 280): the most it may take.
ab() {
  local L; L=$(left); [ $L -lt ${AB_MIN:-200} ] && { echo "sepcap ($1) skipped: ${L}s left"; return; }
  echo "== [${L}s left] sepcap $1"
  local D=$OUT/sepcap_${1// /_}; mkdir -p $D
  local CAP=${AB_CAP:-280}
  OUT=$D VARIANTS="$1" PARTS=${PARTS:-stream,consume,little} WARMUP=0 LIMIT=$(( L - 10 < CAP ? L - 10 : CAP )) \
      bash bench/gpu_calls/stop51_sepcap.sh 2>&1 | tail -40
  cp /tmp/sc/sepcap.txt $D/sepcap.txt 2>/dev/null
  for v in $1; do cp /tmp/sc/$v/devpath_cost.json $D/$v.devpath_cost.json 2>/dev/null; done
  rm -f $D/sc.tgz
}
