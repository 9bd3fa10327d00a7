#!/usr/bin/env bash
# One-off diagnostic (2026-11-26, ninth session): are in-tuning builds slower than isolated ones, and why?
set -uo pipefail
T0=$(date +%s)
source .devkit/use-devkit.sh >/dev/null || exit 1
source benchmarks/gpu/pylib.sh || exit 1
{ lscpu; nproc; free -g; } > $OUT/machine.txt 2>&1
python3 benchmarks/batch_build.py --databases "[devdiag/db/dense,devdiag/db/bmm]" --picks 128 --batch 64 --serial 8 \
  --max_source_kb 512 --json_out $OUT/bb_iso.json 2>&1 | grep -v -i warning | tail -12
echo "batch_build done at $(( $(date +%s) - T0 )) s"
vmstat 2 > $OUT/vmstat.txt 2>&1 &
VM=$!
RES=devdiag/res ARMS=pruner WORKLOADS="${WORKLOADS:-dense:128,3072,768 batch_matmul:12,128,128,64}" BUDGET=${BUDGET:-150} \
  FILL_DEVICE=64 LIMIT=$(( ${LIMIT:-580} - ($(date +%s) - T0) )) WORK=runs/diag bash benchmarks/gpu/suite.sh 2>&1 | tail -8
kill $VM
find devdiag/res -name '*.csv' | head; tar -cJf $OUT/res.tar.xz devdiag/res
echo "total $(( $(date +%s) - T0 )) s"
