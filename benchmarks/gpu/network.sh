#!/usr/bin/env bash
# Device run: tune a whole zoo network with tune.py, as a user would, one method after another on the
# machine's GPU, each with the same deadline, trials per round and seed, and time the network compiled
# with each method's best schedules (re-read), untuned (DLight's defaults) and in torch eager mode.
# It resumes across calls: a method whose summary.json is already in $RES/<network>/<method>[-<VARIANT>]-s<seed>/
# is skipped, and a method is not started unless LIMIT leaves DEADLINE plus TAIL seconds (the re-read,
# the two compiles and torch eager after the search).
#   NETWORK=resnet_18 METHODS="pruner xgb" DEADLINE=330 LIMIT=580 bash benchmarks/gpu/network.sh
# RETIME names runs already in $RES to compile and time again (python -m bridge.network_timing), no tuning:
#   NETWORK=resnet_18 RETIME="pruner-s0 xgb-s0" bash benchmarks/gpu/network.sh
# EXTRA adds tune.py flags to every method's run, and VARIANT names such runs apart (<method>-<VARIANT>-s<seed>):
#   NETWORK=resnet_18 METHODS=pruner VARIANT=fd256 EXTRA="--first-draft-population 256 --first-draft-min-samples 25" bash benchmarks/gpu/network.sh
# Methods: pruner (`--cost-model pam --psa auto`, Pruner online), moa (`--cost-model pam-siamese-update
# --psa auto`, the shipped pretrained PAM that tune.py picks for the target), xgb (`--cost-model xgb`,
# MetaSchedule's evolution with XGBoost), mlp (`--cost-model mlp --psa auto`).
# Each method's summary.json, tuning_curve.csv, tune.py's output (tune.log) and its database (xz) go to
# $OUT/<network>-<run>-* (<run>: <method>[-<VARIANT>]-s<seed>) as soon as the method ends; move them into $RES/<network>/<run>/.
# Carry .devkit (with xgboost for xgb; `stage.sh out` with KEEP naming tune.py and its modules, below).
set -uo pipefail
export PYTHONUNBUFFERED=1
T0=$(date +%s)
[ -f .devkit/libxgboost.so.xz ] && [ ! -f /tmp/site/xgboost/lib/libxgboost.so ] && rm -rf /tmp/site
source .devkit/use-devkit.sh >/dev/null || exit 1
source benchmarks/gpu/pylib.sh >/dev/null || exit 1  # jsonargparse (tune.py's CLI)
nproc; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
NETWORK=${NETWORK:-resnet_18}
RES=${RES:-benchmarks/results/network_e2e}
DEADLINE=${DEADLINE:-330}
TAIL=${TAIL:-200}
SEED=${SEED:-0}
TARGET=${TARGET:-nvidia/nvidia-h100}
if [ -n "${RETIME:-}" ]; then  # time the compiled network again from the databases in $RES, no tuning
  shopt -s nullglob
  dirs=()
  for name in $RETIME; do  # e.g. RETIME="pruner-s0 xgb-s0"
    kept=$RES/$NETWORK/$name
    for f in database_workload database_tuning_record; do
      [ -f "$kept/$f.json.xz" ] || { echo "network.sh: no $f.json.xz in $kept" >&2; exit 2; }
    done
    work=runs/network/$NETWORK/$name; rm -rf "$work"; mkdir -p "$work/reread"
    for f in "$kept"/*database_*.json.xz; do
      n=$(basename "$f" .xz); case $n in reread-*) xz -dc "$f" > "$work/reread/${n#reread-}" ;; *) xz -dc "$f" > "$work/$n" ;; esac
    done
    dirs+=("$work")
  done
  list=$(IFS=,; echo "${dirs[*]}")
  python3 -m bridge.network_timing "[$list]" "$NETWORK" "$TARGET" --json_out "$OUT/$NETWORK-retime.json" 2>&1 \
    | grep -v -i warning | tee "$OUT/$NETWORK-retime.log"
  status=${PIPESTATUS[0]}
  echo "total $(( $(date +%s) - T0 )) s"; exit "$status"
fi
for method in ${METHODS:-pruner xgb}; do
  name=$method${VARIANT:+-$VARIANT}-s$SEED
  [ -f "$RES/$NETWORK/$name/summary.json" ] && { echo "network.sh: $name done already"; continue; }
  left=$(( ${LIMIT:-580} - ($(date +%s) - T0) ))
  if [ "$left" -lt $(( DEADLINE + TAIL )) ]; then echo "network.sh: $left s left, $name not started"; break; fi
  case $method in
    pruner) flags="--cost-model pam --psa auto" ;;
    moa) flags="--cost-model pam-siamese-update --psa auto" ;;
    mlp) flags="--cost-model mlp --psa auto" ;;
    xgb) flags="--cost-model xgb" ;;
    *) echo "network.sh: unknown method $method" >&2; exit 2 ;;
  esac
  work=runs/network/$NETWORK/$name
  back=$OUT/$NETWORK-$name  # flat: the device tool does not bring back folders nested deeper
  rm -rf "$work"; mkdir -p "$work"
  echo "network.sh: $name starts at $(( $(date +%s) - T0 )) s, $left s left"
  # shellcheck disable=SC2086
  timeout $(( left - 15 )) python3 tune.py --network "$NETWORK" --target "$TARGET" --out "$work" $flags \
    --trials 20000 --trials-per-round 16 --seed "$SEED" --deadline "$DEADLINE" --no-progress ${EXTRA:-} 2>&1 \
    | grep -v -i warning | tee "$back-tune.log" | tail -40
  for f in summary.json tuning_curve.csv; do [ -f "$work/$f" ] && cp "$work/$f" "$back-$f"; done
  for f in "$work"/database_*.json "$work"/reread/database_*.json; do  # reread/X as reread-X: flat
    n=${f#"$work"/}; [ -f "$f" ] && xz -T0 -9 -c "$f" > "$back-${n//\//-}.xz"; done
  echo "network.sh: $name ended at $(( $(date +%s) - T0 )) s"
done
echo "total $(( $(date +%s) - T0 )) s"
