#!/usr/bin/env bash
# Device run of the tuning suite (benchmarks/tuning.py), resuming, one arm per GPU at a time (on
# nvidia-h100-x2, two arms at once, 16 cores each: ARMS="pruner moa" with two workloads runs four
# 240 s arms in one 10-minute call): arms already in
# benchmarks/results/tuning are skipped, new ones are written there and come back in
# $OUT/tuning_results.tar.xz (unpack it at the project root and commit it at once).
# Carry .devkit (with xgboost for the xgb arm; without it for the moa arm, whose pretrained PAM,
# CHECKPOINT=benchmarks/weights/pam-suite-holdout-sm_90a.pt, saw none of the suite's source networks;
# model card in benchmarks/weights/README.md; `stage.sh out lean bridge/weights noxgb` stages such a call).
#   ARMS="xgb pruner" BUDGET=120 bash benchmarks/gpu/suite.sh
#   RES=benchmarks/results/tuning_240 ARMS="xgb" BUDGET=240 LIMIT=585 WORKLOADS="dense:128,3072,768" bash benchmarks/gpu/suite.sh
# MAX_TRIALS lifts an arm's trial cap (tuning.py's --max-trials, 2,000) for budgets past 210 s.
# LABEL names the arms' files after a variant instead of the method (one arm in ARMS), so that a
# variant's settings sit beside the defaults in one RES: ARMS=pruner LABEL=pruner-r16 FILL_DEVICE=0 ...
# VARIANTS runs several settings of one method in this one job, in turn, paying the start-up once
# (benchmarks/suite_variants.py): ARMS=pruner VARIANTS="pruner-quick:quick_start=true pruner" (no spaces in a variant).
# $OUT/tuning_work.tar.xz holds the arms' databases. `python benchmarks/gpu/keep.py /work/.device/N`
# keeps the new results and databases (what each arm measured, for benchmarks/psa_quality.py
# --pool-workloads) without replacing any the tree has; by hand, from the project root,
#   tar -C /tmp/w -xJf tuning_work.tar.xz && for d in /tmp/w/runs/suite/*/*/; do r=${d#/tmp/w/runs/suite/}; \
#     mkdir -p benchmarks/results/suite_databases/$r && for f in database_workload.json database_tuning_record.json; do \
#     xz -9 -c $d$f > benchmarks/results/suite_databases/$r$f.xz; done; done
set -uo pipefail
export PYTHONUNBUFFERED=1
T0=$(date +%s)
# a warm machine may hold the kit unpacked without xgboost (use-devkit.sh unpacks once): unpack again
[ -f .devkit/libxgboost.so.xz ] && [ ! -f /tmp/site/xgboost/lib/libxgboost.so ] && rm -rf /tmp/site
source .devkit/use-devkit.sh || exit 1
source benchmarks/gpu/pylib.sh || exit 1  # jsonargparse (tuning.py's CLI)
nproc; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
GPUS=${GPUS:-$(nvidia-smi -L | wc -l)}  # arms at once, one per GPU, each on its share of the cores
RES=${RES:-benchmarks/results/tuning}  # e.g. RES=benchmarks/results/tuning_240 for the 240 s suite
WORK=${WORK:-runs/suite}  # the arms' work dirs (two suite.sh at once, e.g. one per GPU for an A/B, need two)
LEFT=$(( ${LIMIT:-560} - ($(date +%s) - T0) ))
echo "suite.sh: tuning.py starts at $(( $(date +%s) - T0 )) s"  # the kit and pylib before it (tuning.py prints its own start-up)
python3 benchmarks/tuning.py --results $RES --arms ${ARMS:-xgb pruner} --budget-s ${BUDGET:-120} \
  --time-limit $LEFT --seeds ${SEEDS:-0} ${WORKLOADS:+--workloads $WORKLOADS} ${MAX_TRIALS:+--max-trials $MAX_TRIALS} \
  ${CHECKPOINT:+--checkpoint $CHECKPOINT} ${ADAPT_EVERY:+--adapt-every $ADAPT_EVERY} ${EPOCHS:+--epochs $EPOCHS} ${BACKGROUND_UPDATE:+--background-update $BACKGROUND_UPDATE} ${MODEL_DEVICE:+--model-device $MODEL_DEVICE} ${PSA_FORMULA:+--psa-formula $PSA_FORMULA} ${BUILD_TIMEOUT:+--build-timeout $BUILD_TIMEOUT} ${MAX_SOURCE_KB:+--max-source-kb $MAX_SOURCE_KB} ${ARTIFACT:+--artifact $ARTIFACT} ${BUILD_NICE:+--build-nice $BUILD_NICE} ${REUSE_KERNELS:+--reuse-kernels $REUSE_KERNELS} ${TIMER:+--timer $TIMER} ${REREAD_TOP:+--reread-top $REREAD_TOP} ${DRAFT_GENERATIONS:+--draft-generations $DRAFT_GENERATIONS} ${REDRAFT_EVERY:+--redraft-every $REDRAFT_EVERY} ${REDRAFT_STALL:+--redraft-stall $REDRAFT_STALL} ${REDRAFT_BACKOFF:+--redraft-backoff $REDRAFT_BACKOFF} ${REDRAFT_SHARE:+--redraft-share $REDRAFT_SHARE} ${REDRAFT_MIN_SAMPLES:+--redraft-min-samples $REDRAFT_MIN_SAMPLES} ${VERIFY_GATE:+--verify-gate $VERIFY_GATE} ${PSA_WEIGHT:+--psa-weight $PSA_WEIGHT} ${PIPELINE:+--pipeline $PIPELINE} ${FILL_DEVICE:+--fill-device $FILL_DEVICE} ${STRAGGLER_GRACE:+--straggler-grace $STRAGGLER_GRACE} ${DRAFT_AHEAD:+--draft-ahead $DRAFT_AHEAD} ${LOW_DRAFT_AHEAD:+--low-draft-ahead $LOW_DRAFT_AHEAD} ${FIRST_DRAFTS_AHEAD:+--first-drafts-ahead $FIRST_DRAFTS_AHEAD} ${FIRST_VERIFY_AHEAD:+--first-verify-ahead $FIRST_VERIFY_AHEAD} ${DRAFT_NICE:+--draft-nice $DRAFT_NICE} ${SEARCH_AHEAD:+--search-ahead $SEARCH_AHEAD} ${BUILD_APART:+--build-apart $BUILD_APART} ${SIZE_FILTER_KB:+--size-filter-kb $SIZE_FILTER_KB} ${EPS_GREEDY:+--eps-greedy $EPS_GREEDY} ${LOCAL_SHARE:+--local-share $LOCAL_SHARE} ${LOCAL_PARENTS:+--local-parents $LOCAL_PARENTS} ${DRAFT_ROUNDS:+--draft-rounds $DRAFT_ROUNDS} ${QUICK_START:+--quick-start $QUICK_START} ${FIRST_DRAFT_GENERATIONS:+--first-draft-generations $FIRST_DRAFT_GENERATIONS} ${FIRST_VERIFY_GENERATIONS:+--first-verify-generations $FIRST_VERIFY_GENERATIONS} ${LABEL:+--label $LABEL} ${VARIANTS:+--variants $VARIANTS} --work $WORK --gpus $GPUS --eager 2>&1 | grep -v -i warning | tail -60
echo "suite.sh: tuning.py ended at $(( $(date +%s) - T0 )) s"
tar -cJf $OUT/tuning_results.tar.xz $RES
# the work tar holds the arms' databases only, what keep.py keeps: with the cost models and logs a lane's
# work dir was 52 MB, and compressing it in one thread took long enough to outlast a call
find $WORK -name 'database_*.json' -print0 2>/dev/null | XZ_OPT=-T0 tar -cJf $OUT/tuning_work.tar.xz --null -T -
echo "total $(( $(date +%s) - T0 )) s"
