#!/usr/bin/env bash
# Device run (nvidia-h100-x1, carry .devkit without xgboost): collect H100 records with the pipelined
# collector until a deadline, and bring the device folder back as $OUT/h100_collect.tar.xz.
# Before: `bash ../shared/gpu/pack-devkit.sh && bash benchmarks/gpu/pack-pylib.sh` (once per machine)
# and `KEEP="data/h100" bash benchmarks/gpu/stage.sh out bridge/weights data/h200 benchmarks/results`; after: `bash benchmarks/gpu/stage.sh in`.
#   NETWORKS="mobilenet_v2 bert_base" MAX_TASKS=8 PER_TASK=64 bash benchmarks/gpu/collect.sh
# TOP_UP=1 adds records to the tasks already in ROOT (of NETWORKS, or all) without extracting the
# networks (saves 60-150 s a call); raise PER_TASK above what the tasks hold. Plan new networks on the
# CPU host first (`python -m data.collect --target nvidia/nvidia-h100 --network N --plan-only --compress
# --out data/h100`, same --size/--max-tasks), then TOP_UP=1 measures them here without extracting.
# SIZE= sets the networks' input size (image side / sequence length; default: each one's own).
# MAX_SOURCE_KB=512 skips kernels with more CUDA source than that (refused before NVRTC, not stored).
# On an H200 (TVM has no tag for it; it is the H100's chip, sm_90a, with more and faster memory) keep
# the H100's target and collect into a root of its own: ROOT=data/h200 on kind nvidia-h200.
# ROOT=data/h100 (the default) resumes into the shipped dataset: the collector writes under
# ROOT/cuda-sm_90a (the target's device folder) and skips the schedules already stored; the tar holds
# that whole updated folder (unpack it with `tar -C data/h100 -xJf` and commit at once). When the
# tree no longer fits beside the kit (67.1 MB in all), collect into a fresh root with a seed of its
# own and merge what comes back: ROOT=runs/h100_collect SEED=7 bash benchmarks/gpu/collect.sh, then
# `tar -C /tmp/c -xJf h100_collect.tar.xz && python -m data.merge /tmp/c data/h100` (drops repeats). Every 10 s, CPU busy % and GPU utilization go to $OUT/util.log.
set -uo pipefail
export PYTHONUNBUFFERED=1
T0=$(date +%s)
source .devkit/use-devkit.sh || exit 1
source benchmarks/gpu/pylib.sh || exit 1  # jsonargparse (data.collect's CLI) is not on the device image
nproc; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,clocks.max.sm --format=csv,noheader
ROOT=${ROOT:-data/h100}
DEVICE=cuda-sm_90a  # tvm_env.target_device_name of nvidia/nvidia-h100 (and of any sm_90a target): where the collector writes
source benchmarks/gpu/util_log.sh && util_log $OUT/util.log
LEFT=$(( ${LIMIT:-560} - ($(date +%s) - T0) - 40 ))
# The collector's --deadline stops new batches; `timeout` guarantees the tar below still runs.
timeout $(( LEFT + 15 )) python3 -m data.collect --target ${TARGET:-nvidia/nvidia-h100} --deadline $(( LEFT - 60 )) \
  $( [ -n "${TOP_UP:-}" ] && echo "--top-up ${NETWORKS:+--network $NETWORKS}" || echo "--network ${NETWORKS:-mobilenet_v2 bert_base}" ) --max-tasks ${MAX_TASKS:-8} --per-task ${PER_TASK:-64} \
  ${SIZE:+--size $SIZE} ${MAX_SOURCE_KB:+--max-source-kb $MAX_SOURCE_KB} --samplers ${SAMPLERS:-2} --seed ${SEED:-0} --min-repeat-ms 10 --timeout 20 --compress --out $ROOT > $OUT/collect.log 2>&1
echo "collector exit $?"; kill $UTIL
grep -v -i warning $OUT/collect.log | tr '\r' '\n' | grep -v "^collect:" | tail -14
tail -n 4 $OUT/util.log
tar -C $ROOT -cJf $OUT/h100_collect.tar.xz $DEVICE && ls -la $OUT/h100_collect.tar.xz
echo "total $(( $(date +%s) - T0 )) s"
