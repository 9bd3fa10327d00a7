#!/usr/bin/env bash
# Add .devkit/pylib.tar.xz: the pure-Python packages that the device image lacks and our CLIs need
# (jsonargparse and docstring_parser, for the CLIs of data.collect and benchmarks/). Run after
# ../shared/gpu/pack-devkit.sh; the device scripts unpack it onto PYTHONPATH with pylib.sh.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps -d "$work/whl" "jsonargparse==4.53.*" "docstring_parser==0.18.*"
mkdir -p "$work/lib"
for w in "$work"/whl/*.whl; do (cd "$work/lib" && unzip -q -o "$w"); done
tar -C "$work/lib" -cJf "$root/.devkit/pylib.tar.xz" .
du -b "$root/.devkit/pylib.tar.xz"
