#!/usr/bin/env bash
# Device run (nvidia-h100-x1, carry .devkit without xgboost): collect H100 records with the pipelined
# collector into runs/h100_collect until a deadline, and bring them back as $OUT/h100_collect.tar.xz
# (unpack under data/ and commit at once). NETWORKS picks the zoo networks of this call, so calls that
# cannot carry earlier data still collect new tasks.
#   NETWORKS="vit_b16 gpt2" MAX_TASKS=4 PER_TASK=48 bash benchmarks/gpu/collect.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
T0=$(date +%s)
source .devkit/use-devkit.sh || exit 1
# jsonargparse (data.collect's CLI) is not on the device image: .devkit/pylib.tar.xz carries it
mkdir -p /tmp/pylib && tar -C /tmp/pylib -xJf .devkit/pylib.tar.xz
export PYTHONPATH=$PWD:/tmp/pylib:$PYTHONPATH
nproc; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,clocks.max.sm --format=csv,noheader
ROOT=runs/h100_collect
LEFT=$(( ${LIMIT:-560} - ($(date +%s) - T0) - 40 ))
# The collector's --deadline stops new batches; `timeout` guarantees the tar below still runs.
timeout $(( LEFT + 15 )) python3 -m data.collect --target nvidia/nvidia-h100 --deadline $(( LEFT - 60 )) \
  --network ${NETWORKS:-vit_b16 gpt2} --max-tasks ${MAX_TASKS:-4} --per-task ${PER_TASK:-48} \
  --min-repeat-ms 10 --timeout 20 --compress --out $ROOT > $OUT/collect.log 2>&1
echo "collector exit $?"; grep -v -i warning $OUT/collect.log | tr '\r' '\n' | grep -v "^collect:" | tail -12
tar -C runs -cJf $OUT/h100_collect.tar.xz h100_collect
echo "total $(( $(date +%s) - T0 )) s"
