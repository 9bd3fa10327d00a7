#!/usr/bin/env bash
# Add .devkit/pylib.tar.xz (and strip the xgboost kit's library, below): the pure-Python packages that the device image lacks and our CLIs need
# (jsonargparse and docstring_parser, for the CLIs of data.collect and benchmarks/). Run after
# ../shared/gpu/pack-devkit.sh (`--train`: below); the device scripts unpack it onto PYTHONPATH with pylib.sh.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps -d "$work/whl" "jsonargparse==4.53.*" "docstring_parser==0.18.*"
mkdir -p "$work/lib"
for w in "$work"/whl/*.whl; do (cd "$work/lib" && unzip -q -o "$w"); done
tar -C "$work/lib" -cJf "$root/.devkit/pylib.tar.xz" .
du -b "$root/.devkit/pylib.tar.xz"
# `--train` also writes .trainkit/trainlib.tar.xz: typeshed_client (0.4 MB), which jsonargparse needs
# to read class signatures, so that train.py's LightningCLI runs on the device. Kept out of .devkit
# so that the calls carrying the TVM kit do not carry it; a training call carries .trainkit and
# .devkit/pylib.tar.xz (and no TVM kit: training needs only torch and the shards).
if [ "${1:-}" = --train ]; then
  python3 -m pip download -q --no-deps -d "$work/twhl" "typeshed_client==2.15.*"
  mkdir -p "$work/tlib" "$root/.trainkit"
  for w in "$work"/twhl/*.whl; do (cd "$work/tlib" && unzip -q -o "$w"); done
  tar -C "$work/tlib" -cJf "$root/.trainkit/trainlib.tar.xz" .
  du -b "$root/.trainkit/trainlib.tar.xz"
fi
# With the xgboost kit (pack-devkit.sh --with-xgboost), strip the library's unneeded symbols too
# (3.46 -> 3.29 MB compressed): a tuning-suite call carries the kit, this file and the tree within
# the 64 MiB limit, and without it the xgb arms' call did not fit (2026-11-25).
if [ -f "$root/.devkit/libxgboost.so.xz" ] && [ ! -f "$root/.devkit/.xgboost-stripped" ]; then
  xz -dc "$root/.devkit/libxgboost.so.xz" > "$work/libxgboost.so"
  strip --strip-unneeded "$work/libxgboost.so"
  xz -T1 --x86 -9e -c "$work/libxgboost.so" > "$root/.devkit/libxgboost.so.xz"
  touch "$root/.devkit/.xgboost-stripped"
  du -b "$root/.devkit/libxgboost.so.xz"
fi
