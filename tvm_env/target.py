"""Targets: parsing the forms apache-tvm 0.27 accepts, device names for the record tree."""

from __future__ import annotations

import json
import os
from typing import Any

import tvm

__all__ = ["is_gpu", "parse_target", "target_device_name", "target_spec"]


def parse_target(target: str | dict | tvm.target.Target) -> tvm.target.Target:
    """A `Target` from a tag ("nvidia/nvidia-h100"), a JSON string or a dict.

    CPU targets get `num-cores` (MetaSchedule refuses to tune without it) from the machine when the
    user left it out, and `"mcpu": "native"` becomes LLVM's name for the host CPU.

    Raises:
        ValueError: for the old CLI form ("llvm -mcpu=...") that apache-tvm 0.27 no longer parses.
    """
    if isinstance(target, tvm.target.Target):
        return target
    if isinstance(target, str):
        text = target.strip()
        if text.startswith("{"):
            target = json.loads(text)
        elif " -" in text:
            raise ValueError(
                f"target {target!r}: the CLI form is not accepted by apache-tvm 0.27; pass a tag "
                '(\'nvidia/nvidia-h100\') or a JSON dict (\'{"kind": "llvm", "num-cores": 2}\')'
            )
        elif text == "llvm":
            target = {"kind": "llvm"}
    if isinstance(target, dict) and target.get("kind") == "llvm":
        if target.get("mcpu") == "native":  # LLVM's name for this machine's CPU
            target = {**target, "mcpu": str(tvm.target.codegen.llvm_get_system_cpu())}
        if "num-cores" not in target:
            target = {**target, "num-cores": os.cpu_count() or 1}
    return tvm.target.Target(target)


def is_gpu(target: tvm.target.Target) -> bool:
    return "gpu" in [str(k) for k in target.keys]


def target_device_name(target: tvm.target.Target) -> str:
    """A short, file-name-safe device name: 'cuda-sm_90a', 'llvm-sapphirerapids-2c'."""
    attrs = target.export()
    if attrs["kind"] == "llvm":
        return f"llvm-{attrs.get('mcpu', 'generic')}-{attrs.get('num-cores', 1)}c"
    return f"{attrs['kind']}-{attrs.get('arch', 'generic')}"


def target_spec(target: tvm.target.Target) -> Any:
    """The target's export as plain JSON types (TVM returns Map / Array / String): what
    `parse_target` takes back, e.g. in another process."""

    def plain(value: Any) -> Any:
        if hasattr(value, "items"):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, (str, int, float, bool)) or value is None:
            return value if not isinstance(value, str) else str(value)
        try:
            return [plain(v) for v in value]
        except TypeError:
            return str(value)

    return plain(target.export())
