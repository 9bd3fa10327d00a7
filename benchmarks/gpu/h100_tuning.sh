#!/usr/bin/env bash
# Device run (nvidia-h100-x1, carry .devkit (with xgboost) and runs/carry/cuda_dataset.tar.xz, the
# $OUT/cuda_dataset.tar.xz of h100_collect.sh): featurize the H100 records there, fit PAM on them
# (bf16), export it, then benchmarks/tuning.py on the three operators of docs/benchmarks.md ("Tuning:
# draft-then-verify ..."): the moa arm (PSA draft + this PAM, adapted online) against xgb
# (MetaSchedule's default), published draft sizes, rounds of 10 trials, TRIALS (50) trials an arm,
# the time left split over the six arms. Results under $OUT: tuning.log, report.txt, tuning.png (the
# suite's report of runs/bench_tuning) and bench_tuning.tar.xz (the arms' curves, the PAM checkpoint).
# Before: `bash benchmarks/gpu/stage.sh out` (the tree must fit beside the 66.3 MB kit; no room for a
# trained artifact either: it is made here); after: `bash benchmarks/gpu/stage.sh in`.
set -uo pipefail
T0=$(date +%s)
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
source .devkit/use-devkit.sh || exit 1
source benchmarks/gpu/pylib.sh || exit 1  # jsonargparse (the CLIs below)
mkdir -p runs && tar -C runs -xJf runs/carry/cuda_dataset.tar.xz
python3 -m data.featurize runs/cuda_dataset --out runs/cuda_shards --workers 16 2>&1 | tail -4
python3 benchmarks/gpu/fit_pam.py runs/cuda_shards runs/pam_h100 --epochs 40 --accelerator gpu 2>&1 | grep -E "best|ShardDataModule"
python3 -m bridge.export runs/pam_h100/best.ckpt --out runs/pam_h100.pt
LEFT=$(( ${BUDGET_S:-585} - ($(date +%s) - T0) - 45 ))
BUDGET=$(( (LEFT / 6 - 15) * 10 / 11 ))  # tuning.py starts an arm only with budget x 1.1 + 15 s left
python3 benchmarks/tuning.py --target nvidia/nvidia-h100 --psa h100 --checkpoint runs/pam_h100.pt --arms xgb moa \
  --workloads conv2d:1,56,56,64,64,3,1,1 conv2d:1,56,56,64,256,1,1,0 dense:128,768,768 \
  --max-trials ${TRIALS:-50} --trials-per-round 10 --population 1536 --potential 512 --min-repeat-ms 100 \
  --budget-s $BUDGET --time-limit $LEFT --results runs/bench_tuning 2>&1 | tee $OUT/tuning.log | grep -v Warning | tail -30
python3 benchmarks/tuning.py --report --results runs/bench_tuning --plot $OUT/tuning.png > $OUT/report.txt 2>&1
grep -v Warning $OUT/report.txt | tail -30
tar -C runs -cJf $OUT/bench_tuning.tar.xz --exclude='*.so' --exclude='*.tar' bench_tuning pam_h100/best.ckpt 2>/dev/null
echo "total $(( $(date +%s) - T0 )) s"
