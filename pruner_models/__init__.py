"""Cost models for MetaSchedule: PAM, MoA (momentum-adapted PAM), the TenSet MLP.

Plain networks (`PAMNet`, `MLPNet`, `MoANet`) score a batch dict (`make_batch`); the
LightningModules (`PAMModule`, `MLPModule`, `MoAModule`) train them; `load_net` rebuilds a trained
network from a checkpoint without a Trainer. No TVM import anywhere in this package.
"""

from pruner_models.batch import Batch, ProgramStore, compute_scales, make_batch
from pruner_models.mlp import MLPConfig, MLPNet
from pruner_models.moa import MoANet, train_online
from pruner_models.module import CostModelModule, MLPModule, MoAModule, PAMModule, load_net
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
