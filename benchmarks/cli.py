"""What the benchmarks' command lines share: a jsonargparse parser (the project's CLI library) that
prints a script's docstring as written, and the cut of argv at `--` for the scripts that pass the
rest through to train.py (benchmarks/quality.py, benchmarks/transfer.py)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from jsonargparse import ArgumentParser, DefaultHelpFormatter

__all__ = ["RawDescriptionHelpFormatter", "doc_parser", "split_passthrough"]


class RawDescriptionHelpFormatter(DefaultHelpFormatter):
    """jsonargparse's help (types and defaults shown) with the description printed as written, as
    argparse's formatter of that name does: the docstrings' example commands keep their lines."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "".join(indent + line for line in text.splitlines(keepends=True))


def doc_parser(doc: str) -> ArgumentParser:
    """A parser whose --help prints `doc` (the script's module docstring) as written."""
    return ArgumentParser(description=doc, formatter_class=RawDescriptionHelpFormatter)


def split_passthrough(argv: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """`argv` (None: sys.argv[1:]) cut at its first `--`: (our flags, the flags passed through), any
    further `--` dropped from the latter."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], [a for a in argv[cut + 1 :] if a != "--"]
