#!/usr/bin/env bash
# Side-by-side suite arms with different settings in one device call: one `suite.sh` per GPU ("lane"),
# each on its GPU (CUDA_VISIBLE_DEVICES) and its share of the cores (taskset), with its own results
# folder, work dir and $OUT/laneI/ (tuning_results.tar.xz, tuning_work.tar.xz) and log $OUT/laneI.log;
# with three lanes or more, each lane's folder and log come back as one $OUT/laneI.tar, made as soon as
# the lane ends (a call that outruns its limit still brings back the lanes that finished).
# Each argument is one lane: the environment suite.sh reads (RES, ARMS, WORKLOADS, REDRAFT_STALL,
# PIPELINE, ...). LIMIT (default 585) is the whole call's; each lane's suite.sh gets what is left.
# A lane may run several suite.sh jobs one after another, separated by " ;; " (e.g. an arm on one
# workload, then another arm on another seed: tuning.py crosses ARMS x WORKLOADS x SEEDS, so one job
# cannot say that); each job has its own settings and gets the call's time left. The lane's tars are
# its last job's, so the jobs of a lane must share RES (WORK is the lane's). The lane's log holds all.
# Each job pays its own start-up (50-80 s: build workers, NVRTC, eager timing), so two 225 s arms fit a
# 588 s call only as one job (ARMS='xgb pruner', SEEDS='0 1', or an A/B's two settings as
# VARIANTS='pruner-quick:quick_start=true pruner'), not as two jobs joined by " ;; ".
# A job with less time left than its BUDGET + 90 s is not started (it would start no arm). Two lanes
# that would write the same arm (RES, workload, ARMS, LABEL or VARIANTS, seed) are refused before any starts:
# both would run, and the later would overwrite the other's CSV in the shared results folder.
#   bash benchmarks/gpu/lanes.sh "ARMS=xgb WORKLOADS=net:resnet_50:4 ;; ARMS=xgb SEEDS=1 WORKLOADS=dense:128,3072,768"
#   bash benchmarks/gpu/lanes.sh \
#     "RES=benchmarks/results/ablations/stall3 ARMS='pruner moa' WORKLOADS=batch_matmul:12,128,128,64 REDRAFT_STALL=3" \
#     "RES=benchmarks/results/ablations/every2 ARMS=pruner WORKLOADS=batch_matmul:12,128,128,64 REDRAFT_EVERY=2"
# Lane 0 (the machine's first cores) built 1.5-2.5x slower than lane 1 in every call of 2026-11-28 (docs/benchmarks.md,
# "Drafting for a low potential space alongside"): run each setting of an A/B in both lanes across calls.
# Keep what comes back with `python benchmarks/gpu/keep.py /work/.device/N --label NAME` (each lane's
# new arm CSVs, eager times, xz-compressed databases and log, never replacing what the tree has),
# then commit at once.
set -uo pipefail
T0=$(date +%s)
# the kit is unpacked once, here (lanes would race to unpack it); suite.sh's own check then finds it whole
[ -f .devkit/libxgboost.so.xz ] && [ ! -f /tmp/site/xgboost/lib/libxgboost.so ] && rm -rf /tmp/site
source .devkit/use-devkit.sh >/dev/null || exit 1
source benchmarks/gpu/pylib.sh || exit 1  # once, before the lanes start: each lane's suite.sh then finds it unpacked (pylib.sh says why)
lanes=$#
gpus=$(nvidia-smi -L | wc -l)
[ "$lanes" -ge 1 ] && [ "$lanes" -le "$gpus" ] || { echo "lanes.sh: $lanes lanes for $gpus GPUs" >&2; exit 2; }
cores=$(nproc)
per=$(( cores / lanes ))
[ "$per" -ge 1 ] || { echo "lanes.sh: $lanes lanes need at least $lanes cores; $cores here" >&2; exit 2; }
split() {  # the lane's jobs, one a line
  local rest=$1
  while [[ $rest == *" ;; "* ]]; do echo "${rest%% ;; *}"; rest=${rest#* ;; }; done
  echo "$rest"
}
i=0
for lane in "$@"; do  # refuse a lane whose jobs use two results folders before any lane starts
  res=
  while IFS= read -r job; do
    r=$(eval "export $job"; echo "${RES:-benchmarks/results/tuning}")
    [ -z "$res" ] || [ "$r" = "$res" ] || { echo "lanes.sh: lane $i's jobs use two results folders ($res, $r)" >&2; exit 2; }
    res=$r
  done < <(split "$lane")
  i=$(( i + 1 ))
done
arms_of() {  # the arms a job would write: "RES|workload|arm file name|seed", one a line ("*": suite.sh's default workloads)
  ( set -f; eval "export $1"
    names=${LABEL:-${ARMS:-xgb pruner}}
    [ -z "${VARIANTS:-}" ] || names=$(for v in $VARIANTS; do echo "${v%%:*}"; done)  # LABEL[:KNOB=VALUE,...]
    for w in ${WORKLOADS:-*}; do for a in $names; do for s in ${SEEDS:-0}; do
      echo "${RES:-benchmarks/results/tuning}|$w|$a|$s"; done; done; done )
}
declare -A owner=()  # refuse two lanes writing one arm's CSV in one results folder (both run; the later overwrites)
i=0
for lane in "$@"; do
  while IFS= read -r job; do
    while IFS='|' read -r res w a s; do
      for key in "${!owner[@]}"; do
        IFS='|' read -r res2 w2 a2 s2 <<< "$key"
        if [ "${owner[$key]}" != "$i" ] && [ "$res|$a|$s" = "$res2|$a2|$s2" ] && { [ "$w" = "$w2" ] || [ "$w" = "*" ] || [ "$w2" = "*" ]; }; then
          echo "lanes.sh: lanes ${owner[$key]} and $i both run arm $a seed $s of ${w/#\*/the default workloads} in $res" >&2; exit 2
        fi
      done
      owner["$res|$w|$a|$s"]=$i
    done < <(arms_of "$job")
  done < <(split "$lane")
  i=$(( i + 1 ))
done
i=0
for lane in "$@"; do
  mkdir -p "$OUT/lane$i"
  log=$OUT/lane$i.log
  : > "$log"
  (
    while IFS= read -r job; do
      (
        eval "export $job"
        export CUDA_VISIBLE_DEVICES=$i GPUS=1 TVM_NUM_THREADS=$per OUT=$OUT/lane$i WORK=runs/lane$i
        export LIMIT=$(( ${LIMIT:-585} - ($(date +%s) - T0) ))
        # suite.sh's start-up (50-60 s) and an arm's tail past its budget (about 40 s): a job with less left
        # would start no arm, and its start-up and tars could outlast the call and lose every lane's files
        need=$(( ${BUDGET:-120} + 90 ))
        [ "$LIMIT" -ge "$need" ] || { echo "== job not started: $job (LIMIT $LIMIT; an arm of ${BUDGET:-120} s needs about $need)"; exit 0; }
        echo "== job: $job (LIMIT $LIMIT)"
        taskset -c $(( i * per ))-$(( (i + 1) * per - 1 )) bash benchmarks/gpu/suite.sh < /dev/null
      ) >> "$log" 2>&1
    done < <(split "$lane")
    if [ $(( lanes * 3 )) -gt 8 ]; then  # two tars and a log a lane: over the 8 files a call brings back;
      # one tar a lane instead (keep.py unpacks it), made as soon as the lane ends: a call cut short keeps
      # the lanes that finished
      mv "$log" "$OUT/lane$i/lane.log" && tar -cf "$OUT/lane$i.tar" -C "$OUT" "lane$i" && rm -rf "${OUT:?}/lane$i"
    fi
  ) &
  i=$(( i + 1 ))
done
wait
for (( j = 0; j < lanes; j++ )); do
  echo "== lane $j"
  if [ -f "$OUT/lane$j.tar" ]; then tar -xOf "$OUT/lane$j.tar" "lane$j/lane.log" | tail -6; else tail -6 "$OUT/lane$j.log"; fi
done
echo "total $(( $(date +%s) - T0 )) s"
