"""The one registry of our cost networks, and the one serialization of a network's state.

Like litgpt's `Config.from_name`, a name picks everything: the network class, its config dataclass,
the LightningModule that trains it and the tuning modes it offers. Export (bridge/export.py), the
tuning cost model's saved state (bridge/cost_model.py), `pruner_models.module.load_net` and tune.py's
list of `--cost-model` modes all read this table, so adding a model is one `ModelEntry` here.

A network's state is one plain dict (`net_state`), the same in an exported artifact and in a tuning
run's cost-model state:

| key | content |
|---|---|
| net_class | the network class name, e.g. "PAMNet" |
| config | its config dataclass as a dict |
| net_kwargs | other constructor arguments (MoA: momentum) |
| state_dict | weights and normalization buffers (CPU tensors) |

`build_net` rebuilds the network from it and refuses non-finite weights or buffers, naming the
tensor: a NaN that got into a checkpoint would otherwise make every tuning score NaN.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from importlib import import_module
from typing import Any

import torch
from torch import nn

from pruner_models.mlp import MLPConfig, MLPNet
from pruner_models.moa import MoANet
from pruner_models.pam import PAMConfig, PAMNet

__all__ = [
    "MODELS",
    "ModelEntry",
    "NetStateError",
    "build_net",
    "by_module",
    "by_net_class",
    "check_finite",
    "net_state",
    "tuning_modes",
]


class NetStateError(ValueError):
    """A saved network state that cannot be used; the message names its source (a file)."""


@dataclasses.dataclass(frozen=True)
class ModelEntry:
    """One cost network.

    Attributes:
        name: short name ("pam"); also the tuning mode that trains it from scratch.
        net: the `nn.Module` class; constructed as `net(config, **net_kwargs)`.
        config: its config dataclass.
        module: "module:Class" of the LightningModule that trains it (imported lazily: loading a
            network never imports Lightning).
        net_kwargs: further constructor arguments, read back from the net's attributes on save.
        tunable: whether tuning offers `<name>` (scratch) and `<name>-no-update` (pretrained) modes.
        siamese: name of the entry that adapts this one online (`<name>-siamese-update`), or None.
    """

    name: str
    net: type[nn.Module]
    config: type
    module: str
    net_kwargs: tuple[str, ...] = ()
    tunable: bool = True
    siamese: str | None = None

    @property
    def net_class(self) -> str:
        return self.net.__name__

    def module_class(self) -> type:
        """The LightningModule class (imports Lightning)."""
        module, cls = self.module.split(":")
        return getattr(import_module(module), cls)

    def new(self, config: Any = None, **net_kwargs: Any) -> nn.Module:
        """A fresh network (default config unless given)."""
        return self.net(config if config is not None else self.config(), **net_kwargs)


MODELS: dict[str, ModelEntry] = {
    entry.name: entry
    for entry in (
        ModelEntry("pam", PAMNet, PAMConfig, "pruner_models.module:PAMModule", siamese="moa"),
        ModelEntry("moa", MoANet, PAMConfig, "pruner_models.module:MoAModule", ("momentum",), tunable=False),
        ModelEntry("mlp", MLPNet, MLPConfig, "pruner_models.module:MLPModule"),
    )
}
"""Name -> entry. Add a model here (and its LightningModule in pruner_models/module.py)."""


def by_net_class(net_class: str, source: str = "") -> ModelEntry:
    """The entry of a network class name ("PAMNet"); NetStateError naming `source` if unknown."""
    for entry in MODELS.values():
        if entry.net_class == net_class:
            return entry
    known = sorted(e.net_class for e in MODELS.values())
    raise NetStateError(f"{source}: unknown net_class {net_class!r}; expected one of {known}")


def by_module(module: str, source: str = "") -> ModelEntry:
    """The entry of a LightningModule class name ("PAMModule"); NetStateError naming `source` if unknown."""
    for entry in MODELS.values():
        if entry.module.split(":")[1] == module:
            return entry
    known = sorted(e.module.split(":")[1] for e in MODELS.values())
    raise NetStateError(f"{source}: unknown cost_model {module!r}; expected one of {known}")


def tuning_modes() -> dict[str, tuple[ModelEntry, str]]:
    """Tuning mode -> (entry, policy) with policy "scratch", "siamese-update" or "no-update".

    Order: per tunable entry, `<name>`, `<name>-siamese-update` (if it has a siamese entry),
    `<name>-no-update`.
    """
    modes: dict[str, tuple[ModelEntry, str]] = {}
    for entry in MODELS.values():
        if not entry.tunable:
            continue
        modes[entry.name] = (entry, "scratch")
        if entry.siamese:
            modes[f"{entry.name}-siamese-update"] = (entry, "siamese-update")
        modes[f"{entry.name}-no-update"] = (entry, "no-update")
    return modes


def check_finite(tensors: Mapping[str, torch.Tensor], source: str) -> None:
    """Raise NetStateError naming `source` and the first tensor holding NaN or inf."""
    for key, value in tensors.items():
        if torch.is_tensor(value) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            bad = int((~torch.isfinite(value)).sum())
            raise NetStateError(f"{source}: tensor {key!r} holds {bad} non-finite value(s) (NaN or inf)")


def net_state(net: nn.Module) -> dict[str, Any]:
    """The plain-dict state of a registered network (see the module docstring)."""
    entry = by_net_class(type(net).__name__, "net_state")
    return {
        "net_class": entry.net_class,
        "config": dataclasses.asdict(net.config),
        "net_kwargs": {k: getattr(net, k) for k in entry.net_kwargs},
        "state_dict": {k: v.detach().cpu() for k, v in net.state_dict().items()},
    }


def build_net(state: Mapping[str, Any], source: str) -> nn.Module:
    """The network of a `net_state` dict, in eval mode.

    Raises:
        NetStateError: unknown class, weights that do not fit the config, or a non-finite tensor
            (all name `source`, and the tensor where one is at fault).
    """
    entry = by_net_class(state.get("net_class"), source)
    config = dict(state.get("config") or {})
    check_finite(state["state_dict"], source)
    try:
        net = entry.net(entry.config(**config), **dict(state.get("net_kwargs") or {}))
        net.load_state_dict(state["state_dict"])
    except (TypeError, ValueError, RuntimeError) as err:
        raise NetStateError(f"{source}: the weights do not fit {entry.net_class}({config}): {err}") from None
    return net.eval()
