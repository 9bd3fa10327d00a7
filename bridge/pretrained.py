"""The pretrained cost models that ship with the package (bridge/weights/, model cards in its README.md).

A file `bridge/weights/<net>-<device>.pt` is an artifact of `python -m bridge.export --half true` whose
training measurements came from `<device>` (`tvm_env.target_device_name`, e.g. "cuda-sm_90a" for
the H100 and H200). The pretrained tuning modes (pam-siamese-update, pam-no-update, mlp-no-update)
take the matching one when the user names no model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["WEIGHTS_DIR", "available", "find_pretrained"]

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"


def available() -> list[str]:
    """Names of the shipped models ("pam-cuda-sm_90a", ...)."""
    return sorted(p.stem for p in WEIGHTS_DIR.glob("*.pt"))


def find_pretrained(mode: str, target: Any) -> Path:
    """The shipped model for tuning mode `mode` on `target`.

    Raises:
        ValueError: no shipped model matches (lists the ones there are).
    """
    from tvm_env import parse_target, target_device_name

    net = "mlp" if mode.startswith("mlp") else "pam"
    device = target_device_name(parse_target(target))
    path = WEIGHTS_DIR / f"{net}-{device}.pt"
    if not path.is_file():
        raise ValueError(
            f"--cost-model {mode} needs a pretrained model and none ships for {device} "
            f"(shipped: {available()}); train one (docs/training.md) and pass --checkpoint"
        )
    return path
