#!/usr/bin/env bash
# Device run (nvidia-h100-x1, carry .devkit without xgboost): benchmarks/collect_speed.py side by side
# on a small root of the dataset's unfinished tasks, each mode topping up its own copy for EACH
# seconds; both modes' record trees come back as $OUT/speed_keep.tar.xz, the table in $OUT/speed.log,
# CPU and GPU use every 10 s in $OUT/util.log.
# Before: `python benchmarks/gpu/pending_root.py --root data/h100 --out pending --per_task 48` and
# `bash benchmarks/gpu/stage.sh out bridge/weights data/h200 data/h100 benchmarks/results`; after:
# `bash benchmarks/gpu/stage.sh in`, then `tar -C /tmp/k -xJf speed_keep.tar.xz` and
# `python -m data.merge /tmp/k/<mode> data/h100` for each mode (merge drops what is stored).
#   MODES="pipelined src512" EACH=240 ROOT=pending PER_TASK=48 bash benchmarks/gpu/collect_speed.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
T0=$(date +%s)
source .devkit/use-devkit.sh || exit 1
source benchmarks/gpu/pylib.sh || exit 1  # jsonargparse is not on the device image
nproc; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,clocks.max.sm --format=csv,noheader
source benchmarks/gpu/util_log.sh && util_log $OUT/util.log
KEEP=/tmp/speed_keep
rm -rf $KEEP
# `timeout` ends the benchmark (both modes: it kills the process group) so that the tar below still runs.
timeout $(( ${LIMIT:-570} - ($(date +%s) - T0) - 20 )) python3 benchmarks/collect_speed.py --target nvidia/nvidia-h100 \
  --root ${ROOT:-pending} --per-task ${PER_TASK:-48} --seconds ${EACH:-240} --modes ${MODES:-pipelined src512} \
  --min-repeat-ms 10 --timeout 20 --keep $KEEP > $OUT/speed.log 2>&1
echo "benchmark exit $?"; kill $UTIL
grep -v -i warning $OUT/speed.log | tail -12
tail -n 4 $OUT/util.log
[ -d $KEEP ] && tar -C $KEEP -cJf $OUT/speed_keep.tar.xz . && ls -la $OUT/speed_keep.tar.xz
echo "total $(( $(date +%s) - T0 )) s"
