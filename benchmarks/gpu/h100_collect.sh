#!/usr/bin/env bash
# Device run (nvidia-h100-x1, carry .devkit-tvm, .whl and runs/cuda_dataset): time PAM training on
# one H100, then collect (or resume collecting) a CUDA dataset with our collector until a deadline.
# (Run 1 also featurized 256 of its records there: `python3 -m data.featurize $ROOT --out DIR --workers 16`.)
set -uo pipefail
T0=$(date +%s)
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4 PYTHONPATH=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
source .devkit-tvm/use-devkit.sh || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
timeout 160 python3 benchmarks/train_speed.py --accelerator gpu --precision bf16-mixed --epochs 2 \
  --json $OUT/speed_1gpu_h100.json 2>&1 | grep -v Warning | tail -20
ROOT=runs/cuda_dataset
LEFT=$(( ${BUDGET_S:-585} - ($(date +%s) - T0) - 110 ))
python3 -m data.collect --target nvidia/nvidia-h100 --deadline $LEFT \
  --network bert_base resnet_50 mobilenet_v2 resnet_18 --max-tasks 10 --per-task 32 \
  --batch-size 128 --workers 16 --min-repeat-ms 10 --timeout 20 --out $ROOT 2>&1 | tail -12
tar -C $ROOT -cJf $OUT/cuda_dataset.tar.xz .
echo "total $(( $(date +%s) - T0 )) s"
