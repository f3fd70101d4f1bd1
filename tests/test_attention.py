"""The attention core as one kernel (opfuse/fusion/attention.py, opfuse/backends/c/attention.py):
recognised on the forms exporters write, declined with a reason otherwise, numerically equal to
onnxruntime through the C, and the score matrix gone from the memory plan."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from opfuse.analysis import analyze
from opfuse.api import validate_c
from opfuse.backends.c import emit_c
from opfuse.fusion.attention import BLOCK_ROWS, HOST_MAX_ROWS, HOST_ROW_STEP, HOST_SCORE_FLOATS
from opfuse.memory import plan_memory
from opfuse.memory.lifetimes import RING_PREFIX
from opfuse.memory.verify import verify_allocation
from opfuse.pipeline import compile_model
from opfuse.schedule import Partition
from opfuse.targets import load_target
from tests.helpers.sanitize import sanitized_run_matches

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
F = TensorProto.FLOAT


@dataclasses.dataclass(frozen=True)
class Spec:
    """One attention graph: O = Softmax(scale(Q Kt) + mask) V."""

    batch: tuple[int, ...] = (1, 2)  # (B, H) or (B*H,)
    s: int = 8  # keys (and queries, unless m says otherwise)
    d: int = 4
    m: int | None = None  # queries, when not s (cross-attention)
    dv: int | None = None  # V's width, when not d
    scale: str | None = "div"  # "mul", "div" or None (folded into Q)
    mask: str | None = None  # "const" (1, S) additive, "input" (B, 1, 1, S) graph input
    k: str = "transpose"  # "transpose": K (.., S, D) through a Transpose; "pre": Kt (.., D, S)
    axis: int = -1
    extra: str | None = None  # "scores_read" / "probs_output": a near miss
    mask_shape: tuple[int, ...] | None = None  # overrides the mask's shape


def build(spec: Spec) -> onnx.ModelProto:
    rank = len(spec.batch) + 2
    sd = [*spec.batch, spec.s, spec.d]
    k_shape = sd if spec.k == "transpose" else [*spec.batch, spec.d, spec.s]
    q_shape = [*spec.batch, spec.m or spec.s, spec.d]
    v_shape = [*spec.batch, spec.s, spec.dv or spec.d]
    inputs = [helper.make_tensor_value_info("q", F, q_shape),
              helper.make_tensor_value_info("k", F, k_shape),
              helper.make_tensor_value_info("v", F, v_shape)]
    inits = [numpy_helper.from_array(np.array(spec.d ** 0.5, np.float32), "c")]
    nodes, kt = [], "k"
    if spec.k == "transpose":
        perm = [*range(rank - 2), rank - 1, rank - 2]
        nodes.append(helper.make_node("Transpose", ["k"], ["kt"], name="kt", perm=perm))
        kt = "kt"
    nodes.append(helper.make_node("MatMul", ["q", kt], ["s0"], name="scores"))
    last = "s0"
    if spec.scale is not None:
        op = "Div" if spec.scale == "div" else "Mul"
        if op == "Mul":
            inits[0] = numpy_helper.from_array(np.array(spec.d ** -0.5, np.float32), "c")
        nodes.append(helper.make_node(op, [last, "c"], ["s1"], name="scale"))
        last = "s1"
    if spec.mask is not None:
        shape = spec.mask_shape or ((1, spec.s) if spec.mask == "const" else (1, 1, 1, spec.s))
        if spec.mask == "const":
            rng = np.random.default_rng(1)
            inits.append(numpy_helper.from_array(
                np.where(rng.random(shape) < 0.3, -1e4, 0).astype(np.float32), "mask"))
        else:
            inputs.append(helper.make_tensor_value_info("mask", F, list(shape)))
        nodes.append(helper.make_node("Add", [last, "mask"], ["s2"], name="mask_add"))
        last = "s2"
    nodes.append(helper.make_node("Softmax", [last], ["p"], name="softmax", axis=spec.axis))
    nodes.append(helper.make_node("MatMul", ["p", "v"], ["o"], name="context"))
    outputs = [helper.make_tensor_value_info("o", F, None)]
    if spec.extra == "scores_read":
        nodes.append(helper.make_node("Relu", ["s0"], ["side"], name="side"))
        outputs.append(helper.make_tensor_value_info("side", F, None))
    if spec.extra == "probs_output":
        outputs.append(helper.make_tensor_value_info("p", F, None))
    graph = helper.make_graph(nodes, "attention", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model = onnx.shape_inference.infer_shapes(model)
    onnx.checker.check_model(model, full_check=True)
    return model


def save(spec: Spec, tmp_path: Path) -> Path:
    path = tmp_path / "attention.onnx"
    onnx.save(build(spec), path)
    return path


def without_attention(target: str):
    t = load_target(target)
    return dataclasses.replace(t, fusion=dataclasses.replace(t.fusion, attention=False))


def attention_kernels(partition: Partition) -> list:
    return [k for k in partition.kernels if k.name.startswith("attention")]


FORMS = {
    "single_head_div": Spec(batch=(1, 1)),
    "multi_head_mul": Spec(batch=(2, 3), scale="mul"),
    "mask_input": Spec(mask="input"),
    "mask_const_pre_transposed": Spec(mask="const", k="pre", scale="mul"),
    "scale_folded_bh_flat": Spec(batch=(6,), scale=None),
    "long_keys": Spec(batch=(1, 2), s=37, d=5, mask="input"),
    "causal_const_mask": Spec(mask="const", mask_shape=(8, 8)),
    "cross_attention": Spec(batch=(2, 3), s=11, d=6, m=5, dv=9, mask="input", k="pre"),
    # blocks of 52 query rows (32768 // 600, in 4s): two whole blocks and one of 26, in tiles of
    # 4 rows and a last of 2, K's columns strided (its Transpose) and copied panel by panel
    "many_blocks": Spec(batch=(1, 2), s=600, d=5, m=130, dv=7, mask="input"),
    "many_blocks_pre": Spec(batch=(1,), s=600, d=6, m=105, mask="const", k="pre"),
    # 260 * 16 floats exceed the MatMul core's stack panel: Q @ K^T in plain loops
    "deep_head": Spec(batch=(1, 2), s=9, d=260),
}


@pytest.mark.parametrize("name", list(FORMS))
def test_core_is_one_kernel(name: str, tmp_path: Path) -> None:
    spec = FORMS[name]
    result = compile_model(save(spec, tmp_path), "x86-host")
    (kernel,) = attention_kernels(result.partition)
    assert len(result.partition.kernels) == 1, result.partition.kernels
    core_ops = {"MatMul", "Softmax"} | ({"Transpose"} if spec.k == "transpose" else set())
    assert core_ops <= set(kernel.ops)
    assert kernel.outputs == ("o",)
    assert not {"s0", "s1", "s2", "p"} & set(kernel.inputs)
    ring, *head = kernel.ring_buffers  # the scratch rows: a block of query rows of the scores
    fit = min(HOST_MAX_ROWS, HOST_SCORE_FLOATS // spec.s)
    rows = min(fit // HOST_ROW_STEP * HOST_ROW_STEP, spec.m or spec.s)
    assert (ring.value, ring.rows, ring.row_bytes) == ("s0", rows, spec.s * 4)
    # K through its Transpose: one head of Kt (D rows of S floats), packed once per head
    heads = [("kt", spec.d, spec.s * 4)] if spec.k == "transpose" else []
    assert [(h.value, h.rows, h.row_bytes) for h in head] == heads
    assert not [d for d in result.partition.decisions if d.consumer in kernel.nodes
                and d.producer in kernel.nodes]


@needs_gcc
@pytest.mark.parametrize("name", list(FORMS))
def test_c_matches_onnxruntime(name: str, tmp_path: Path) -> None:
    report = validate_c(save(FORMS[name], tmp_path), "x86-host")
    assert report.ok, report
    for out in report.outputs:
        assert out.max_abs_err <= 1e-5 * out.max_ref + 1e-6, out


@needs_gcc
def test_c_is_sanitizer_clean(tmp_path: Path) -> None:
    path = save(Spec(batch=(2, 2), s=9, d=3, mask="input"), tmp_path)
    folder = tmp_path / "c"
    emitted = emit_c(compile_model(path), folder)
    assert emitted.kernels == 1 and "k0_attention" in (folder / "model.c").read_text()
    sanitized_run_matches(folder, path)


def test_block_scratch_is_accounted(tmp_path: Path) -> None:
    """The block's scores and one head of Kt in panels (K's columns are strided) are planned
    rings: model.json lists them, the arena holds them, and no panel is copied onto the stack."""
    import json

    folder = tmp_path / "c"
    result = compile_model(save(FORMS["many_blocks"], tmp_path), "x86-host")
    emitted = emit_c(result, folder)
    (kernel,) = json.loads((folder / "model.json").read_text())["kernel_outputs"]
    assert kernel["ring_buffers"] == [{"value": "s0", "rows": 48, "bytes": 48 * 600 * 4},
                                      {"value": "kt", "rows": 5, "bytes": 5 * 600 * 4}]
    planned = {t.name: t.size_bytes for t in emitted.plan.tensors}
    assert planned[RING_PREFIX + "s0"] == 48 * 600 * 4 and planned[RING_PREFIX + "kt"] == 5 * 600 * 4
    assert planned[RING_PREFIX + "s0"] + planned[RING_PREFIX + "kt"] <= emitted.arena_bytes
    assert "float bt[" not in (folder / "model.c").read_text()
    verify_allocation(emitted.plan)


@pytest.mark.skipif(any(shutil.which(t) is None for t in ("arm-none-eabi-gcc", "qemu-system-arm")),
                    reason="needs gcc-arm-none-eabi and qemu-system-arm")
def test_cortex_m7_build_matches(tmp_path: Path) -> None:
    """A board keeps blocks of 4 query rows (its 4 x 4 tile's MR): 3 blocks of 4 and one of 2
    over 14 queries, with a small arena."""
    from opfuse.measure.run.qemu import emulate_c

    result = compile_model(save(Spec(mask="input", s=14), tmp_path), "cortex-m7")
    (kernel,) = attention_kernels(result.partition)
    (ring,) = kernel.ring_buffers  # no packed head of Kt: the core copies 4 x D panels per block
    assert ring.rows == BLOCK_ROWS == 4
    emu = emulate_c(result, outdir=tmp_path / "c")
    assert emu.report.ok, emu.report
    assert emu.footprint.arena == emu.arena_bytes == analyze(result).after.plan.peak_bytes


NEAR_MISSES = {
    "scores_read": (Spec(extra="scores_read"), "x86-host", "multiple_consumers"),
    "probs_output": (Spec(extra="probs_output"), "x86-host", "graph_output"),
    "softmax_axis": (Spec(axis=2), "x86-host", "attention_softmax_axis"),
    "mask_grows_scores": (Spec(mask="input", mask_shape=(3, 1, 1, 8)), "x86-host",
                          "attention_mask"),
    "no_capability": (Spec(), "npu-generic", "not_supported_by_target"),
}


@pytest.mark.parametrize("name", list(NEAR_MISSES))
def test_near_miss_declines_with_its_reason(name: str, tmp_path: Path) -> None:
    spec, target, reason = NEAR_MISSES[name]
    result = compile_model(save(spec, tmp_path), target)
    assert not attention_kernels(result.partition)
    (decision,) = [d for d in result.partition.decisions
                   if (d.producer, d.consumer) == ("softmax", "context")]
    assert decision.reason == reason, decision
    assert "softmax" in decision.message


def test_backend_support_declines_where(tmp_path: Path) -> None:
    """A Where on the scores is the pattern, but the C kernel applies arithmetic only: the
    partitioner asks the C backend (support.py) and records its phrase."""
    model = build(Spec(scale=None))
    graph = model.graph
    cond = numpy_helper.from_array(np.tril(np.ones((8, 8), bool)), "cond")
    fill = numpy_helper.from_array(np.array(-1e4, np.float32), "fill")
    graph.initializer.extend([cond, fill])
    where = helper.make_node("Where", ["cond", "s0", "fill"], ["sw"], name="causal")
    graph.node.insert(2, where)
    graph.node[3].input[0] = "sw"  # the Softmax
    path = tmp_path / "where.onnx"
    onnx.save(model, path)
    result = compile_model(path, "x86-host")
    (decision,) = [d for d in result.partition.decisions if d.producer == "softmax"]
    assert decision.reason == "not_supported_by_target"
    assert "C backend" in decision.message and "Where" in decision.message


def test_arena_drops_by_the_score_matrix(tmp_path: Path) -> None:
    """On a graph whose peak is the scores, the fused core's plan is lower by at least the
    (B, H, S, S) scores' bytes, and its scratch rows are a planned arena tensor of a block of
    query rows of S floats each."""
    spec = Spec(batch=(1, 2), s=640, d=8, mask="input")
    path = save(spec, tmp_path)
    score_bytes = 1 * 2 * 640 * 640 * 4
    on, off = compile_model(path, "x86-host"), compile_model(path, without_attention("x86-host"))
    assert not attention_kernels(off.partition)
    plan_on = plan_memory(on.optimized, on.partition, "greedy")
    plan_off = plan_memory(off.optimized, off.partition, "greedy")
    assert plan_off.peak_bytes >= 2 * score_bytes  # scores and probabilities live together
    assert plan_off.peak_bytes - plan_on.peak_bytes >= score_bytes
    ring = next(t for t in plan_on.tensors if t.name == RING_PREFIX + "s0")
    assert ring.size_bytes == 48 * 640 * 4 and ring.first == ring.last  # 48 of a head's 640 rows
    assert not [t for t in plan_on.tensors if t.name in ("s0", "s1", "s2", "p")]
    verify_allocation(plan_on)


def test_cost_counts_qkv_and_output_only(tmp_path: Path) -> None:
    spec = Spec(batch=(1, 2), s=16, d=8, mask="input")
    result = compile_model(save(spec, tmp_path), "x86-host")
    report = analyze(result, activations_only=True)
    (cost,) = [k for k in report.after.cost.kernels if k.name.startswith("attention")]
    qkv = 3 * 2 * 16 * 8 * 4
    assert cost.activation_bytes_read == qkv + 16 * 4  # Q, K, V and the mask; no scores
    assert cost.bytes_written == 2 * 16 * 8 * 4
    assert cost.flops == sum(k.flops for k in report.before.cost.kernels)  # the same arithmetic
    macs = 2 * (2 * 16 * 16 * 8)  # Q Kt and P V
    assert cost.macs == macs


@needs_gcc
def test_analyze_and_emitted_c_agree(tmp_path: Path) -> None:
    result = compile_model(save(Spec(batch=(2, 2), s=24, d=8, mask="input"), tmp_path))
    emitted = emit_c(result, tmp_path / "c")
    header = (tmp_path / "c" / "model.h").read_text()
    after = analyze(result).after
    assert f"#define OPFUSE_ARENA_BYTES {after.plan.peak_bytes}" in header
    assert emitted.arena_bytes == after.plan.peak_bytes
    assert after.plan.offsets[RING_PREFIX + "s0"] >= 0


def test_scores_read_twice_by_one_op_decline(tmp_path: Path) -> None:
    model = build(Spec(scale=None))
    graph = model.graph
    graph.node.insert(2, helper.make_node("Mul", ["s0", "s0"], ["sq"], name="square"))
    graph.node[3].input[0] = "sq"  # the Softmax
    path = tmp_path / "square.onnx"
    onnx.save(model, path)
    result = compile_model(path, "x86-host")
    assert not attention_kernels(result.partition)
    (decision,) = [d for d in result.partition.decisions if d.producer == "softmax"]
    assert decision.reason == "attention_mask" and "more than once" in decision.message


@needs_gcc
def test_large_scores_softmax_subtracts_the_row_max(tmp_path: Path) -> None:
    """Scores in the thousands overflow expf unless the row's max is subtracted first."""
    spec = Spec(batch=(1, 2), s=16, d=8, scale="mul")
    rng = np.random.default_rng(5)
    feeds = {name: (rng.standard_normal((1, 2, 16, 8)) * 40).astype(np.float32) for name in "qkv"}
    report = validate_c(save(spec, tmp_path), "x86-host", inputs=feeds)
    assert report.ok, report
    for out in report.outputs:
        assert np.isfinite(out.max_abs_err) and out.max_abs_err <= 1e-5 * out.max_ref + 1e-6, out


def test_unknown_size_declines_as_dynamic_shape(tmp_path: Path) -> None:
    """K made by a custom op nothing describes: the scores' size is unknown, so no scratch row
    can be sized (the import refuses a dynamic graph input; this is the size nobody states)."""
    model = build(Spec())
    graph = model.graph
    graph.input[1].name = "k_in"
    graph.node.insert(0, helper.make_node("Foo", ["k_in"], ["k"], name="custom", domain="x.y"))
    model.opset_import.append(helper.make_opsetid("x.y", 1))
    del graph.value_info[:]
    path = tmp_path / "custom.onnx"
    onnx.save(model, path)
    result = compile_model(path, "x86-host")
    assert not attention_kernels(result.partition)
    (decision,) = [d for d in result.partition.decisions
                   if (d.producer, d.consumer) == ("softmax", "context")]
    assert decision.reason == "dynamic_shape", decision
