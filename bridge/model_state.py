"""The file a `PrunerCostModel` keeps its state in: mode, network and the run's measured records.

torch.save of tensors and plain types only, written atomically, and read back with
`weights_only=True`, so a state file received from elsewhere cannot run code when it is loaded.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import torch

from data.atomic import atomic_write_bytes
from pruner_models import registry

__all__ = ["read_state", "write_state"]

_U64 = (1 << 64) - 1


def write_state(
    path: str,
    *,
    mode: str,
    rounds: int,
    trained: bool,
    net: torch.nn.Module | None,
    tags: dict,
    data: dict,
    seen: dict | None = None,
) -> None:
    """Write a state atomically: `tags` (task key -> numpy tags), `data` (task key -> "stmt" and "gemm"
    lists of numpy arrays and a "latency" list of floats), `seen` (task key -> the schedule keys of the
    measurements taken, ints; None: not known)."""
    state = {
        "mode": mode,
        "rounds": rounds,
        "trained": trained,
        "net": None if net is None else registry.net_state(net),
        "tags": {k: torch.from_numpy(v) for k, v in tags.items()},
        "seen": None if seen is None else {k: _keys_tensor(v) for k, v in seen.items()},
        "data": {
            k: {
                "stmt": [torch.from_numpy(s) for s in d["stmt"]],
                "gemm": [torch.from_numpy(g) for g in d["gemm"]],
                "latency": torch.tensor(d["latency"], dtype=torch.float64),
            }
            for k, d in data.items()
        },
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def read_state(path: str, mode: str) -> dict[str, Any]:
    """What `write_state` wrote, as it took it (the network rebuilt on the CPU, or None).

    Raises:
        ValueError: a file that is not a saved PrunerCostModel, one saved in another mode than `mode`,
            or one whose network holds non-finite weights (names the file and tensor).
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise ValueError(f"{path}: cannot read a saved cost model ({type(err).__name__}: {err})") from None
    if not isinstance(state, dict) or "mode" not in state or "net" not in state:
        raise ValueError(f"{path}: not a saved PrunerCostModel")
    if state["mode"] != mode:
        raise ValueError(f"{path}: saved in mode {state['mode']!r}, this model runs mode {mode!r}")
    return {
        "rounds": int(state["rounds"]),
        "trained": bool(state["trained"]),
        "net": None if state["net"] is None else registry.build_net(state["net"], path),
        "tags": {k: v.numpy() for k, v in state["tags"].items()},
        "seen": None if state.get("seen") is None else {k: _keys_list(v) for k, v in state["seen"].items()},
        "data": {
            k: {
                "stmt": [s.numpy() for s in d["stmt"]],
                "gemm": [g.numpy() for g in d["gemm"]],
                "latency": d["latency"].tolist(),
            }
            for k, d in state["data"].items()
        },
    }


def _keys_tensor(keys) -> torch.Tensor:
    """Schedule keys (unsigned 64-bit structural hashes) as an int64 tensor, bit for bit."""
    return torch.from_numpy(np.asarray(sorted(k & _U64 for k in keys), dtype=np.uint64).view(np.int64))


def _keys_list(tensor: torch.Tensor) -> list[int]:
    return [int(k) for k in tensor.numpy().view(np.uint64)]
