#!/usr/bin/env bash
# Device run (nvidia-h100-x1, carry .devkit/pylib.tar.xz: jsonargparse, for train_speed.py's CLI): PAM
# training speed on one H100 with bf16, the dense sync-free loss (default on GPU) against the
# pair-list loss, same synthetic 500k-record shards.
set -uo pipefail
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4 PYTHONPATH=$PWD
source benchmarks/gpu/pylib.sh || exit 1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
for path in auto pairs; do
  timeout 110 python3 benchmarks/train_speed.py --accelerator gpu --precision bf16-mixed --epochs 2 \
    --records 500000 --shards-dir /tmp/bench_shards --loss-path $path --json $OUT/speed_$path.json 2>&1 \
    | grep -v -i warn | tail -4
done
