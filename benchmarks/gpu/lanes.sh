#!/usr/bin/env bash
# Side-by-side suite arms with different settings in one device call: one `suite.sh` per GPU ("lane"),
# each on its GPU (CUDA_VISIBLE_DEVICES) and its share of the cores (taskset), with its own results
# folder, work dir and $OUT/laneI/ (tuning_results.tar.xz, tuning_work.tar.xz) and log $OUT/laneI.log;
# with three lanes or more, each lane's folder and log come back as one $OUT/laneI.tar.
# Each argument is one lane: the environment suite.sh reads (RES, ARMS, WORKLOADS, REDRAFT_STALL,
# PIPELINE, ...). LIMIT (default 585) is the whole call's; each lane's suite.sh gets what is left.
# A lane may run several suite.sh jobs one after another, separated by " ;; " (e.g. an arm on one
# workload, then another arm on another seed: tuning.py crosses ARMS x WORKLOADS x SEEDS, so one job
# cannot say that); each job has its own settings and gets the call's time left. The lane's tars are
# its last job's, so the jobs of a lane must share RES (WORK is the lane's). The lane's log holds all.
#   bash benchmarks/gpu/lanes.sh "ARMS=xgb WORKLOADS=net:resnet_50:4 ;; ARMS=xgb SEEDS=1 WORKLOADS=dense:128,3072,768"
#   bash benchmarks/gpu/lanes.sh \
#     "RES=benchmarks/results/ablations/stall3 ARMS='pruner moa' WORKLOADS=batch_matmul:12,128,128,64 REDRAFT_STALL=3" \
#     "RES=benchmarks/results/ablations/every2 ARMS=pruner WORKLOADS=batch_matmul:12,128,128,64 REDRAFT_EVERY=2"
# Keep what comes back with `python benchmarks/gpu/keep.py /work/.device/N --label NAME` (each lane's
# new arm CSVs, eager times, xz-compressed databases and log, never replacing what the tree has),
# then commit at once.
set -uo pipefail
T0=$(date +%s)
# the kit is unpacked once, here (lanes would race to unpack it); suite.sh's own check then finds it whole
[ -f .devkit/libxgboost.so.xz ] && [ ! -f /tmp/site/xgboost/lib/libxgboost.so ] && rm -rf /tmp/site
source .devkit/use-devkit.sh >/dev/null || exit 1
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
        echo "== job: $job (LIMIT $LIMIT)"
        taskset -c $(( i * per ))-$(( (i + 1) * per - 1 )) bash benchmarks/gpu/suite.sh < /dev/null
      ) >> "$log" 2>&1
    done < <(split "$lane")
  ) &
  i=$(( i + 1 ))
done
wait
for f in "$OUT"/lane*.log; do echo "== $f"; tail -6 "$f"; done
if [ $(( lanes * 3 )) -gt 8 ]; then  # two tars and a log a lane: over the 8 files a call brings back
  for (( j = 0; j < lanes; j++ )); do  # one tar a lane instead (keep.py unpacks it)
    mv "$OUT/lane$j.log" "$OUT/lane$j/lane.log" && tar -cf "$OUT/lane$j.tar" -C "$OUT" "lane$j" && rm -rf "${OUT:?}/lane$j"
  done
fi
echo "total $(( $(date +%s) - T0 )) s"
