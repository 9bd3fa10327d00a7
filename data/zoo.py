"""A small zoo of networks (plain torch, batch 1) and single operators, turned into MetaSchedule tasks.

The collector (`data.collect`) measures schedules of these tasks, and hold-out-by-network
evaluation needs several distinct networks, so the zoo holds CNNs (ResNet-18/50, MobileNetV2) and
transformer encoders (BERT-base, BERT-tiny). Everything is defined here in a few lines of torch:
no downloads and no torchvision. Weights are random (seeded): schedules do not depend on them.

A network becomes tasks the way `relax_integration.tune_relax` expects (0.27 finds no tasks in an
unfused module): torch.export -> relax -> DecomposeOpsForInference / CanonicalizeBindings ->
LegalizeOps / AnnotateTIROpPattern / FoldConstant / FuseOps / FuseTIR -> `extract_tasks`.
Identical kernels (e.g. the repeated layers of BERT) dedupe into one task with a larger weight.

Operators are named by a spec string, e.g. ``"matmul:512,512,512"``, see `OPERATORS`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from tvm_env import ms, parse_target, setup, tvm, tvm_ffi

__all__ = [
    "NETWORKS",
    "OPERATORS",
    "TaskSpec",
    "extract_network_tasks",
    "operator_task",
    "select_tasks",
    "workload_hash",
]


# ----------------------------------------------------------------------------------------------
# Networks
# ----------------------------------------------------------------------------------------------


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]


class BasicBlock(nn.Module):
    """ResNet-18/34 block: two 3x3 convolutions and a residual connection."""

    expansion = 1

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * self.expansion
        self.body = nn.Sequential(*_conv_bn(cin, width, 3, stride), nn.ReLU(), *_conv_bn(width, cout, 3))
        self.down = nn.Sequential(*_conv_bn(cin, cout, 1, stride)) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.down(x))


class Bottleneck(BasicBlock):
    """ResNet-50 block: 1x1 reduce, 3x3, 1x1 expand (stride on the 3x3, as in torchvision v1.5)."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__(cin, width, stride)
        cout = width * self.expansion
        self.body = nn.Sequential(
            *_conv_bn(cin, width, 1),
            nn.ReLU(),
            *_conv_bn(width, width, 3, stride),
            nn.ReLU(),
            *_conv_bn(width, cout, 1),
        )


