"""The op registry (opfuse/ops/) is the one place op facts live: every op set elsewhere is one of
its queries, the C backend's dispatch tables cover exactly the ops it says the C writes, and no
module keeps a hand-written set of op names (docs/architecture.md, "Op registry")."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import numpy as np
import onnx
import onnx.defs
import onnx_ir as ir
import pytest

from opfuse import ops
from opfuse.backends.c import cascade, kernels, layout, norms, pools
from opfuse.backends.c.int8 import INT8_KERNELS, chain, lut
from opfuse.ops import groups
from opfuse.quant import QuantParams

ROOT = Path(__file__).resolve().parent.parent / "opfuse"

# Constant has a C kernel (it writes its value) but no fusion kind: canonicalization folds it into
# an initializer, and an unfolded one stays its own kernel.
NOT_IN_TABLE = {"Constant"}

# (module, name) -> the registry query it must equal
DERIVED = {
    ("opfuse.fusion.rules", "CONVERSIONS"): groups.CONVERSIONS,
    ("opfuse.fusion.rules", "POOLS"): groups.ALL_POOLS,
    ("opfuse.fusion.stages", "WINDOWED"): groups.WINDOWED,
    ("opfuse.memory.inplace", "DATA_MOVEMENT"): groups.VIEWS,
    ("opfuse.cost.cwork", "CONVERSIONS"): groups.CONVERSIONS,
    ("opfuse.cost.cwork", "CLAMPS"): groups.CLAMPS,
    ("opfuse.cost.cwork", "VIEWS"): groups.VIEWS,
    ("opfuse.cost.kclass", "_POOLS"): groups.POOLS,
    ("opfuse.cost.kclass", "_GEMMS"): groups.MATRIX,
    ("opfuse.cost.npu", "FREE_OPS"): groups.NPU_FREE,
    ("opfuse.cost.npu", "_POOLS"): groups.POOLS,
    ("opfuse.cost.npu", "_GLOBAL"): groups.GLOBAL_POOLS | groups.POOL_REDUCES,
    ("opfuse.frontends.qdq", "CLAMPS"): groups.CLAMPS,
    ("opfuse.frontends.qdq", "QUANTIZABLE"): groups.QUANTIZABLE,
    ("opfuse.frontends.qdq", "PASS_THROUGH"): groups.QUANT_PASS,
    ("opfuse.backends.onnx.qdq", "CONVERSIONS"): groups.CONVERSIONS,
    ("opfuse.backends.onnx.qdq", "CLAMPS"): groups.CLAMPS,
    ("opfuse.passes._linear", "LINEAR_OPS"): groups.ANCHORS,
    ("opfuse.backends.c.kernels", "ANCHOR_OPS"): groups.C_ANCHORS,
    ("opfuse.backends.c.layout", "VIEW_OPS"): groups.VIEWS,
    ("opfuse.backends.c.norms", "REDUCE_OPS"): groups.c_float("reduce"),
    ("opfuse.backends.c.pools", "POOL_OPS"): groups.c_float("pool"),
    ("opfuse.backends.c.epilogue", "EPILOGUE_OPS"): groups.C_EXPRS,
    ("opfuse.backends.c.support", "_INT8_ANCHORS"): groups.C_INT8_ANCHORS,
    ("opfuse.backends.c.support", "_INT8_POOLS"): groups.c_int8("pool"),
    ("opfuse.backends.c.cascade", "_EPILOGUE"): groups.C_CASCADE,
    ("opfuse.backends.c.cascade_pool", "POOLS"): groups.POOLS,
    ("opfuse.backends.c.int8.cascade", "POOLS"): groups.POOLS,
    ("opfuse.backends.c.int8.chain", "CLAMP_OPS"): groups.C_INT8_CLAMPS,
    ("opfuse.backends.c.int8.chain", "BINARY_OPS"): groups.C_INT8_BINARY,
    ("opfuse.backends.c.int8.chain", "CHAIN_OPS"): groups.C_INT8_CHAIN,
    ("opfuse.backends.c.int8.lut", "LUT_OPS"): groups.C_INT8_LUT,
}

# Literals of two or more ONNX op names that stay, by (file name, the names) or (file name, the
# name a module-level literal is assigned to), and why. The key is the file's name, not its path,
# so a module that moves keeps its entry.
ALLOWED = {
    # patterns: the ops a recognised subgraph may contain, not a capability of an op
    ("attention.py", "SCORE_OPS"): "the score ops (scale, mask) the attention pattern accepts",
    ("integer_reference.py", "ANCHORS"): "the ops ONNX defines an integer form of (QLinearConv, "
                                         "QLinearMatMul, Gemm as MatMul + bias): the spec's",
    ("mcu_probe.py", "FLOAT_LEFT"): "the ops onnxruntime's quantizer leaves in float: its choice",
    # the C expression writer's own branches: one expression for two ops of one formula
    ("epilogue.py", ("HardSigmoid", "HardSwish")): "one C formula with two defaults",
    ("epilogue.py", ("Max", "Min", "Sum")): "one variadic C fold for three ops",
    ("residual.py", ("Add", "Sub")): "the x86 vector residual kernel's own two formulas (TFLite's "
                                     "ADD and SUB with their scales)",
    ("epilogue.py", ("Add", "Sum")): "the chain's per-channel vector step: the accumulator "
                                     "plus one residual operand (a two-input Sum)",
    ("chain.py", ("Add", "Sub")): "the ISA's vector elementwise_add kernel takes exactly TFLite's "
                                  "ADD and SUB",
    ("recurrent.py", ("Sigmoid", "Tanh")): "the LSTM/GRU activations attribute's default values "
                                           "(ONNX's RNN spec), not ops of the graph",
    ("if_fold.py", ("Shape", "Size")): "ONNX ops that read a value's shape, not its data (an "
                                       "If condition's inputs, frontends/if_fold.py)",
    # onnxruntime's fusions, which the ONNX backend asks for: ORT's lists, not opfuse's
    ("ort_fusion.py", ("Clip", "HardSigmoid", "LeakyRelu", "Relu", "Sigmoid", "Tanh")):
        "onnxruntime's FusedConv activations",
    ("ort_fusion.py", ("HardSigmoid", "LeakyRelu", "Relu", "Sigmoid", "Tanh")):
        "onnxruntime's FusedGemm activations",
    ("ort_fusion.py", ("Conv", "Gemm", "MatMul")): "the ops onnxruntime fuses an activation into",
    ("ort_fusion.py", ("Add", "Sum")): "onnxruntime's Conv+Add fusion pattern",
    # a probe's grouping of its cases by what ran before them: a measurement choice
    ("int8_probe.py", ("Conv", "Gemm")): "groups probe cases by the anchor that ran before",
    # the QOperator format's op types, rewritten into QDQ before the registry sees the graph
    ("qoperator.py", ("QLinearConv", "QLinearMatMul")): "QOperator ops (foreign format)",
    # input validation over every ONNX op with these attributes, known to the registry or not
    ("size_check.py", ("Expand", "Tile")): "ops whose output size a shape input sets",
    ("window_check.py", ("Conv", "ConvInteger", "ConvTranspose")): "ONNX schemas with weights",
    ("window_check.py", ("AveragePool", "LpPool", "MaxPool")): "ONNX schemas with kernel_shape",
    ("pool_ceil.py", ("AveragePool", "LpPool", "MaxPool")): "ONNX schemas with ceil_mode",
    # rewrite patterns: the ops a rewrite proves it may match or move through
    ("rules.py", ("Add", "Sub")): "the shift of a Mul-then-Add scale-and-shift pattern",
    ("__init__.py", ("Dropout", "Identity")): "no-ops onnxscript's optimizer removes, counted",
    # ONNX semantics over every op a Transpose may move past, most of them unknown to the registry
    ("_push.py", "REDUCE_OPS"): "ONNX reductions a Transpose moves through (by axes)",
    ("_push.py", "UNARY_OPS"): "ONNX ops of one data input a Transpose commutes with",
    ("_push.py", "ELEMENTWISE_OPS"): "ONNX broadcasting ops a Transpose commutes with",
    ("_push.py", ("Concat", "Identity", "Pad", "Transpose")): "ops the push rewrites axes of",
    ("views.py", "_NHWC_OPS"): "the ops the TFLite frontend applies to a graph input in its NHWC "
                               "layout before the boundary Transpose (a float input's "
                               "QuantizeLinear, then a Pad canonicalization moved above it)",
    ("affine.py", ("Add", "Div", "Mul", "Sub")): "the affine fold's pattern",
    ("affine.py", ("Add", "Mul", "Sub")): "the affine fold's pattern",
    ("hardswish.py", ("Div", "Mul")): "the HardSwish pattern's last op",
    ("pad.py", ("Abs", "Exp", "HardSigmoid", "Relu", "Sigmoid", "Softplus")):
        "ops a constant pad is pushed through",
}

# Name sets that are not ONNX op types at all, and what they name.
FOREIGN = {
    ("opfuse.cost.vela", "_FUSED_ACTIVATIONS"): "Vela's fused-activation names (TFLite's)",
    ("opfuse.frontends.tflite.mapping", "IMPORTERS"): "TFLite builtin operators, each imported "
    "into ONNX nodes the registry then reads",
    ("opfuse.passes._driver", "QUANT_SAME_PARAMS"): "names of passes, not of ops",
}

_ONNX_OPS = frozenset(s.name for s in onnx.defs.get_all_schemas_with_history())


def _node(text: str, op: str) -> ir.Node:
    model = ir.from_proto(onnx.parser.parse_model(text))
    return next(n for n in model.graph if n.op_type == op)


_REDUCE_MIN = """<ir_version: 8, opset_import: ["" : 17]>
g (float[1,8,4,4] x) => (float[1,8,1,1] y) {
    axes = Constant <value = int64[2] {2, 3}> ()
    y = ReduceMin <keepdims = 1> (x, axes)
}"""


@pytest.mark.parametrize(("module", "name"), sorted(DERIVED))
def test_every_op_set_is_a_registry_query(module: str, name: str) -> None:
    found = getattr(importlib.import_module(module), name)
    assert frozenset(found) == DERIVED[module, name], f"{module}.{name} differs from the registry"


def _literals(tree: ast.AST) -> list[tuple[int, tuple[str, ...], str]]:
    """Set, tuple and list literals (and ``"A B".split()``) of two or more ONNX op names, each
    with the name it is assigned to ("" when none)."""
    targets = {}
    for a in ast.walk(tree):
        if isinstance(a, ast.Assign) and isinstance(a.targets[0], ast.Name):
            value = a.value  # a literal, or one wrapped in frozenset(...) / set(...)
            if isinstance(value, ast.Call) and value.args and not isinstance(value.func, ast.Attribute):
                value = value.args[0]
            targets[id(value)] = targets[id(a.value)] = a.targets[0].id
    found = []
    for node in ast.walk(tree):
        words: list[str] = []
        if isinstance(node, ast.Set | ast.Tuple | ast.List):
            words = [e.value for e in node.elts
                     if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "split" and isinstance(node.func.value, ast.Constant)
              and isinstance(node.func.value.value, str)):
            words = node.func.value.value.split()
        names = tuple(sorted({w for w in words if w in _ONNX_OPS}))
        if len(names) >= 2:
            found.append((node.lineno, names, targets.get(id(node), "")))
    return found


def test_no_hand_kept_op_sets_outside_the_registry() -> None:
    stray, used = [], set()
    for path in sorted(ROOT.rglob("*.py")):
        if path.parent.name == "ops" and path.parent.parent == ROOT:
            continue
        for line, names, target in _literals(ast.parse(path.read_text())):
            key = next((k for k in ((path.name, names), (path.name, target)) if k in ALLOWED), None)
            if key is not None:
                used.add(key)
            else:
                stray.append(f"{path.relative_to(ROOT.parent)}:{line}: {', '.join(names)}")
    assert not stray, ("op-name literals outside opfuse/ops/: derive them from opfuse.ops.groups "
                       "or add them to ALLOWED with a reason:\n" + "\n".join(stray))
    assert not ALLOWED.keys() - used, f"stale ALLOWED entries: {sorted(ALLOWED.keys() - used)}"


def test_the_scan_finds_a_hand_kept_set() -> None:
    tree = ast.parse('A = frozenset({"Relu", "Clip"})\nB = "Sigmoid Tanh".split()\nC = ("a", "Relu")')
    assert sorted(_literals(tree)) == [(1, ("Clip", "Relu"), "A"), (2, ("Sigmoid", "Tanh"), "B")]


@pytest.mark.parametrize(("module", "name"), sorted(FOREIGN))
def test_foreign_name_sets_are_not_onnx_ops(module: str, name: str) -> None:
    names = set(getattr(importlib.import_module(module), name))
    assert len(names & _ONNX_OPS) <= 1, f"{module}.{name} names ONNX ops: derive it ({FOREIGN})"


def test_qoperator_ops_rewrite_into_ops_the_registry_knows() -> None:
    from opfuse.frontends import qoperator

    # QOPS is foreign (QOperator op types); the float ops it rewrites into are registry ops
    tables = [d for d in vars(qoperator).values() if isinstance(d, dict) and d
              and all(str(k).startswith("QLinear") for k in d)]
    rewrites = [v for d in tables for v in d.values()]
    assert rewrites and set(rewrites) <= ops.OPS.keys()


def test_every_op_with_a_c_kernel_is_in_the_op_table() -> None:
    assert kernels.COVERED - set(ops.OPS) == NOT_IN_TABLE


def _same(found: set[str], claimed: set[str], what: str) -> None:
    assert found == claimed, (
        f"{what}: emitted but not in the registry {sorted(found - claimed)}, claimed by the "
        f"registry but not emitted {sorted(claimed - found)} (set c=/c8=/cascade= in "
        "opfuse/ops/table.py)")


def test_the_c_dispatch_tables_cover_what_the_registry_claims() -> None:
    float_heads = {op for op, dt in kernels.REGISTRY if dt == "float"} - NOT_IN_TABLE
    int8_heads = {op for op, dt in kernels.REGISTRY if dt == "int8"}
    _same(float_heads, {op for op, i in ops.OPS.items() if i.c or i.c_expr}, "float C kernels")
    _same(int8_heads, {op for op, i in ops.OPS.items() if i.c8}, "int8 C kernels")
    _same(set(INT8_KERNELS), int8_heads, "int8/__init__.py INT8_KERNELS")
    _same(set(kernels.SINGLE),
          set(groups.c_float("view", "layout", "reduce", "norm", "gather", "typed", "recurrent",
                             "fold")),
          "kernels.SINGLE (view, layout, reduce, norm, gather, typed, recurrent and fold kernels)")
    _same(set(cascade._BINARY) | set(cascade._UNARY) | set(groups.CLAMPS),
          set(groups.C_CASCADE), "cascaded float C (cascade._BINARY, _UNARY and the clamps)")
    assert chain.CHAIN_OPS == groups.C_INT8_CHAIN


def test_every_int8_table_op_has_a_table() -> None:
    q = QuantParams(np.array([0.05], np.float32), np.array([0], np.int64))
    for op in sorted(groups.C_INT8_LUT):
        assert lut.float_table(op, q, q, -128, 127).shape == (256,), op


def test_registry_fields_use_known_names() -> None:
    for op, info in ops.OPS.items():
        assert info.tags <= ops.TAGS.keys(), op
        assert info.c in (None, *ops.FLOAT_FAMILIES), op
        assert info.c8 in (None, *ops.INT8_FAMILIES), op
    # a cascade member writes its epilogue with the layer-by-layer C expression
    assert groups.C_CASCADE <= groups.C_EXPRS, sorted(groups.C_CASCADE - groups.C_EXPRS)
    assert groups.dtypes("Conv") == ("float32", "int8")
    assert groups.dtypes("ConvTranspose") == ("float32", "int8")
    assert groups.dtypes("NoSuchOp") == ()


def test_reducemin_is_a_reduction_everywhere() -> None:
    from opfuse.fusion.rules import CLOSED, initial_stage
    from opfuse.memory.inplace import kernel_in_place
    from opfuse.schedule import Kernel

    node = _node(_REDUCE_MIN, "ReduceMin")
    assert ops.kind(node) == ops.kind(_node(_REDUCE_MIN.replace("Min", "Max"), "ReduceMax"))
    assert ops.kind(node) == ops.OpKind.REDUCE and initial_stage(node) == CLOSED
    assert ops.flops(node) == 128  # one comparison per input element
    assert "ReduceMin" in groups.REDUCTIONS and ("ReduceMin", "float") in kernels.REGISTRY
    assert "ReduceMin" in norms.REDUCE_OPS
    kernel = Kernel("reducemin", (node.name,), ("ReduceMin",), ("x",), ("y",))
    assert not kernel_in_place(kernel, {node.name: node})  # 128 in, 8 out: no aliasing


def test_dropout_is_a_view_everywhere() -> None:
    from opfuse.cost.cwork import is_view
    from opfuse.memory.inplace import DATA_MOVEMENT

    node = _node("""<ir_version: 8, opset_import: ["" : 17]>
g (float[1,8] x) => (float[1,8] y) { y = Dropout (x) }""", "Dropout")
    assert is_view([node]) and "Dropout" in DATA_MOVEMENT and "Dropout" in layout.VIEW_OPS
    assert pools.POOL_OPS == groups.ALL_POOLS
