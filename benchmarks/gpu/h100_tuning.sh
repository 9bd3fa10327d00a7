#!/usr/bin/env bash
# Device run (nvidia-h100-x1, carry .devkit (with xgboost) and runs/carry/cuda_dataset.tar.xz, the
# CUDA records of h100_collect.sh): featurize the H100 records there, fit PAM on them (bf16),
# export it, then benchmarks/tuning.py: Pruner (PSA draft + MoA-adapted PAM) versus MetaSchedule's
# default (evolution + XGBoost), same tasks, trials and seed, in one run. Results under $OUT.
# The whole tree must fit in 64 MiB with the 66.3 MB kit: the caller moves data/embedded and
# tests/fixtures out of the tree for this run (no room for a trained artifact either: it is made here).
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
python3 benchmarks/tuning.py --target nvidia/nvidia-h100 --psa h100 --checkpoint runs/pam_h100.pt \
  --trials ${TRIALS:-150} --deadline $LEFT --out runs/bench_tuning 2>&1 | tee $OUT/tuning.log | grep -v Warning | tail -30
cp runs/bench_tuning/tuning_curves.csv runs/bench_tuning/tuning_curves.png $OUT/ 2>/dev/null
tar -C runs -cJf $OUT/bench_tuning_logs.tar.xz --exclude='*.so' --exclude='*.tar' bench_tuning pam_h100/best.ckpt 2>/dev/null
echo "total $(( $(date +%s) - T0 )) s"
