"""The seeds' worked examples: a MobileNet depthwise-separable block and a small conv pipeline."""

from __future__ import annotations

import onnx

from opfuse.models.graph import GraphBuilder


def seed_block() -> onnx.ModelProto:
    """3x3 depthwise Conv -> BN -> ReLU6 -> 1x1 Conv (32 -> 64) -> BN -> ReLU6 on 1x32x56x56.

    With int8 activations this is the seeds' traffic example: 6 kernels moving 1,705,984 bytes
    before fusion, 2 kernels moving 501,760 bytes after (56x56x32 in, 56x56x64 out).
    """
    g = GraphBuilder("seed_block", seed=1)
    x = g.input("input", (1, 32, 56, 56))
    x = g.conv(x, 32, 3, "dw.conv", group=32)
    x = g.relu6(g.bn(x, "dw.bn"), "dw.relu6")
    x = g.conv(x, 64, 1, "pw.conv")
    x = g.relu6(g.bn(x, "pw.bn"), "pw.relu6")
    g.output(x)
    return g.model(seed_block.__doc__ or "")


def seed_pipeline() -> onnx.ModelProto:
    """Conv -> BN -> ReLU -> Conv -> MaxPool on 1x16x256x256 (about 1M elements per tensor).

    3x3 convolutions with padding 1 keep 16 channels; MaxPool 2x2 stride 2 gives 1x16x128x128.
    """
    g = GraphBuilder("seed_pipeline", seed=2)
    x = g.input("input", (1, 16, 256, 256))
    x = g.conv(x, 16, 3, "conv1")
    x = g.relu(g.bn(x, "bn1"), "relu1")
    x = g.conv(x, 16, 3, "conv2", bias=True)
    x = g.maxpool(x, 2, 2, 0, "pool")
    g.output(x)
    return g.model(seed_pipeline.__doc__ or "")
