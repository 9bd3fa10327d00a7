#!/usr/bin/env bash
# Device run (nvidia-h100-x1; NO TVM kit: training needs only torch and the shards): pretrain the
# shipped cost models with train.py on one GPU (PAM and the MLP at once, each with its packaged
# config plus the GPU flags below), test them on their within-task test split, and bring the runs
# back as $OUT/train.tar.xz (each run's config.yaml, metrics.csv, training_curve.png and best
# checkpoint) with the logs. Export here afterwards (bridge.export --half true, bridge/weights/README.md).
# Before: `bash benchmarks/gpu/pack-pylib.sh --train` (jsonargparse, docstring_parser, typeshed_client)
# `python -m data.featurize data/h100 --out $SHARDS --workers 2` (31.7k records: 53 MB) and
# `bash benchmarks/gpu/stage.sh out data/h100 data/h200 benchmarks/results bridge/weights benchmarks/weights` (room for them); carry
# [".devkit/pylib.tar.xz", ".trainkit", "$SHARDS"]; after: `stage.sh in`, `mkdir -p runs/gpu_train && cat
# /work/.device/N/train.tar.xz* | tar -C runs/gpu_train -xJf -` (over 15 MiB it comes back in parts).
#   SHARDS=runs/h100_shards_31k SEED=1 MODELS="pam mlp" bash benchmarks/gpu/train.sh
#   SHARDS=runs/h100_shards_31k SEEDS="1 2 3" bash benchmarks/gpu/train.sh      # 3 fits of each model
# EXTRA="shell line" runs beside the fits (e.g. benchmarks/quality.py hold-outs on the same GPU) and
# is waited for; whatever it writes under $OUT/extra comes back in extra.tar.xz.
set -uo pipefail
T0=$(date +%s)
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=2
source benchmarks/gpu/pylib.sh || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
SHARDS=${SHARDS:-runs/h100_shards_31k}
# GPU= (empty) and FIT_ARGS="--trainer.max_epochs 2" make a quick CPU check of this script (tests/)
GPU=${GPU-"--trainer.accelerator gpu --trainer.precision bf16-mixed --data.data_on_device true"}
LEFT=$(( ${LIMIT:-570} - 45 ))
# SEEDS="1 2 3" fits each model once a seed, all at once: the first seed's run is gpu_<model> (the one
# to export), the others gpu_<model>_s<seed>, to show the spread (bridge/weights/README.md)
SEEDS=${SEEDS:-${SEED:-1}}
first=${SEEDS%% *}
fit() {  # fit, then test, packaged config $1 (pam, mlp) with seed $2 into runs/gpu_$1$3/version_N (the newest)
  local name=$1 seed=$2 run_name=gpu_$1$3 log=$OUT/train_$1$3.log
  timeout $(( LEFT - 40 )) python3 train.py fit --config $name --data.shards $SHARDS --seed_everything $seed $GPU \
    --trainer.logger.init_args.name $run_name ${FIT_ARGS:-} > $log 2>&1
  echo "fit $name$3 exit $? at $(( $(date +%s) - T0 )) s" >> $log
  local run=$(ls -d runs/$run_name/version_* 2>/dev/null | sort -V | tail -1)
  local best=$(ls $run/checkpoints/best-*.ckpt 2>/dev/null | head -1)
  [ -n "$best" ] && timeout 60 python3 train.py test --config $name --data.shards $SHARDS $GPU \
    --trainer.logger.init_args.name ${run_name}_test --ckpt_path $best >> $log 2>&1
}
mkdir -p $OUT/extra
pids=()
for m in ${MODELS:-pam mlp}; do
  for s in $SEEDS; do
    tag=; [ "$s" = "$first" ] || tag=_s$s
    fit $m $s "$tag" & pids+=($!)
  done
done
[ -z "${EXTRA:-}" ] || { timeout $LEFT bash -c "$EXTRA" > $OUT/extra.log 2>&1 & pids+=($!); }
wait "${pids[@]}"
for log in $OUT/train_*.log; do echo "== $(basename $log .log)"; grep -E "best|test_pairwise|test_peak|exit" $log | tail -8; done
rm -f runs/gpu_*/version_*/checkpoints/last.ckpt
tar -C runs -cJf $OUT/train.tar.xz $(cd runs && ls -d gpu_* 2>/dev/null)
# a file over 16 MiB does not come back from a device call (four PAM fits and the MLP: 21 MB), so a
# larger tarball comes back in parts: `cat train.tar.xz* | tar -xJf -` takes either form
PART=${PART_MB:-15}
if [ "$(stat -c %s $OUT/train.tar.xz)" -gt $(( PART * 1048576 )) ]; then
  split -b ${PART}M $OUT/train.tar.xz $OUT/train.tar.xz.part- && rm $OUT/train.tar.xz
fi
ls -la $OUT/train.tar.xz*
[ -z "$(ls -A $OUT/extra)" ] || tar -C $OUT -cJf $OUT/extra.tar.xz extra
rm -rf $OUT/extra
echo "total $(( $(date +%s) - T0 )) s"
