#!/usr/bin/env bash
# Device run (nvidia-h200-x2, carry .devkit/pylib.tar.xz: training needs torch, Lightning and h5py,
# train_speed.py's CLI jsonargparse): PAM training speed on one H200, then on two under DDP (NCCL),
# same synthetic 1M-record shards.
set -uo pipefail
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4 PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
source benchmarks/gpu/pylib.sh || exit 1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout 200 python3 benchmarks/train_speed.py --accelerator gpu --precision bf16-mixed --epochs 3 \
  --json $OUT/speed_1gpu.json 2>&1 | grep -v -i warn | tail -12
timeout 200 python3 benchmarks/train_speed.py --accelerator gpu --precision bf16-mixed --epochs 3 \
  --devices 2 --strategy ddp --json $OUT/speed_2gpu.json 2>&1 | grep -v -i warn | tail -12
