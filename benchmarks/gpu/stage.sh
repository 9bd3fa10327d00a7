#!/usr/bin/env bash
# Make room for the TVM kit in a device run: a run carries the working tree and .devkit within
# 67.1 MB, and the kit alone is 62.9 MB (66.3 MB with xgboost). `stage.sh out` moves the tracked
# data a device run does not need (the embedded CPU dataset, test fixtures, docs, pictures) to
# /tmp/pruner-stage; `stage.sh in` puts it back. Run both from the project root, around the run.
#   bash benchmarks/gpu/stage.sh out [EXTRA_PATH ...]   # e.g. bridge/pretrained beside the xgboost kit
#   KEEP="data/h100" bash benchmarks/gpu/stage.sh out   # a collection run resumes into data/h100
#   bash benchmarks/gpu/stage.sh in
set -euo pipefail
stage=/tmp/pruner-stage
case "${1:-}" in
  out)
    shift
    mkdir -p "$stage"
    for p in data/embedded data/h100 tests docs "$@"; do
      [ -e "$p" ] || continue
      case " ${KEEP:-} " in *" $p "*) continue ;; esac
      mkdir -p "$stage/$(dirname "$p")"
      mv "$p" "$stage/$p"
    done
    git ls-files -z | du -cb --files0-from=- 2>/dev/null | tail -1 | awk '{printf "tree left: %.2f MB\n", $1/1e6}' || true
    ;;
  in)
    [ -d "$stage" ] || { echo "nothing staged"; exit 0; }
    cp -a "$stage"/. .
    rm -rf "$stage"
    git status --short | head -5
    ;;
  *) echo "usage: stage.sh out|in [paths]"; exit 2 ;;
esac