class ResNet(nn.Module):
    """ImageNet ResNet: (1, 3, S, S) images -> (1, 1000) logits."""

    def __init__(self, block: type[BasicBlock], layers: Sequence[int], num_classes: int = 1000):
        super().__init__()
        stages: list[nn.Module] = [*_conv_bn(3, 64, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
        cin = 64
        for i, n in enumerate(layers):
            width = 64 * 2**i
            for j in range(n):
                stages.append(block(cin, width, 2 if i > 0 and j == 0 else 1))
                cin = width * block.expansion
        self.features = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand, 3x3 depthwise, 1x1 linear projection (+ residual)."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers = [*_conv_bn(cin, hidden, 1), nn.ReLU6()] if expand != 1 else []
        layers += [*_conv_bn(hidden, hidden, 3, stride, groups=hidden), nn.ReLU6(), *_conv_bn(hidden, cout, 1)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    """MobileNetV2 (width 1.0): (1, 3, S, S) images -> (1, 1000) logits."""

    CONFIG = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))
    """(expansion t, channels c, repeats n, first stride s) per stage, from the paper's Table 2."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [*_conv_bn(3, 32, 3, 2), nn.ReLU6()]
        cin = 32
        for t, c, n, s in self.CONFIG:
            for j in range(n):
                layers.append(InvertedResidual(cin, c, s if j == 0 else 1, t))
                cin = c
        layers += [*_conv_bn(cin, 1280, 1), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(1280, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class EncoderLayer(nn.Module):
    """Post-LN BERT layer with explicit attention (so it lowers to batch_matmul + softmax tasks)."""

    def __init__(self, hidden: int, heads: int, ffn: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(3))
        self.out = nn.Linear(hidden, hidden)
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.ffn = nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = (proj(x).reshape(b, s, self.heads, h // self.heads).transpose(1, 2) for proj in self.qkv)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(h // self.heads), dim=-1)
        ctx = (att @ v).transpose(1, 2).reshape(b, s, h)
        x = self.ln1(x + self.out(ctx))
        return self.ln2(x + self.ffn(x))


class Bert(nn.Module):
    """BERT encoder: (1, seq) int64 token ids -> (1, seq, hidden) states."""

    def __init__(self, hidden: int, heads: int, ffn: int, layers: int, vocab: int = 30522, max_seq: int = 512):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, hidden), nn.Embedding(max_seq, hidden)
        self.ln = nn.LayerNorm(hidden)
        self.layers = nn.Sequential(*(EncoderLayer(hidden, heads, ffn) for _ in range(layers)))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1]).unsqueeze(0)
        return self.layers(self.ln(self.tok(ids) + self.pos(pos)))


@dataclasses.dataclass(frozen=True)
class Network:
    """A zoo entry: how to build the torch module and its example input for a given input size.

    `size` is the image side for CNNs and the sequence length for encoders; the default is the
    standard one, tests pass a smaller one to keep extraction fast.
    """

    build: Callable[[], nn.Module]
    example: Callable[[int], torch.Tensor]
    default_size: int


def _image(size: int) -> torch.Tensor:
    return torch.randn(1, 3, size, size)


def _tokens(size: int) -> torch.Tensor:
    return torch.randint(0, 1000, (1, size), dtype=torch.int64)


NETWORKS: dict[str, Network] = {
    "resnet_18": Network(lambda: ResNet(BasicBlock, (2, 2, 2, 2)), _image, 224),
    "resnet_50": Network(lambda: ResNet(Bottleneck, (3, 4, 6, 3)), _image, 224),
    "mobilenet_v2": Network(MobileNetV2, _image, 224),
    # Two layers suffice: further identical layers only raise the weights of the same tasks.
    "bert_base": Network(lambda: Bert(hidden=768, heads=12, ffn=3072, layers=2), _tokens, 128),
    "bert_tiny": Network(lambda: Bert(hidden=128, heads=2, ffn=512, layers=2), _tokens, 128),
}
"""Network name -> definition; all run with batch 1."""


# ----------------------------------------------------------------------------------------------
# Tasks
# ----------------------------------------------------------------------------------------------


def workload_hash(mod: tvm.IRModule) -> str:
    """The structural hash that `JSONDatabase` writes as the first field of a workload line."""
    return str(tvm_ffi.structural_hash(mod))


@dataclasses.dataclass
class TaskSpec:
    """One tunable workload.

    Attributes:
        name: MetaSchedule task name (relax fused-function name, or `<op>_<params>` for operators).
        mod: unscheduled IRModule with one PrimFunc `main`.
        weight: how many times the network calls it (1 for operators).
        flops: floating-point operations of one call (`tvm.s_tir.analysis.estimate_tir_flops`).
        workload_hash: `workload_hash(mod)`.
    """

    name: str
    mod: tvm.IRModule
    weight: int
    flops: float
    workload_hash: str

    @property
    def task_dir(self) -> str:
        """Directory name in the record tree: task name + 8 hex digits of the structural hash."""
        return f"{self.name}_{int(self.workload_hash) & 0xFFFFFFFF:08x}"

    @classmethod
    def from_mod(cls, name: str, mod: tvm.IRModule, weight: int = 1) -> TaskSpec:
        return cls(name, mod, weight, float(tvm.s_tir.analysis.estimate_tir_flops(mod)), workload_hash(mod))


def _relax_module(network: str, size: int | None) -> tvm.IRModule:
    from tvm.relax.frontend.torch import from_exported_program

    net = NETWORKS[network]
    torch.manual_seed(0)
    model = net.build().eval()
    example = net.example(size or net.default_size)
    with torch.no_grad():
        exported = torch.export.export(model, (example,))
    return from_exported_program(exported)


def extract_network_tasks(name: str, target: str | dict | tvm.target.Target, size: int | None = None) -> list[TaskSpec]:
    """The MetaSchedule tasks of a zoo network, in extraction order.

    Args:
        name: a key of `NETWORKS`.
        target: where the tasks will be tuned (legalization and fusion depend on it).
        size: input image side / sequence length; None for the network's standard one.

    Raises:
        ValueError: unknown network name or a non-positive size.
    """
    if name not in NETWORKS:
        raise ValueError(f"network {name!r} is not in the zoo; known: {sorted(NETWORKS)}")
    if size is not None and size <= 0:
        raise ValueError(f"size={size!r} must be positive")
    from tvm import relax

    target = parse_target(target)
    setup(target)
    mod = _relax_module(name, size)
    with target:
        mod = tvm.transform.Sequential(
            [
                relax.transform.DecomposeOpsForInference(),
                relax.transform.CanonicalizeBindings(),
                relax.transform.LegalizeOps(),
                relax.transform.AnnotateTIROpPattern(),
                relax.transform.FoldConstant(),
                relax.transform.FuseOps(),
                relax.transform.FuseTIR(),
            ]
        )(mod)
    return [
        TaskSpec.from_mod(t.task_name, t.mod, int(t.weight)) for t in ms.relax_integration.extract_tasks(mod, target)
    ]


def select_tasks(
    tasks: Sequence[TaskSpec],
    max_tasks: int | None = None,
    min_flops: float = 0.0,
    max_flops: float | None = None,
) -> list[TaskSpec]:
    """Tasks within [min_flops, max_flops], then the `max_tasks` heaviest by weight x FLOPs.

    The original order is kept among the survivors, so a larger cap only adds tasks.
    """
    if max_tasks is not None and max_tasks < 0:
        raise ValueError(f"max_tasks={max_tasks!r} must be >= 0")
    kept = [t for t in tasks if t.flops >= min_flops and (max_flops is None or t.flops <= max_flops)]
    if max_tasks is not None and len(kept) > max_tasks:
        heaviest = sorted(range(len(kept)), key=lambda i: -kept[i].weight * kept[i].flops)[:max_tasks]
        kept = [kept[i] for i in sorted(heaviest)]
    return kept


# ----------------------------------------------------------------------------------------------
# Single operators
# ----------------------------------------------------------------------------------------------


def _dense(m: int, n: int, k: int):
    """Y[m, n] = X[m, k] . W[n, k]^T (the layout of torch.nn.Linear)."""
    from tvm import te

    x = te.placeholder((m, k), name="X")
    w = te.placeholder((n, k), name="W")
    r = te.reduce_axis((0, k), name="k")
    return x, w, te.compute((m, n), lambda i, j: te.sum(x[i, r] * w[j, r], axis=r), name="T_dense")


def _te(fname: str) -> Callable:
    def make(*args: int):
        from tvm.s_tir.meta_schedule.testing import te_workload

        return getattr(te_workload, fname)(*args)

    return make


OPERATORS: dict[str, tuple[Callable, tuple[str, ...], tuple[int, ...]]] = {
    "matmul": (lambda m, n, k: _te("matmul")(m, n, k), ("M", "N", "K"), ()),
    "dense": (_dense, ("M", "N", "K"), ()),
    "batch_matmul": (lambda b, m, n, k: _te("batch_matmul_nkkm")(b, m, n, k), ("B", "M", "N", "K"), ()),
    "conv2d": (_te("conv2d_nhwc"), ("N", "H", "W", "CI", "CO", "KERNEL", "STRIDE", "PAD"), (1, 0)),
    "depthwise_conv2d": (_te("depthwise_conv2d_nhwc"), ("N", "H", "W", "C", "KERNEL", "STRIDE", "PAD"), (1, 0)),
    "softmax": (_te("softmax_mn"), ("M", "N"), ()),
}
"""Operator kind -> (TE factory, parameter names, defaults of the trailing parameters).

matmul: C[M, N] = A[M, K] B[K, N]; dense: like nn.Linear (weight N x K); batch_matmul: B batches of
(M x K)(K x N); conv2d / depthwise_conv2d: NHWC, square kernels, `STRIDE` and `PAD` optional.
"""


def operator_task(spec: str) -> TaskSpec:
    """A task for a single operator named by `"kind:p1,p2,..."`, e.g. `"conv2d:1,56,56,64,64,3,1,1"`.

    Raises:
        ValueError: unknown kind, wrong number of parameters, or a parameter that is not a
            positive integer (zero is allowed for PAD only); the message names the spec.
    """
    from tvm import te

    kind, sep, rest = spec.partition(":")
    if kind not in OPERATORS:
        raise ValueError(f"operator spec {spec!r}: unknown kind {kind!r}; known: {sorted(OPERATORS)}")
    factory, names, defaults = OPERATORS[kind]
    usage = f"{kind}:{','.join(names)}" + (f" (last {len(defaults)} optional)" if defaults else "")
    fields = [f.strip() for f in rest.split(",")] if sep and rest.strip() else []
    if not len(names) - len(defaults) <= len(fields) <= len(names):
        raise ValueError(f"operator spec {spec!r}: expected {usage}, got {len(fields)} parameters")
    try:
        values = [int(f) for f in fields]
    except ValueError:
        raise ValueError(f"operator spec {spec!r}: parameters must be integers ({usage})") from None
    values += defaults[len(defaults) - (len(names) - len(values)) :]
    for pname, value in zip(names, values):
        if value < 0 or (value == 0 and pname != "PAD"):
            raise ValueError(f"operator spec {spec!r}: {pname}={value} must be positive ({usage})")
    mod = tvm.IRModule({"main": te.create_prim_func(factory(*values))})
    return TaskSpec.from_mod(f"{kind}_{'_'.join(map(str, values))}", mod)
