#!/usr/bin/env bash
# ab6 (2026-11-26, ninth session): rounds of 16 (the default), without and with straggler_grace 0.5, on the 3x3 conv, one after the other on one H100
set -uo pipefail
T0=$(date +%s)
OUT0=$OUT
for g in "" 0.5; do
  name=ab6_r16${g:+_grace05}
  mkdir -p $OUT0/$name
  left=$(( 540 - ($(date +%s) - T0) ))
  [ -z "$g" ] && left=$(( left / 2 ))
  RES=benchmarks/results/ablations/$name ARMS=pruner WORKLOADS=conv2d:1,35,35,64,96,3,1,1 BUDGET=${BUDGET:-180} \
    STRAGGLER_GRACE=$g OUT=$OUT0/$name WORK=runs/$name LIMIT=$left bash benchmarks/gpu/suite.sh 2>&1 | tail -4
done
echo "total $(( $(date +%s) - T0 )) s"
