"""data.zoo's newer networks: each runs in torch, and its family's blocks extract to tasks (real TVM, llvm).

Extraction of a whole CNN takes minutes on two cores (DenseNet-121 has 189 tasks), so the CNN
families are extracted in reduced depth, built from the same classes and block functions.
"""

import re

import pytest
import torch
from torch import nn

from data.zoo import NETWORKS, extract_network_tasks, load_network, relax_tasks
from data.zoo.common import tokens
from data.zoo.convnext import ConvNeXt
from data.zoo.deeplab import DeepLabV3
from data.zoo.densenet import DenseNet
from data.zoo.inception import inception_c, inception_e
from data.zoo.mbconv import EfficientNet, MobileNetV3
from data.zoo.resnet import Bottleneck, ResNet
from data.zoo.sources import _from_torch
from data.zoo.transformer import Llama

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
        ("efficientnet_b0", 32, (1, 1000)),
        ("mobilenet_v3_large", 32, (1, 1000)),
        ("wide_resnet_50", 32, (1, 1000)),
        ("convnext_tiny", 32, (1, 1000)),
        ("llama_small", 8, (1, 8, 32000)),
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


def _se_excitations(tasks) -> dict[str, tuple[int, ...]]:
    """Squeeze-and-excitation's excite step: task name -> weight of a 1x1 convolution over a pooled
    (1, C', 1, 1) vector, fused with the gate that scales a (1, C, H, W) feature map (H, W > 1)."""
    found = {}
    for t in tasks:
        *inputs, _ = [tuple(int(d) for d in buf.shape) for buf in t.mod["main"].params]
        pooled = len(inputs[0]) == 4 and inputs[0][2:] == (1, 1)
        if "conv2d" in t.name and pooled and any(len(s) == 4 and s[2:] != (1, 1) for s in inputs[2:]):
            found[t.name] = inputs[1]
    return found


@pytest.mark.parametrize(
    ("build", "depthwise_5x5", "excite", "gate"),
    [
        # stem 32 -> (expand 1, 3x3) 16 -> (expand 6, 5x5, stride 2) 24; SE squeezes 96 to 16 // 4 = 4
        (lambda: EfficientNet(((1, 3, 1, 16, 1), (6, 5, 2, 24, 1)), head=64), (96, 1, 5, 5), (96, 4, 1, 1), "sigmoid"),
        # stem 16 -> 3x3 bneck 64 -> 24 -> 5x5 bneck 72 -> 40 with SE to 24 (72 / 4 up to a multiple of 8);
        # the hard-sigmoid gate is legalized as clip(x + 3, 0, 6) / 6
        (
            lambda: MobileNetV3(((3, 64, 24, False, "RE", 2), (5, 72, 40, True, "HS", 2)), head=64),
            (72, 1, 5, 5),
            (72, 24, 1, 1),
            "clip",
        ),
    ],
    ids=["efficientnet", "mobilenet_v3"],
)
def test_mbconv_has_5x5_depthwise_and_squeeze_excitation(build, depthwise_5x5, excite, gate):
    tasks = _tasks(build(), 1, 3, 32, 32)
    assert depthwise_5x5 in _weights(tasks)
    excitations = _se_excitations(tasks)  # empty without SE
    assert excite in excitations.values(), excitations
    assert all(gate in name for name, weight in excitations.items() if weight == excite), excitations


def test_convnext_has_7x7_depthwise_convolutions_and_layer_norms():
    tasks = _tasks(ConvNeXt(depths=(1, 1), dims=(16, 32)), 1, 3, 32, 32)
    weights = _weights(tasks)
    # 7x7 depthwise per stage; the 4x4 stride-4 stem and the 2x2 stride-2 downsampling
    assert {(16, 1, 7, 7), (32, 1, 7, 7), (16, 3, 4, 4), (32, 16, 2, 2)} <= weights, weights
    names = [t.name for t in tasks]
    assert not any("batch_norm" in n for n in names), names
    # layer norm over the channels of channels-last (1, H, W, C) maps, for stem, blocks and downsampling
    norms = {tuple(int(d) for d in t.mod["main"].params[0].shape) for t in tasks if "layer_norm" in t.name}
    assert {(1, 8, 8, 16), (1, 4, 4, 32)} <= norms, norms
    assert any("gelu" in n for n in names), names


def test_llama_is_bias_free_causal_and_gated():
    torch.manual_seed(0)
    model = Llama(hidden=64, heads=4, ffn=96, layers=1, vocab=100, max_seq=16).eval()
    assert all(m.bias is None for m in model.modules() if isinstance(m, nn.Linear))
    ids = tokens(8) % 100
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] + 1) % 100
    with torch.no_grad():
        out, out_changed = model(ids), model(changed)
    assert torch.allclose(out[:, :-1], out_changed[:, :-1], atol=1e-6), "a later token changed an earlier output"
    assert not torch.allclose(out[:, -1], out_changed[:, -1])
    tasks = relax_tasks(_from_torch("t", model, (ids,)).mod, TARGET)
    shapes = {t.name: [tuple(int(d) for d in buf.shape) for buf in t.mod["main"].params] for t in tasks}
    # no bias: every matmul reads just its two operands (GPT-2's fuse a bias add: three inputs)
    assert all(len(s) == 3 for n, s in shapes.items() if "matmul" in n), shapes
    # SwiGLU: silu(gate) * up, silu legalized as x * sigmoid(x), over two (seq, ffn) projections
    assert any("sigmoid" in n and s == [(8, 96)] * 3 for n, s in shapes.items()), shapes


@pytest.mark.parametrize(
    ("name", "size", "matmul_flops"),
    [
        ("vit_b16", 32, 2 * 5 * 768 * 768),
        ("gpt2", 8, 2 * 8 * 768 * 50257),
        ("llama_small", 8, 2 * 8 * 1024 * 32000),  # the LM head, bias-free
    ],
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
    with pytest.raises(ValueError, match=r"size=16 out of range for convnext_tiny \(\[32, None\]\)"):
        load_network("convnext_tiny", 16)
