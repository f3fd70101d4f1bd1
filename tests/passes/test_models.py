"""The shared real-world models: BN gone after constant-weight linear ops, outputs unchanged."""

from __future__ import annotations

from pathlib import Path

import onnx
import onnx_ir as ir
import pytest

from opfuse.passes import canonicalize
from tests.helpers.passes import assert_same_outputs, op_counts
from tests.helpers.shared import SHARED_ABSENT, SHARED_ONNX, shared_onnx

try:  # the driver imports stages other engineers are still writing
    from opfuse.pipeline import load
except ImportError:  # pragma: no cover
    from opfuse.frontends import load_onnx as load

MODELS = sorted(SHARED_ONNX.glob("*.onnx"))
# the linear ops with constant weights a BatchNormalization must have folded into
FOLDS_INTO = ("Conv", "ConvTranspose", "Gemm", "MatMul")


@pytest.mark.skipif(not MODELS, reason=f"{SHARED_ABSENT} ({SHARED_ONNX})")
@pytest.mark.parametrize("path", MODELS, ids=[p.stem for p in MODELS])
def test_shared_model(path: Path) -> None:
    before = load(path)
    after = before.clone()
    counts = canonicalize(after)
    assert set(counts) >= {"fuse_bn_into_conv", "fold_constants"}
    for node in after.graph:
        if node.op_type != "BatchNormalization":
            continue
        producer = node.inputs[0].producer()
        assert not (
            producer is not None
            and producer.op_type in FOLDS_INTO
            and producer.inputs[1].const_value is not None
        ), f"{path.name}: BN {node.name} after {producer.op_type} with constant weights"
    proto = ir.to_proto(after)
    # IR version 3 requires initializers to be graph inputs; the frontend drops them from the
    # inputs without raising the IR version (reported), so check as IR 4.
    proto.ir_version = max(proto.ir_version, 4)
    onnx.checker.check_model(proto, full_check=True)
    assert_same_outputs(before, after)


def test_weights_as_graph_inputs_keep_bn() -> None:
    path = shared_onnx("conv_bn_relu_maxpool_test.onnx")
    if not path.exists():
        pytest.skip(f"{path} missing")
    model = load(path)
    canonicalize(model)
    assert op_counts(model)["BatchNormalization"] == 1
