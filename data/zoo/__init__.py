"""A zoo of networks (plain torch, batch 1) and single operators, turned into MetaSchedule tasks.

The collector (`data.collect`) measures schedules of these tasks, and hold-out-by-network
evaluation needs several distinct networks. Everything is defined in torch in this package: no
downloads and no torchvision. Weights are random (seeded): schedules do not depend on them.

* `networks`: the registry `NETWORKS`; one file per family (`resnet`, `mobilenet`, `mbconv`
  (EfficientNet, MobileNetV3), `densenet`, `inception`, `deeplab`, `convnext`, `transformer`), shared pieces in `common`.
* `sources`: a network spec -> relax module + example inputs, for zoo names and the user's own
  models (`path.py:factory`, ONNX, a saved relax IRModule).
* `tasks`: relax module -> `TaskSpec` list (`extract_network_tasks`; several networks in parallel processes: `extract_networks`), `select_tasks`.
* `operators`: single operators named by a spec string, e.g. ``"matmul:512,512,512"``.
"""

from data.zoo.networks import NETWORKS
from data.zoo.operators import OPERATORS, check_operator_spec, operator_task
from data.zoo.sources import LoadedNetwork, check_network, load_network, network_label
from data.zoo.tasks import (
    TaskSpec,
    extract_network_tasks,
    extract_networks,
    fused_module,
    inference_module,
    relax_tasks,
    select_tasks,
    workload_hash,
)

__all__ = [
    "NETWORKS",
    "OPERATORS",
    "LoadedNetwork",
    "TaskSpec",
    "check_network",
    "check_operator_spec",
    "extract_network_tasks",
    "extract_networks",
    "fused_module",
    "inference_module",
    "load_network",
    "network_label",
    "operator_task",
    "relax_tasks",
    "select_tasks",
    "workload_hash",
]
