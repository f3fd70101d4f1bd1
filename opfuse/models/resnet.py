"""ResNet-18 (He et al. 2016) on 224x224, as torchvision builds it."""

from __future__ import annotations

import onnx

from opfuse.models.graph import GraphBuilder


def _basic_block(g: GraphBuilder, x: str, cout: int, stride: int, name: str) -> str:
    y = g.conv(x, cout, 3, f"{name}.conv1", stride=stride)
    y = g.relu(g.bn(y, f"{name}.bn1"), f"{name}.relu1")
    y = g.conv(y, cout, 3, f"{name}.conv2")
    y = g.bn(y, f"{name}.bn2")
    shortcut = x
    if stride != 1 or g.shape(x)[1] != cout:
        shortcut = g.conv(x, cout, 1, f"{name}.downsample.conv", stride=stride, pads=(0, 0, 0, 0),
                          gain=1.0)
        shortcut = g.bn(shortcut, f"{name}.downsample.bn")
    return g.relu(g.add(y, shortcut, f"{name}.add"), f"{name}.relu2")


def resnet18() -> onnx.ModelProto:
    """ResNet-18 on 1x3x224x224: 7x7 stem + MaxPool, 8 basic blocks (3x3 convs, residual Add + Relu,
    1x1 conv + BN downsample where the shape changes), GlobalAveragePool, Flatten, Gemm to 1000.
    20 Conv (3 of them downsample) + 20 BN."""
    g = GraphBuilder("resnet18", seed=4)
    x = g.input("input", (1, 3, 224, 224))
    x = g.conv(x, 64, 7, "conv1", stride=2)
    x = g.relu(g.bn(x, "bn1"), "relu")
    x = g.maxpool(x, 3, 2, 1, "maxpool")
    for stage, cout in enumerate((64, 128, 256, 512), start=1):
        for block in range(2):
            stride = 2 if stage > 1 and block == 0 else 1
            x = _basic_block(g, x, cout, stride, f"layer{stage}.{block}")
    x = g.global_avgpool(x, "avgpool")
    x = g.flatten(x, "flatten")
    x = g.gemm(x, 1000, "fc")
    g.output(x)
    return g.model(resnet18.__doc__ or "")
