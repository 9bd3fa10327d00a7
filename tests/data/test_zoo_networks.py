"""data.zoo's newer networks: each runs in torch, and its family's blocks extract to tasks (real TVM, llvm).

Extraction of a whole CNN takes minutes on two cores (DenseNet-121 has 189 tasks), so the CNN
families are extracted in reduced depth, built from the same classes and block functions.
"""

import re

import pytest
import torch
from torch import nn

from data.zoo import NETWORKS, extract_network_tasks, load_network, relax_tasks
from data.zoo.deeplab import DeepLabV3
from data.zoo.densenet import DenseNet
from data.zoo.inception import inception_c, inception_e
from data.zoo.resnet import Bottleneck, ResNet
from data.zoo.sources import _from_torch

TARGET = {"kind": "llvm", "mcpu": "native", "num-cores": 2}


@pytest.mark.parametrize(
    ("name", "size", "shape"),
    [
        ("resnext_50", 32, (1, 1000)),
        ("densenet_121", 32, (1, 1000)),
        ("inception_v3", 75, (1, 1000)),
        ("deeplabv3_resnet50", 32, (1, 21, 32, 32)),
        ("vit_b16", 32, (1, 1000)),
        ("gpt2", 8, (1, 8, 50257)),
    ],
)
def test_new_networks_run_in_torch(name, size, shape):
    net = NETWORKS[name]
    torch.manual_seed(0)
    with torch.no_grad():
        out = net.build().eval()(net.example(size))
    assert out.shape == shape
    assert torch.isfinite(out).all()


def _tasks(model: nn.Module, *shape: int):
    torch.manual_seed(0)
    return relax_tasks(_from_torch("t", model.eval(), (torch.randn(*shape),)).mod, TARGET)


def _weights(tasks) -> set[tuple[int, ...]]:
    """Shapes of every 4-d buffer the tasks read (convolution weights among them)."""
    return {tuple(int(d) for d in buf.shape) for t in tasks for buf in t.mod["main"].params if len(buf.shape) == 4}


def test_resnext_has_grouped_convolutions():
    tasks = _tasks(ResNet(Bottleneck, (1, 1, 1, 1), groups=32, base_width=4), 1, 3, 32, 32)
    # stage 1: 3x3 over 128 channels in 32 groups -> weight (128, 4, 3, 3)
    assert (128, 4, 3, 3) in _weights(tasks)
    assert all(t.flops > 0 for t in tasks if "conv2d" in t.name)


def test_densenet_concatenates():
    tasks = _tasks(DenseNet(blocks=(2, 2), growth=8, init_features=16), 1, 3, 32, 32)
    assert any("concatenate" in t.name for t in tasks), [t.name for t in tasks]
    assert (8, 32, 3, 3) in _weights(tasks)  # growth 8 from bn_size 4 x growth 8 channels


def test_inception_has_factorised_convolutions():
    tasks = _tasks(nn.Sequential(inception_c(64, 16), inception_e(768)), 1, 64, 9, 9)
    weights = _weights(tasks)
    assert {(16, 16, 1, 7), (16, 16, 7, 1), (384, 384, 1, 3), (384, 384, 3, 1)} <= weights


def test_deeplab_has_dilated_convolutions_and_resize():
    tasks = _tasks(DeepLabV3(layers=(1, 1, 1, 1)), 1, 3, 32, 32)
    names = [t.name for t in tasks]
    assert any("resize2d" in n for n in names), names
    # a dilated 3x3 reads its padded input at ry * rate + yy
    rates = {int(r) for t in tasks for r in re.findall(r"v_ry \* T\.int64\((\d+)\) \+ v_yy", t.mod.script())}
    assert {2, 12, 24, 36} <= rates, rates


@pytest.mark.parametrize(
    ("name", "size", "matmul_flops"), [("vit_b16", 32, 2 * 5 * 768 * 768), ("gpt2", 8, 2 * 8 * 768 * 50257)]
)
def test_transformers_extract(name, size, matmul_flops):
    tasks = extract_network_tasks(name, TARGET, size=size)
    assert len({t.workload_hash for t in tasks}) == len(tasks)
    assert max(t.weight for t in tasks) >= 2, "two identical layers share their tasks"
    assert any(t.flops == pytest.approx(matmul_flops, rel=0.01) for t in tasks), [(t.name, t.flops) for t in tasks]


def test_size_range_is_checked():
    with pytest.raises(ValueError, match=r"size=40 out of range for inception_v3 \(\[75, None\]\)"):
        load_network("inception_v3", 40)
    with pytest.raises(ValueError, match="size=2048 out of range for gpt2"):
        load_network("gpt2", 2048)
