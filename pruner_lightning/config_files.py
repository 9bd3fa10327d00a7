"""The packaged training configs (`pruner_lightning/configs/*.yaml`) and how a `--config` value finds them.

The configs ship inside this package (package data), so an installed wheel has them wherever it
runs. `train.py --config VALUE` resolves VALUE with `resolve_config`: an existing file is used as
given; otherwise a packaged config of that name is used, so `--config pam`, `--config pam.yaml`
and the checkout-relative `--config configs/pam.yaml` of older commands all work from any folder.
Imports nothing heavy (train.py runs on machines without TVM).
"""

from __future__ import annotations

import importlib.resources
import os
from pathlib import Path

__all__ = ["config_dir", "config_names", "resolve_config"]


def config_dir() -> Path:
    """The folder of the packaged configs (found with importlib.resources, so it works installed)."""
    folder = importlib.resources.files(__package__) / "configs"
    if not isinstance(folder, Path):  # a zipped install: LightningCLI needs real files
        raise RuntimeError(f"pruner_lightning is installed as {folder!r}, not as files; install it unzipped")
    return folder


def config_names() -> list[str]:
    """Names of the packaged configs, e.g. ['finetune', 'mlp', 'moa', 'pam']."""
    return sorted(p.stem for p in config_dir().glob("*.yaml"))


def resolve_config(value: str | os.PathLike) -> str:
    """The config file that `--config value` means.

    Args:
        value: a path to a YAML file, or the name of a packaged config (`pam`, `pam.yaml`,
            `configs/pam.yaml`).

    Returns:
        `value` itself when it names an existing file (or is not a config name at all, so that
        jsonargparse reports it), else the path of the packaged config of that name.
    """
    text = os.fspath(value)
    if Path(text).is_file():
        return text
    name = Path(text).name
    stem = name[: -len(".yaml")] if name.endswith(".yaml") else name
    packaged = config_dir() / f"{stem}.yaml"
    return str(packaged) if packaged.is_file() else text
