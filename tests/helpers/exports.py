"""Models written the way other toolchains export them, built here so tests need no files.

- ``paddle_style``: what paddle2onnx writes: a dynamic batch as ``dim_value: -1`` on the input and
  in ``value_info``, plus ``value_info`` entries left stale by an export at another size.
- ``custom_op``: an op from a custom domain (no schema, so no inference) between standard ops.
- ``control_flow``: If, Loop or Scan with a subgraph, between standard ops.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
F32 = TensorProto.FLOAT


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def _vi(name: str, dims: list[int | str | None]) -> onnx.ValueInfoProto:
    """A value_info; an int dim is written as dim_value even when negative (as paddle2onnx does)."""
    vi = helper.make_tensor_value_info(name, F32, None)
    shape = vi.type.tensor_type.shape
    for d in dims:
        dim = shape.dim.add()
        if isinstance(d, int):
            dim.dim_value = d
        elif isinstance(d, str):
            dim.dim_param = d
    return vi


def _model(graph: onnx.GraphProto, domains: tuple[str, ...] = ()) -> onnx.ModelProto:
    opsets = [helper.make_opsetid("", OPSET)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="opfuse-tests")
    model.ir_version = 8
    return model


def paddle_style(batch: int | str = -1, seed: int = 0) -> onnx.ModelProto:
    """Conv -> Relu -> MaxPool -> Flatten -> Gemm -> Softmax on Nx3x16x16 with -1 and stale dims."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Flatten", ["p1"], ["f1"], name="flatten1"),
        helper.make_node("Gemm", ["f1", "w2", "b2"], ["g1"], name="fc1", transB=1),
        helper.make_node("Softmax", ["g1"], ["y"], name="softmax1", axis=1),
    ]
    inits = [
        _init("w1", rng.normal(0, 0.3, (8, 3, 3, 3))),
        _init("b1", rng.normal(0, 0.1, (8,))),
        _init("w2", rng.normal(0, 0.1, (10, 8 * 8 * 8))),
        _init("b2", rng.normal(0, 0.1, (10,))),
    ]
    value_info = [
        _vi("c1", [-1, 8, 16, 16]),  # -1 batch, as paddle2onnx writes it
        _vi("r1", [1, 8, 16, 16]),  # stale: traced at batch 1
        _vi("p1", [-1, 8, 7, 7]),  # stale: traced at 14x14 input
        _vi("f1", [-1, -1]),
    ]
    graph = helper.make_graph(
        nodes, "paddle_style", [_vi("x", [batch, 3, 16, 16])], [_vi("y", [-1, 10])], inits,
        value_info=value_info,
    )
    return _model(graph)


def _const(name: str, array: np.ndarray, dtype: type = np.float32) -> onnx.NodeProto:
    tensor = numpy_helper.from_array(np.asarray(array, dtype=dtype), name + "_value")
    return helper.make_node("Constant", [], [name], name=name + "_const", value=tensor)


def control_flow(kind: str) -> onnx.ModelProto:
    """Relu -> (If | Loop | Scan) -> Add on a 1x8 (If, Loop) or 4x8 (Scan) float input."""
    rows = 4 if kind == "Scan" else 1
    x = helper.make_tensor_value_info("x", F32, [rows, 8])
    head = [helper.make_node("Relu", ["x"], ["r"], name="relu_in")]
    if kind == "If":
        then = helper.make_graph([helper.make_node("Sigmoid", ["r"], ["t"], name="then_sig")],
                                 "then", [], [helper.make_tensor_value_info("t", F32, [rows, 8])])
        other = helper.make_graph([helper.make_node("Neg", ["r"], ["e"], name="else_neg")],
                                  "else", [], [helper.make_tensor_value_info("e", F32, [rows, 8])])
        body = [
            helper.make_node("ReduceSum", ["r"], ["s"], name="sum", keepdims=0),
            _const("zero", np.array(0.5)),
            helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
            helper.make_node("If", ["cond"], ["cf"], name="branch", then_branch=then,
                             else_branch=other),
        ]
    elif kind == "Loop":
        loop_body = helper.make_graph(
            [helper.make_node("Identity", ["c_in"], ["c_out"], name="keep_going"),
             helper.make_node("Add", ["v_in", "r"], ["v_out"], name="acc")],
            "body",
            [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
             helper.make_tensor_value_info("v_in", F32, [rows, 8])],
            [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
             helper.make_tensor_value_info("v_out", F32, [rows, 8])],
        )
        body = [
            _const("trips", np.array(3), np.int64),
            _const("go", np.array(True), np.bool_),
            helper.make_node("Loop", ["trips", "go", "r"], ["cf"], name="loop", body=loop_body),
        ]
    elif kind == "Scan":
        scan_body = helper.make_graph(
            [helper.make_node("Add", ["st_in", "row"], ["st_out"], name="running"),
             helper.make_node("Tanh", ["st_out"], ["each"], name="squash")],
            "scan_body",
            [helper.make_tensor_value_info("st_in", F32, [8]),
             helper.make_tensor_value_info("row", F32, [8])],
            [helper.make_tensor_value_info("st_out", F32, [8]),
             helper.make_tensor_value_info("each", F32, [8])],
        )
        body = [
            _const("st0", np.zeros(8)),
            helper.make_node("Scan", ["st0", "r"], ["final", "cf"], name="scan", body=scan_body,
                             num_scan_inputs=1),
        ]
    else:
        raise ValueError(kind)
    tail = [_const("bias", np.linspace(-1, 1, 8)),
            helper.make_node("Add", ["cf", "bias"], ["y"], name="add_out")]
    graph = helper.make_graph(head + body + tail, f"control_flow_{kind.lower()}", [x],
                              [helper.make_tensor_value_info("y", F32, [rows, 8])])
    return _model(graph)


CUSTOM_DOMAIN = "com.example.vendor"


def custom_op(value_info: bool = False, seed: int = 0) -> onnx.ModelProto:
    """Conv -> Relu -> vendor Mystery (no schema) -> Conv -> Relu -> Add(skip) on 1x3x16x16.

    Without ``value_info`` nothing says what Mystery produces, so every value after it has an
    unknown type and size; with it, the model itself gives Mystery's output 1x8x16x16 float."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Mystery", ["r1"], ["m"], name="mystery", domain=CUSTOM_DOMAIN, gain=2),
        helper.make_node("Conv", ["m", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Add", ["r2", "m"], ["y"], name="skip"),
    ]
    inits = [
        _init("w1", rng.normal(0, 0.3, (8, 3, 3, 3))),
        _init("b1", rng.normal(0, 0.1, (8,))),
        _init("w2", rng.normal(0, 0.2, (8, 8, 3, 3))),
        _init("b2", rng.normal(0, 0.1, (8,))),
    ]
    extra = [helper.make_tensor_value_info("m", F32, [1, 8, 16, 16])] if value_info else []
    out = _vi("y", [1, 8, 16, 16] if value_info else ["n", "c", "h", "w"])
    graph = helper.make_graph(nodes, "custom_op", [_vi("x", [1, 3, 16, 16])], [out], inits,
                              value_info=extra)
    return _model(graph, (CUSTOM_DOMAIN,))
