#!/usr/bin/env bash
# Device run (nvidia-h100-x1, carry .devkit without xgboost, and runs/cuda_dataset to resume a tree):
# time PAM training on one H100, then collect (or resume collecting) a CUDA dataset with the
# sequential collector until a deadline: the run of docs/benchmarks.md, "CUDA dataset". The tree
# comes back as $OUT/cuda_dataset.tar.xz (holding cuda_dataset/; unpack it with `tar -C runs -xJf`),
# which h100_tuning.sh carries as runs/carry/cuda_dataset.tar.xz. Later collections: collect.sh.
# Before: `bash ../shared/gpu/pack-devkit.sh && bash benchmarks/gpu/pack-pylib.sh` (once per machine)
# and `bash benchmarks/gpu/stage.sh out`; after: `bash benchmarks/gpu/stage.sh in`.
# (Run 1 also featurized 256 of its records there: `python3 -m data.featurize $ROOT --out DIR --workers 16`.)
set -uo pipefail
T0=$(date +%s)
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
source .devkit/use-devkit.sh || exit 1
source benchmarks/gpu/pylib.sh || exit 1  # jsonargparse (the CLIs below)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
timeout 160 python3 benchmarks/train_speed.py --accelerator gpu --precision bf16-mixed --epochs 2 \
  --json $OUT/speed_1gpu_h100.json 2>&1 | grep -v -i warn | tail -20
ROOT=runs/cuda_dataset
LEFT=$(( ${BUDGET_S:-585} - ($(date +%s) - T0) - 110 ))
python3 -m data.collect --target nvidia/nvidia-h100 --deadline $LEFT \
  --network bert_base resnet_50 mobilenet_v2 resnet_18 --max-tasks 10 --per-task 32 \
  --batch-size 128 --workers 16 --sequential --min-repeat-ms 10 --timeout 20 --out $ROOT 2>&1 | tail -12
tar -C runs -cJf $OUT/cuda_dataset.tar.xz cuda_dataset
echo "total $(( $(date +%s) - T0 )) s"
