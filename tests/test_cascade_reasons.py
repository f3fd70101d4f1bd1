"""The partitioner's cascade reasons that tests/test_cascade.py does not reach: a chain value read
twice (``multiple_consumers``) or also a graph output (``graph_output``) is stored whole, so the
cascade is cut there, with a message naming the value, and the rest of the chain still streams."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from opfuse.frontends import import_proto
from opfuse.fusion import REASONS, partition
from opfuse.targets import load_target
from tests.helpers.chain_graph import ChainGraph


def block() -> ChainGraph:
    """1x1 expand -> ReLU -> 3x3 depthwise -> ReLU -> 1x1 project -> ReLU: one cascade when
    nothing else reads its values."""
    g = ChainGraph(8, 24, 24)
    g.conv(48, (1, 1))
    g.op("Relu")
    g.conv(48, (3, 3), pads=(1, 1, 1, 1), group=48)
    g.op("Relu")
    g.conv(8, (1, 1))
    g.op("Relu")
    return g


def partitioned(g: ChainGraph, target: str):  # noqa: ANN201
    proto = onnx.shape_inference.infer_shapes(g.model())
    return partition(import_proto(proto, "reasons"), load_target(target))


def reasons(part) -> dict[tuple[str, str], tuple[str, str]]:  # noqa: ANN001
    return {(d.producer, d.consumer): (d.reason, d.message) for d in part.cascade_decisions}


@pytest.mark.parametrize("target", ["cortex-m7", "cortex-a76"])
def test_the_whole_block_is_one_cascade(target: str) -> None:
    part = partitioned(block(), target)
    (k,) = part.cascades
    assert k.ops.count("Conv") == 3 and not part.cascade_decisions


@pytest.mark.parametrize("target", ["cortex-m7", "cortex-a76"])
def test_a_value_read_twice_is_stored_whole(target: str) -> None:
    g = block()
    # the depthwise output (relu3) is also read by a side 1x1 conv added to the block's end
    end = g.cur
    g.cur, g.c = "relu3", 48
    side = g.conv(8, (1, 1))
    g.cur = end
    g.op("Add", side)
    part = partitioned(g, target)
    ((reason, message),) = [v for (a, _), v in reasons(part).items() if a == "relu3"]
    assert reason == "multiple_consumers" and "'relu3' is read by 2 ops" in message
    assert all("relu3" not in {r.value for r in k.ring_buffers} for k in part.cascades)
    assert any(k.nodes[0] == "conv0" and "conv2" in k.nodes for k in part.cascades)


@pytest.mark.parametrize("target", ["cortex-m7", "cortex-a76"])
def test_a_graph_output_is_stored_whole(target: str) -> None:
    g = block()
    proto = g.model()
    proto.graph.output.append(helper.make_tensor_value_info("relu3", TensorProto.FLOAT, None))
    part = partition(import_proto(onnx.shape_inference.infer_shapes(proto), "reasons"),
                     load_target(target))  # fmt: skip
    ((reason, message),) = [v for (a, _), v in reasons(part).items() if a == "relu3"]
    assert reason == "graph_output" and "'relu3' is a graph output" in message
    assert all("relu3" not in {r.value for r in k.ring_buffers} for k in part.cascades)
    assert all(d.reason in REASONS for d in part.cascade_decisions)
