#!/usr/bin/env bash
# Make room for the TVM kit in a device run: a run carries the working tree and .devkit within
# 67.1 MB, and the kit alone is 62.9 MB (66.3 MB with xgboost). `stage.sh out` moves the tracked
# data a device run does not need (the embedded CPU dataset, test fixtures, docs, pictures) to
# /tmp/pruner-stage; `stage.sh in` puts it back. Run both from the project root, around the run.
#   bash benchmarks/gpu/stage.sh out [EXTRA_PATH ...]   # e.g. bridge/pretrained beside the xgboost kit
#   KEEP="data/h100" bash benchmarks/gpu/stage.sh out   # a collection run resumes into data/h100
#   bash benchmarks/gpu/stage.sh in
# `lean` in the paths also moves out every file a tuning-suite run does not import (the data, the
# results but benchmarks/results/tuning*, the other benchmarks and device scripts, README, packaging,
# and the modules a suite arm never imports: the CLIs, training, featurizing; listed from the modules
# an llvm run of all three arms imported, 2026-11-25):
# with the xgboost kit (66.4 MB with pylib.tar.xz) only about 0.6 MB of the tree fits, and the device
# tool counts file-system blocks (4 KiB a file at least), not bytes. RES names the suite's results
# folder to keep (default benchmarks/results/tuning; or one under a folder of results, e.g.
# benchmarks/results/ablations/convs_ab, whose siblings go). Its arm CSVs stay only as empty files: a device
# run only asks whether an arm's file exists (to skip it), and the 240 s suite's CSVs alone (356 KiB)
# would push a call with the xgboost kit over the carry limit; `stage.sh in` puts the CSVs back.
#   bash benchmarks/gpu/stage.sh out lean bridge/weights benchmarks/weights
# `noxgb` in the paths moves the kit's xgboost parts out too (`stage.sh in` puts them back), for a call
# of moa arms, whose pretrained PAMs (benchmarks/weights, 1.7 MB with two models) do not fit beside xgboost
# (staged so, the tree is 2.3 MB and the kit 59.8 MB, under the 64 MiB limit):
#   bash benchmarks/gpu/stage.sh out lean bridge/weights noxgb
# STAGE names the staging folder (default /tmp/pruner-stage).
set -euo pipefail
stage=${STAGE:-/tmp/pruner-stage}
case "${1:-}" in
  out)
    shift
    # an earlier staging not put back: moving into it would nest each folder in its stale copy (X/X),
    # and `in` would then restore the stale copy over the tree
    if [ -d "$stage" ] && [ -n "$(ls -A "$stage")" ]; then
      echo "stage.sh: $stage holds an earlier staging; run 'stage.sh in' (or remove it) first" >&2; exit 3
    fi
    mkdir -p "$stage"
    paths=()
    for p in "$@"; do
      if [ "$p" = lean ]; then
        keep=${RES:-benchmarks/results/tuning}
        for r in benchmarks/results/*; do
          if [ "$r" = "$keep" ]; then continue
          elif [[ $keep == "$r"/* ]]; then  # RES inside it (ablations/<name>): its other entries go
            for q in "$r"/*; do [ "$q" = "$keep" ] || paths+=("$q"); done
          else paths+=("$r"); fi
        done
        for f in benchmarks/*.py benchmarks/gpu/*; do
          case "$f" in benchmarks/tuning.py|benchmarks/eager.py|benchmarks/suite_report.py|benchmarks/suite_reread.py|benchmarks/suite_variants.py|benchmarks/suite_shards.py|benchmarks/suite_eager.py|benchmarks/__init__.py|\
            benchmarks/gpu/suite.sh|benchmarks/gpu/lanes.sh|benchmarks/gpu/pylib.sh|benchmarks/gpu/stage.sh|benchmarks/gpu/lean_check.py) ;; *) paths+=("$f") ;; esac
        done
        paths+=(data/h200 data/collect.py data/collect_pipeline.py data/shards.py data/datamodule.py data/task_batches.py
          bridge/evaluate.py train.py README.md Makefile .ci pyproject.toml setup.cfg
          data/featurize.py data/merge.py data/card.py data/synthetic.py bridge/cli.py bridge/tracking.py
          bridge/network_timing.py pruner_lightning pruner_models/module.py pruner_models/metrics.py tune.py)
      elif [ "$p" = noxgb ]; then  # the kit without xgboost: room for benchmarks/weights (a moa call)
        paths+=(.devkit/libxgboost.so.xz .devkit/xgboost_py.tar.xz)
      else
        paths+=("$p")
      fi
    done
    for p in data/embedded data/h100 tests docs ${paths[@]+"${paths[@]}"}; do
      [ -e "$p" ] || continue
      case " ${KEEP:-} " in *" $p "*) continue ;; esac
      mkdir -p "$stage/$(dirname "$p")"
      mv -T "$p" "$stage/$p"
    done
    if [ -n "${keep:-}" ] && [ -d "$keep" ]; then  # lean: the kept results folder's arm CSVs, as empty files
      while IFS= read -r -d '' f; do
        mkdir -p "$stage/$(dirname "$f")"
        mv "$f" "$stage/$f"
        : > "$f"
      done < <(find "$keep" -name '*-s*.csv' -size +0 -print0)
    fi
    git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | awk '{printf "tree left: %.2f MB", $1/1e6}' || true
    git ls-files -z --cached --others --exclude-standard | du -ck --files0-from=- 2>/dev/null | tail -1 | awk '{printf " (%d KiB in blocks", $1}' || true
    du -sk .devkit 2>/dev/null | awk '{printf "; .devkit %d KiB; the carry limit is 65536 KiB", $1}' || true
    echo ")"
    ;;
  in)
    [ -d "$stage" ] || { echo "nothing staged"; exit 0; }
    cp -a "$stage"/. .
    rm -rf "$stage"
    git status --short | head -5
    ;;
  *) echo "usage: stage.sh out|in [paths]"; exit 2 ;;
esac
