"""MobileNetV2 (width 1.0, 224x224), the architecture of Sandler et al. 2018 as torchvision builds it."""

from __future__ import annotations

import onnx

from opfuse.models.graph import GraphBuilder

# (expansion t, output channels c, repeats n, first stride s), from the paper's Table 2
_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
             (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def _conv_bn(g: GraphBuilder, x: str, cout: int, k: int, name: str, *, stride: int = 1,
             group: int = 1, act: bool = True) -> str:
    # a projection (act=False) is linear: no rectifier follows, so LeCun rather than He scale
    x = g.conv(x, cout, k, f"{name}.conv", stride=stride, group=group, gain=2.0 if act else 1.0)
    x = g.bn(x, f"{name}.bn")
    return g.relu6(x, f"{name}.relu6") if act else x


def _inverted_residual(g: GraphBuilder, x: str, cout: int, stride: int, t: int, name: str) -> str:
    cin = g.shape(x)[1]
    hidden = cin * t
    y = x
    if t != 1:
        y = _conv_bn(g, y, hidden, 1, f"{name}.expand")
    y = _conv_bn(g, y, hidden, 3, f"{name}.dw", stride=stride, group=hidden)
    y = _conv_bn(g, y, cout, 1, f"{name}.project", act=False)
    if stride == 1 and cin == cout:
        y = g.add(x, y, f"{name}.add")
    return y


def mobilenet_v2() -> onnx.ModelProto:
    """MobileNetV2 1.0 on 1x3x224x224: 17 inverted residual blocks (expansion 6), ReLU6, 10 residual
    Adds, 1x1 conv to 1280, GlobalAveragePool, Reshape, Gemm to 1000 classes. 52 Conv + 52 BN."""
    g = GraphBuilder("mobilenet_v2", seed=3)
    x = g.input("input", (1, 3, 224, 224))
    x = _conv_bn(g, x, 32, 3, "features.0", stride=2)
    index = 1
    for t, c, n, s in _SETTINGS:
        for i in range(n):
            x = _inverted_residual(g, x, c, s if i == 0 else 1, t, f"features.{index}")
            index += 1
    x = _conv_bn(g, x, 1280, 1, f"features.{index}")
    x = g.global_avgpool(x, "pool")
    x = g.reshape(x, (1, -1), "flatten")  # older exporters write Reshape, newer Flatten
    x = g.gemm(x, 1000, "classifier")
    g.output(x)
    return g.model(mobilenet_v2.__doc__ or "")
