#!/usr/bin/env bash
# Sourced by the device scripts whose Python CLIs use jsonargparse, which the device image lacks:
# unpacks .devkit/pylib.tar.xz (jsonargparse and docstring_parser, made by pack-pylib.sh) into
# /tmp/pylib and puts it and the project root on PYTHONPATH. The run carries .devkit (or just
# .devkit/pylib.tar.xz). Usage, from the project root: source benchmarks/gpu/pylib.sh || exit 1
[ -f .devkit/pylib.tar.xz ] || { echo "no .devkit/pylib.tar.xz: run benchmarks/gpu/pack-pylib.sh, carry it" >&2; return 1; }
mkdir -p /tmp/pylib && tar -C /tmp/pylib -xJf .devkit/pylib.tar.xz || return 1
# train.py's LightningCLI also needs typeshed_client (pack-pylib.sh --train; carry .trainkit)
[ ! -f .trainkit/trainlib.tar.xz ] || tar -C /tmp/pylib -xJf .trainkit/trainlib.tar.xz || return 1
export PYTHONPATH=$PWD:/tmp/pylib:${PYTHONPATH:-}
