"""DS-CNN keyword spotting (Zhang et al. 2017, "Hello Edge"), the MLPerf Tiny KWS reference model."""

from __future__ import annotations

import onnx

from opfuse.models.graph import GraphBuilder


def ds_cnn() -> onnx.ModelProto:
    """DS-CNN on 1x1x49x10 MFCC features: Conv 10x4 stride 2 to 64 channels + BN + ReLU, 4 depthwise-
    separable blocks (3x3 depthwise + BN + ReLU, 1x1 pointwise + BN + ReLU), AveragePool over the
    25x5 map, Flatten, Gemm to 12 classes. Convolutions carry a bias, as Keras exports them; the
    first conv's 'same' padding is asymmetric (top 4, bottom 5) as TensorFlow pads."""
    g = GraphBuilder("ds_cnn", seed=5)
    x = g.input("input", (1, 1, 49, 10))
    x = g.conv(x, 64, (10, 4), "conv1", stride=2, pads=(4, 1, 5, 1), bias=True)
    x = g.relu(g.bn(x, "bn1"), "relu1")
    for i in range(1, 5):
        x = g.conv(x, 64, 3, f"block{i}.dw.conv", group=64, bias=True)
        x = g.relu(g.bn(x, f"block{i}.dw.bn"), f"block{i}.dw.relu")
        x = g.conv(x, 64, 1, f"block{i}.pw.conv", bias=True)
        x = g.relu(g.bn(x, f"block{i}.pw.bn"), f"block{i}.pw.relu")
    x = g.avgpool_all(x, "avgpool")
    x = g.flatten(x, "flatten")
    x = g.gemm(x, 12, "fc")
    g.output(x)
    return g.model(ds_cnn.__doc__ or "")
