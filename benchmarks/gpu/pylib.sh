#!/usr/bin/env bash
# Sourced by the device scripts whose Python CLIs use jsonargparse, which the device image lacks:
# unpacks .devkit/pylib.tar.xz (jsonargparse and docstring_parser, made by pack-pylib.sh) into
# /tmp/pylib (PYLIB names another folder) and puts it and the project root on PYTHONPATH. The run carries .devkit (or just
# .devkit/pylib.tar.xz). Usage, from the project root: source benchmarks/gpu/pylib.sh || exit 1
# It unpacks once per content of the tars (a marker names their checksum), under a lock, into a folder of
# its own that then takes /tmp/pylib's place: two lanes that each unpacked over /tmp/pylib at once had one lane's
# Python read a half-written jsonargparse (2026-11-30, fourth session); lanes.sh now sources this once
# before its lanes start, and theirs find the marker.
[ -f .devkit/pylib.tar.xz ] || { echo "no .devkit/pylib.tar.xz: run benchmarks/gpu/pack-pylib.sh, carry it" >&2; return 1; }
# train.py's LightningCLI also needs typeshed_client (pack-pylib.sh --train; carry .trainkit)
_pylib_tars=.devkit/pylib.tar.xz
[ ! -f .trainkit/trainlib.tar.xz ] || _pylib_tars="$_pylib_tars .trainkit/trainlib.tar.xz"
_pylib_sum=$(cat $_pylib_tars | md5sum | cut -c1-12)
_pylib=${PYLIB:-/tmp/pylib}
# one unpack at a time (flock): the others wait, then find the marker
( flock 9 || exit 1
  [ ! -f "$_pylib/.unpacked-$_pylib_sum" ] || exit 0
  _pylib_tmp=$(mktemp -d "$_pylib.XXXXXX") || exit 1
  for _t in $_pylib_tars; do tar -C "$_pylib_tmp" -xJf "$_t" || { rm -rf "$_pylib_tmp"; exit 1; }; done
  touch "$_pylib_tmp/.unpacked-$_pylib_sum"
  rm -rf "$_pylib" && mv -T "$_pylib_tmp" "$_pylib"
) 9> "$_pylib.lock" || return 1
export PYTHONPATH=$PWD:$_pylib:${PYTHONPATH:-}
