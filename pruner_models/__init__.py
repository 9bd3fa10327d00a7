"""Cost models for MetaSchedule: PAM, MoA (momentum-adapted PAM), the TenSet MLP.

Plain networks (`PAMNet`, `MLPNet`, `MoANet`) score a batch dict (`make_batch`); the
LightningModules (`PAMModule`, `MLPModule`, `MoAModule`) train them; `load_net` rebuilds a trained
network from a checkpoint without a Trainer. No TVM import anywhere in this package.

The LightningModules are imported lazily (PEP 562), so `bridge/` loads an exported artifact on a
machine with torch alone: importing the networks never imports Lightning.
"""

from importlib import import_module

from data.batch import Batch, ProgramStore, compute_scales, make_batch
from pruner_models.mlp import MLPConfig, MLPNet
from pruner_models.moa import MoANet, train_online
from pruner_models.pam import PAMConfig, PAMNet

__all__ = [
    "Batch",
    "CostModelModule",
    "MLPConfig",
    "MLPModule",
    "MLPNet",
    "MoAModule",
    "MoANet",
    "PAMConfig",
    "PAMModule",
    "PAMNet",
    "ProgramStore",
    "compute_scales",
    "load_net",
    "make_batch",
    "train_online",
]

_LIGHTNING = {"CostModelModule", "MLPModule", "MoAModule", "PAMModule", "load_net"}


def __getattr__(name: str):
    if name in _LIGHTNING:
        return getattr(import_module("pruner_models.module"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
