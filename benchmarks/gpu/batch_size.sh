#!/usr/bin/env bash
# Device run (nvidia-h100-x1; carry runs/h100_shards_10k and .devkit/pylib.tar.xz, jsonargparse for the
# script's CLI; no TVM kit: training needs none): PAM's batch size x learning-rate schedule by time to
# best validation score (benchmarks/batch_size.py), bf16-mixed, data on the GPU.
# Before: `python -m data.featurize data/h100 --out runs/h100_shards_10k`.
# Results come back as $OUT/batch_size.json and $OUT/batch_size.log.
#   SECONDS_PER_FIT=15 SEEDS="0 1" bash benchmarks/gpu/batch_size.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4 PYTHONPATH=$PWD
source benchmarks/gpu/pylib.sh || exit 1
T0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
python3 -c "import torch, lightning; print('torch', torch.__version__, 'lightning', lightning.__version__)"
SHARDS=${SHARDS:-runs/h100_shards_10k}
BUDGET=$(( ${LIMIT:-570} - 40 ))
timeout $(( BUDGET + 30 )) python3 benchmarks/batch_size.py --shards $SHARDS --accelerator gpu --precision bf16-mixed \
  --batch-sizes ${BATCH_SIZES:-256 512 1024 2048 4096} --lr-scaling ${SCHEDULES:-none sqrt} \
  --seconds ${SECONDS_PER_FIT:-15} --seeds ${SEEDS:-0 1} --budget $BUDGET --json $OUT/batch_size.json \
  2>&1 | grep -v -i warn > $OUT/batch_size.log
echo "exit ${PIPESTATUS[0]}"
tail -n 30 $OUT/batch_size.log
echo "total $(( $(date +%s) - T0 )) s"
