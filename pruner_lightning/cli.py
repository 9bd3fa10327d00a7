"""Console entry points of the wheel (`pruner-train`, `pruner-tune`, ...; setup.cfg).

Each one runs its command exactly as `python train.py ...` / `python -m data.collect ...` would:
`runpy` executes the script's module as `__main__`, so its own argument parsing, error handling
and exit status apply, and nothing here imports the CLI modules as libraries.
"""

from __future__ import annotations

import runpy

__all__ = ["collect", "evaluate", "export", "featurize", "train", "tune"]


def _run(module: str) -> None:
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def train() -> None:
    """`pruner-train` = `python train.py` (LightningCLI: fit, validate, test)."""
    _run("train")


def tune() -> None:
    """`pruner-tune` = `python tune.py`."""
    _run("tune")


def collect() -> None:
    """`pruner-collect` = `python -m data.collect`."""
    _run("data.collect")


def featurize() -> None:
    """`pruner-featurize` = `python -m data.featurize`."""
    _run("data.featurize")


def export() -> None:
    """`pruner-export` = `python -m bridge.export`."""
    _run("bridge.export")


def evaluate() -> None:
    """`pruner-evaluate` = `python -m bridge.evaluate`."""
    _run("bridge.evaluate")
