#!/usr/bin/env bash
# Sourced by the device scripts whose Python CLIs use jsonargparse, which the device image lacks:
# unpacks .devkit/pylib.tar.xz (jsonargparse and docstring_parser, made by pack-pylib.sh) into
# /tmp/pylib-<checksum of the tars> (PYLIB names another prefix than /tmp/pylib) and puts it and the
# project root on PYTHONPATH. The run carries .devkit (or just .devkit/pylib.tar.xz). Usage, from
# the project root: source benchmarks/gpu/pylib.sh || exit 1
# One folder per content of the tars, unpacked once (under a lock, into a folder of its own that is
# then renamed into place) and never replaced: two lanes that each unpacked over one /tmp/pylib at once
# had one lane's Python read a half-written jsonargparse (2026-11-30, fourth session), and a Python
# still running from an older folder keeps it. lanes.sh sources this once before its lanes start.
[ -f .devkit/pylib.tar.xz ] || { echo "no .devkit/pylib.tar.xz: run benchmarks/gpu/pack-pylib.sh, carry it" >&2; return 1; }
command -v flock >/dev/null || { echo "pylib.sh: needs flock (util-linux)" >&2; return 1; }
# train.py's LightningCLI also needs typeshed_client (pack-pylib.sh --train; carry .trainkit)
_pylib_tars=.devkit/pylib.tar.xz
[ ! -f .trainkit/trainlib.tar.xz ] || _pylib_tars="$_pylib_tars .trainkit/trainlib.tar.xz"
_pylib="${PYLIB:-/tmp/pylib}-$(cat $_pylib_tars | md5sum | cut -c1-12)"
( flock 9 || exit 1
  [ ! -f "$_pylib/.unpacked" ] || exit 0
  _pylib_tmp=$(mktemp -d "$_pylib.XXXXXX") || exit 1
  trap 'rm -rf "$_pylib_tmp"' EXIT  # a failed unpack leaves nothing behind
  chmod 755 "$_pylib_tmp"
  for _t in $_pylib_tars; do tar -C "$_pylib_tmp" -xJf "$_t" || exit 1; done
  touch "$_pylib_tmp/.unpacked"
  rm -rf "$_pylib" && mv -T "$_pylib_tmp" "$_pylib"  # (a folder there has the marker: it was renamed in after it)
) 9> "$_pylib.lock" || { echo "pylib.sh: could not unpack $_pylib_tars into $_pylib" >&2; return 1; }
export PYTHONPATH=$PWD:$_pylib:${PYTHONPATH:-}
