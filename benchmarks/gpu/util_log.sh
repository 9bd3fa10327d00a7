#!/usr/bin/env bash
# Sourced by the device collection scripts: `util_log FILE` logs the CPU's busy % (from /proc/stat)
# and the GPU's utilization % every 10 s into FILE in the background, seconds counted from $T0; its
# pid is in $UTIL (kill it when done). Usage: T0=$(date +%s); source benchmarks/gpu/util_log.sh; util_log $OUT/util.log
util_log() {
  (
    a=($(head -1 /proc/stat))
    while sleep 10; do
      b=($(head -1 /proc/stat))
      total=0; for i in 1 2 3 4 5 6 7 8; do total=$(( total + b[i] - a[i] )); done
      idle=$(( b[4] + b[5] - a[4] - a[5] ))
      echo "$(( $(date +%s) - T0 )) s cpu $(( 100 * (total - idle) / (total > 0 ? total : 1) ))% gpu $(nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits | paste -sd/)%"
      a=("${b[@]}")
    done
  ) > "$1" 2>&1 &
  UTIL=$!
}
