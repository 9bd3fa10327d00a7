"""The zoo's registry: network name -> `Network` (builder, example input, default size), all batch 1.

Kinds that Pruner and TenSet evaluate: residual CNNs (ResNet-18/50, ResNeXt-50, Wide ResNet-50-2),
mobile CNNs (MobileNetV2; MobileNetV3-Large and EfficientNet-B0, with squeeze-and-excitation and 5x5
depthwise convolutions), a densely connected CNN (DenseNet-121), a multi-branch CNN (Inception-v3), a
segmentation network (DeepLabV3), a transformer-styled CNN (ConvNeXt-T: 7x7 depthwise convolutions, layer
norms, GELU MLPs), encoders (BERT-base/large/tiny, ViT-B/16, ViT-L/16) and decoders (GPT-2 style, small and
medium; a small LLaMA style one with RMSNorm, rotary embeddings and SwiGLU).
"""

from __future__ import annotations

from data.zoo.common import Network, image, tokens
from data.zoo.convnext import ConvNeXt
from data.zoo.deeplab import DeepLabV3
from data.zoo.densenet import DenseNet
from data.zoo.inception import InceptionV3
from data.zoo.mbconv import EfficientNet, MobileNetV3
from data.zoo.mobilenet import MobileNetV2
from data.zoo.resnet import BasicBlock, Bottleneck, ResNet
from data.zoo.transformer import Bert, Gpt, Llama, VisionTransformer

__all__ = ["NETWORKS"]

NETWORKS: dict[str, Network] = {
    "resnet_18": Network(lambda: ResNet(BasicBlock, (2, 2, 2, 2)), image, 224),
    "resnet_50": Network(lambda: ResNet(Bottleneck, (3, 4, 6, 3)), image, 224),
    "mobilenet_v2": Network(MobileNetV2, image, 224),
    # Two layers suffice: further identical layers only raise the weights of the same tasks.
    "bert_base": Network(lambda: Bert(hidden=768, heads=12, ffn=3072, layers=2), tokens, 128, max_size=512),
    "bert_tiny": Network(lambda: Bert(hidden=128, heads=2, ffn=512, layers=2), tokens, 128, max_size=512),
    "resnext_50": Network(lambda: ResNet(Bottleneck, (3, 4, 6, 3), groups=32, base_width=4), image, 224),
    "densenet_121": Network(DenseNet, image, 224),
    "inception_v3": Network(InceptionV3, image, 299, min_size=75),
    "deeplabv3_resnet50": Network(DeepLabV3, image, 512),
    "vit_b16": Network(VisionTransformer, image, 224, min_size=16, max_size=512),
    "gpt2": Network(Gpt, tokens, 128, max_size=1024),
    # The "large"/"medium" sizes (hidden 1024, 16 heads, FFN 4096) give the dense and batch_matmul
    # kernels shapes of their own, so a held-out encoder has relatives of other shapes to learn from.
    "bert_large": Network(lambda: Bert(hidden=1024, heads=16, ffn=4096, layers=2), tokens, 128, max_size=512),
    "gpt2_medium": Network(lambda: Gpt(hidden=1024, heads=16, ffn=4096), tokens, 256, max_size=1024),
    "vit_l16": Network(
        lambda: VisionTransformer(hidden=1024, heads=16, ffn=4096), image, 224, min_size=16, max_size=512
    ),
    "efficientnet_b0": Network(EfficientNet, image, 224),
    "mobilenet_v3_large": Network(MobileNetV3, image, 224),
    # ResNet-50 with bottlenecks twice as wide (3x3 convolutions over 128..1024 channels).
    "wide_resnet_50": Network(lambda: ResNet(Bottleneck, (3, 4, 6, 3), base_width=128), image, 224),
    # at least 32 px: the 4x4 stride-4 stem and three 2x2 stride-2 downsamplings leave a 1x1 map
    "convnext_tiny": Network(ConvNeXt, image, 224, min_size=32),
    # hidden 1024 like gpt2_medium but SwiGLU's width 2816 and a 32000-token head: shapes of their own
    "llama_small": Network(Llama, tokens, 256, max_size=2048),
}
"""Network name -> definition; all run with batch 1."""
