"""Every named constraint of a pattern fusion (opfuse/fusion/pattern_checks.py) is what some graph
is told: one small graph per decline, whose refusal reads as that record's template with its reason
code, so a record the code stopped using, or a decline built by hand, fails here."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import numpy_helper, parser

from opfuse.fusion.attention import match
from opfuse.fusion.attention_checks import AttentionCase, check
from opfuse.fusion.constraints import PatternConstraint
from opfuse.fusion.pattern_checks import PATTERN_CONSTRAINTS
from opfuse.fusion.support import KernelSupport
from opfuse.pipeline import compile_model
from opfuse.schedule import Kernel, Partition
from opfuse.targets import load_target, target_file

RNG = np.random.default_rng(19)
T4 = "float[1, 2, 8, 4]"


def _attention(body: str, outputs: str = f"{T4} o", extra_inputs: str = "") -> str:
    """Q (1, 2, 8, 4), K through a Transpose, scores s0 scaled by c into s1, then ``body``."""
    return f"""<ir_version: 8, opset_import: ["" : 17]>
    g ({T4} q, {T4} k, {T4} v{extra_inputs}) => ({outputs}) {{
        kt = Transpose<perm = [0, 1, 3, 2]>(k)
        s0 = MatMul(q, kt)
        s1 = Div(s0, c)
        {body}
    }}"""


PLAIN = "p = Softmax<axis = -1>(s1)\n o = MatMul(p, v)"
ROW = "float[1, 8, 16]"


def _norm(body: str, outputs: str = f"{ROW} z", shape: str = ROW) -> str:
    return f"""<ir_version: 8, opset_import: ["" : 17]>
    g ({shape} x, {shape} r) => ({outputs}) {{
        {body}
    }}"""


PRENORM = "s = Add(x, r)\n y = LayerNormalization<axis = {axis}>(s, g, be)\n z = Add(s, y)"
RESIDUAL = ("m = MatMul(x, W)\n res = Add(m, x)\n y = LayerNormalization<axis = -1>(res, g, be)\n"
            " z = Add(res, y)")
CONV = ("c1 = Conv<pads = [1, 1, 1, 1]>(x, cw)\n res = Add(c1, x)\n"
        " y = LayerNormalization<axis = -1>(res, g, be)\n z = Add(res, y)")
X4 = "float[1, 4, 4, 4]"

# constraint name -> (graph text, target, custom op on this value's producer or None)
CASES: dict[str, tuple[str, str, str | None]] = {
    "constraint_attention_scores_not_output": (
        _attention(PLAIN, f"{T4} o, float[1, 2, 8, 8] p"), "x86-host", None),
    "constraint_attention_scores_read_once": (
        _attention(PLAIN + "\n side = Relu(s0)", f"{T4} o, float[1, 2, 8, 8] side"),
        "x86-host", None),
    "constraint_attention_static_shapes": (_attention(PLAIN), "x86-host", "kt"),
    "constraint_attention_softmax_over_keys": (
        _attention("p = Softmax<axis = 2>(s1)\n o = MatMul(p, v)"), "x86-host", None),
    "constraint_attention_mask_broadcasts": (
        _attention("s2 = Add(s1, mask)\n p = Softmax<axis = -1>(s2)\n o = MatMul(p, v)",
                   "float[3, 2, 8, 4] o", ", float[3, 1, 1, 8] mask"), "x86-host", None),
    "constraint_attention_scores_once_per_op": (
        _attention("sq = Mul(s1, s1)\n p = Softmax<axis = -1>(sq)\n o = MatMul(p, v)"),
        "x86-host", None),
    "constraint_attention_target_streams": (_attention(PLAIN), "npu-generic", None),
    "constraint_attention_emittable": (
        _attention("sw = Where(cond, s1, fill)\n p = Softmax<axis = -1>(sw)\n o = MatMul(p, v)"),
        "x86-host", None),
    "constraint_attention_no_epilogue": (
        _attention(PLAIN + "\n out = Relu(o)", f"{T4} out"), "x86-host", None),
    "constraint_add_norm_anchor_rows": (_norm(RESIDUAL), "nonorm", None),
    "constraint_add_norm_sum_in_elementwise": (_norm(CONV, f"{X4} z", X4), "x86-host", None),
    "constraint_add_norm_static_shape": (_norm(PRENORM.format(axis=-1)), "cortex-m7", "r"),
    "constraint_add_norm_rows": (
        _norm(PRENORM.format(axis=-1), "float[16] z", "float[16]"), "cortex-m7", None),
    "constraint_add_norm_last_axis": (_norm(PRENORM.format(axis=1)), "cortex-m7", None),
    "constraint_add_norm_statistics_unread": (
        _norm("s = Add(x, r)\n y, mu = LayerNormalization<axis = -1>(s, g, be)\n"
              " z = Add(s, y)\n t = Neg(mu)", f"{ROW} z, float[1, 8, 1] t"), "cortex-m7", None),
    "constraint_add_norm_readers_after": (
        _norm("s = Add(x, r)\n q = Neg(s)\n y = LayerNormalization<axis = -1>(s, g, be)\n"
              " z = Add(s, y)", f"{ROW} z, {ROW} q"), "cortex-m7", None),
}
CONSTANTS = {
    "c": np.array(2.0, np.float32), "cond": np.tril(np.ones((8, 8), bool)),
    "fill": np.array(-1e4, np.float32), "W": RNG.standard_normal((16, 16)).astype(np.float32),
    "g": RNG.standard_normal(16).astype(np.float32),
    "be": RNG.standard_normal(16).astype(np.float32),
    "cw": RNG.standard_normal((4, 4, 3, 3)).astype(np.float32),
}


def _save(tmp_path: Path, text: str, custom: str | None) -> Path:
    model = parser.parse_model(text)
    graph = model.graph
    used = {name for node in graph.node for name in node.input}
    graph.initializer.extend(numpy_helper.from_array(a, n) for n, a in CONSTANTS.items()
                             if n in used and n not in {i.name for i in graph.input})
    if custom is not None:  # an op nothing describes makes this value, so its size is unknown
        node = next(n for n in graph.node if custom in n.output or custom in n.input)
        if custom in node.output:
            node.domain, node.op_type = "x.y", "Foo"
        else:
            graph.input[1].name = "r_in"
            graph.node.insert(0, onnx.helper.make_node("Foo", ["r_in"], ["r"], domain="x.y"))
        model.opset_import.append(onnx.helper.make_opsetid("x.y", 1))
    path = tmp_path / "case.onnx"
    onnx.save(model, path)
    return path


def _target(name: str, tmp_path: Path) -> str:
    if name != "nonorm":
        return name
    custom = tmp_path / "nonorm.toml"  # x86-host whose MatMul kernels do not normalise rows
    custom.write_text(target_file("x86-host").read_text().replace(
        'name = "x86-host"', 'name = "nonorm"').replace("anchor_norm = true", "anchor_norm = false"))
    return str(custom)


def _reads_as(c: PatternConstraint, reason: str, message: str) -> bool:
    parts = re.split(r"\{[a-z_]+\}", c.template)
    template = re.compile("(.*?)".join(re.escape(p) for p in parts) + r"\Z", re.S)
    return reason == c.reason and template.match(message) is not None


def test_every_pattern_record_has_a_case() -> None:
    names = [c.name for c in PATTERN_CONSTRAINTS]
    assert len(set(names)) == len(names)
    assert set(names) == {*CASES, "constraint_attention_leaves_writable_kernels"}


@pytest.mark.parametrize("name", list(CASES))
def test_each_decline_is_its_record(name: str, tmp_path: Path) -> None:
    record = next(c for c in PATTERN_CONSTRAINTS if c.name == name)
    text, target, custom = CASES[name]
    part = compile_model(_save(tmp_path, text, custom), _target(target, tmp_path)).partition
    refused = [(d.reason, d.message) for d in part.decisions if not d.fused]
    assert any(_reads_as(record, *r) for r in refused), refused
    # and no other record of a pattern reads the same way: the first to refuse is this one
    others = [c for c in PATTERN_CONSTRAINTS if c is not record and c.template != record.template]
    assert not any(_reads_as(c, *r) for c in others for r in refused), refused


def test_a_core_that_would_leave_an_unwritable_kernel_declines(tmp_path: Path) -> None:
    """The greedy partition put the Q projection's two Relus in one kernel with the core's first
    MatMul; a backend that writes no Relu chain refuses what the core would leave of it."""
    text = _attention(PLAIN).replace("s0 = MatMul(q, kt)", "a = Relu(q)\n b = Relu(a)\n"
                                     " s0 = MatMul(b, kt)")
    model = compile_model(_save(tmp_path, text, None), "x86-host").optimized  # named, shaped
    by_name = {n.name: n for n in model.graph}
    softmax = next(n for n in model.graph if n.op_type == "Softmax")
    core = match(softmax)
    names = [n.name for n in model.graph if n.op_type == "Relu"] + [core.qk.name]
    layers = Partition("x86-host", (Kernel("fused_relu_relu_matmul", tuple(names),
                                           ("Relu", "Relu", "MatMul"), (), ()),), ())

    def no_relu_chain(nodes: list[ir.Node]) -> str | None:
        relus = len(nodes) > 1 and all(n.op_type == "Relu" for n in nodes)
        return "it writes no Relu chain" if relus else None

    support = KernelSupport("the C backend", no_relu_chain)
    refusal = check(AttentionCase(core, load_target("x86-host"), support, 17, layers, by_name))
    record = next(c for c in PATTERN_CONSTRAINTS
                  if c.name == "constraint_attention_leaves_writable_kernels")
    assert refusal is not None and _reads_as(record, refusal.reason, refusal.message), refusal
    assert "fused_relu_relu_matmul" in refusal.message
