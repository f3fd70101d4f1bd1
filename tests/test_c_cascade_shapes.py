"""Cascaded C on the window shapes the shared chains of tests/test_cascade.py do not reach, each
streamed (asserted) and compared with onnxruntime on the model as written: asymmetric and zero
padding, rectangular inputs and 1x7 / 7x1 kernels, a strided 1x1 conv, bands of several rows, a
residual join written as ``Sum``, a 1 x C x 1 x 1 scale broadcast per channel, one-input
activations (HardSwish, LeakyRelu, Sigmoid, Tanh), SiLU (one Swish) and x * tanh(x); the cascades the emitter declines, each
with its reason, run layer by layer and still match; and the partitioner refusing a member that
broadcasts the value it streams (squeeze-excite).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from opfuse.analysis import analyze
from opfuse.backends.c import emit_c
from opfuse.frontends import import_proto
from opfuse.fusion import partition
from opfuse.measure.run.host import CModel
from opfuse.measure.validate.c_float import reference
from opfuse.measure.validate.ort import compare
from opfuse.pipeline import compile_model
from tests.helpers.cascade import streaming
from tests.helpers.chain_graph import ChainGraph
from tests.helpers.sanitize import sanitized_run_matches

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def asymmetric_pads_stride_2() -> ChainGraph:  # TF "SAME" on an even size: the extra row at the bottom
    g = ChainGraph(8, 20, 20)
    g.conv(16, (3, 3), pads=(0, 0, 1, 1), s=2)
    g.op("Relu")
    g.conv(16, (3, 3), pads=(1, 1, 1, 1), group=16)
    g.op("Relu")
    g.conv(8, (1, 1))
    return g


def zero_pads_odd() -> ChainGraph:
    g = ChainGraph(6, 15, 15)
    g.conv(12, (3, 3))
    g.op("Relu")
    g.conv(12, (3, 3), group=12)
    g.op("Relu")
    g.conv(6, (3, 3), pads=(0, 1, 0, 1))
    return g


def rectangular_1x7_7x1() -> ChainGraph:  # inception's factorized 7x7 on a 13 x 21 map
    g = ChainGraph(8, 13, 21)
    g.conv(12, (1, 7), pads=(0, 3, 0, 3))
    g.op("Relu")
    g.conv(12, (7, 1), pads=(3, 0, 3, 0))
    g.op("Relu")
    g.conv(8, (1, 1))
    return g


def strided_1x1() -> ChainGraph:  # ResNet's downsampling 1x1 inside a chain
    g = ChainGraph(8, 17, 18)
    g.conv(8, (3, 3), pads=(1, 1, 1, 1))
    g.op("Relu")
    g.conv(16, (1, 1), s=2)
    g.op("Relu")
    g.conv(16, (3, 3), pads=(1, 1, 1, 1), group=16, d=2)
    return g


def sum_residual() -> ChainGraph:  # old-opset ResNets write the residual join as Sum
    g = ChainGraph(8, 19, 19, opset=13)
    g.conv(32, (1, 1))
    g.op("Relu")
    g.conv(32, (3, 3), pads=(1, 1, 1, 1), group=32)
    g.op("Relu")
    g.conv(8, (1, 1))
    g.op("Sum", "x")
    g.op("Relu")
    return g


def channel_scale() -> ChainGraph:  # a 1 x C x 1 x 1 activation (a second input) scales a member
    g = ChainGraph(8, 16, 16)
    g.inputs.append(helper.make_tensor_value_info("scale", TensorProto.FLOAT, [1, 32, 1, 1]))
    g.conv(32, (1, 1))
    g.op("Mul", "scale")
    g.op("Relu")
    g.conv(32, (3, 3), pads=(1, 1, 1, 1), group=32)
    g.op("Relu")
    g.conv(8, (1, 1))
    return g


def activations() -> ChainGraph:  # MobileNetV3's HardSwish, YOLO's LeakyRelu, Sigmoid and Tanh
    g = ChainGraph(8, 18, 18)
    g.conv(32, (1, 1))
    g.op("HardSwish")
    g.conv(32, (3, 3), pads=(1, 1, 1, 1), group=32)
    g.op("LeakyRelu", alpha=0.1)
    g.conv(8, (1, 1))
    g.op("Sigmoid")
    g.op("Tanh")
    return g


def silu(gate: str = "Sigmoid") -> ChainGraph:  # x * gate(x), one Swish once canonicalized
    g = ChainGraph(8, 18, 18)
    for out, k, group in ((32, 1, 1), (32, 3, 32)):
        c = g.conv(out, (k, k), pads=(k // 2,) * 4, group=group)
        s = g.op(gate)
        g.cur = c
        g.op("Mul", s)
    g.conv(8, (1, 1))
    return g


def tanh_gate() -> ChainGraph:  # x * tanh(x): a member that starts with an activation, x read whole
    return silu("Tanh")


def squeeze_excite() -> ChainGraph:  # the scale computed from the map itself, applied to a conv
    g = ChainGraph(8, 24, 24)
    g.op("GlobalAveragePool")
    g.conv(48, (1, 1))
    s = g.op("Clip", g.const("lo", np.array(0.0)), g.const("hi", np.array(1.0)))
    g.cur, g.c = "x", 8
    g.conv(48, (1, 1))
    g.op("Mul", s)
    g.op("Relu")
    g.conv(48, (3, 3), pads=(1, 1, 1, 1), group=48)
    g.op("Relu")
    g.conv(8, (1, 1))
    return g


STREAMED = {f.__name__: f for f in (asymmetric_pads_stride_2, zero_pads_odd, rectangular_1x7_7x1,
                                    strided_1x1, sum_residual, channel_scale, activations,
                                    silu, tanh_gate)}  # fmt: skip


def run_cascaded(source: Path, target, folder: Path):  # noqa: ANN001
    """Compile for ``target``, emit cascaded C, run it: (result, emitted, outputs checked)."""
    result = compile_model(str(source), target)
    emitted = emit_c(result, folder, cascades=True)
    feeds, ref, _ = reference(source)
    got = CModel(folder).run(feeds)
    for key, value in ref.items():
        check = compare(key, value, np.asarray(got[key]).reshape(value.shape), 1e-4, 1e-4)
        assert check.ok, check
    return result, emitted


@pytest.mark.parametrize("band", [1, 3])
@pytest.mark.parametrize("name", list(STREAMED))
def test_cascade_streams_and_matches_onnxruntime(name: str, band: int, tmp_path: Path) -> None:
    source = STREAMED[name]().save(tmp_path / f"{name}.onnx")
    target = streaming(cascade_band_rows=band)
    result, emitted = run_cascaded(source, target, tmp_path / "c")
    cascades = result.partition.cascades
    assert cascades and emitted.cascades == tuple(k.name for k in cascades)
    assert all(k.band_rows == band for k in cascades)
    assert emitted.arena_bytes == analyze(result, precision="fp32").after.plan.peak_bytes
    if name == "sum_residual":
        assert any("Sum" in k.ops for k in cascades)
    if name == "silu":  # the Swish an epilogue of each conv: opfuse/passes/swish.py
        assert any(k.ops[:4] == ("Conv", "Swish", "Conv", "Swish") for k in cascades)
    if name == "tanh_gate":
        assert any(k.ops[:2] == ("Tanh", "Mul") for k in cascades)
    if name == "channel_scale":
        assert any("Mul" in k.ops for k in cascades)


def test_a_sum_of_three_runs_layer_by_layer_with_its_reason(tmp_path: Path) -> None:
    g = sum_residual()
    g.nodes[-2].input.append("x")  # Sum(project, x, x)
    source = g.save(tmp_path / "sum3.onnx")
    result, emitted = run_cascaded(source, streaming(), tmp_path / "c")
    # the C cannot stream the Sum: the partitioner says why, and streams only what comes before
    assert not any("Sum" in k.ops for k in result.partition.cascades)
    (why,) = [d.message for d in result.partition.cascade_decisions if "C backend" in d.message]
    assert "(Sum): a Sum of 3 operands" in why
    assert emitted.arena_bytes == analyze(result, precision="fp32").after.plan.peak_bytes


def test_a_constant_that_varies_along_rows_runs_layer_by_layer(tmp_path: Path) -> None:
    g = ChainGraph(8, 16, 16)
    g.conv(32, (1, 1))
    g.op("Add", g.const("bias_map", np.random.default_rng(5).standard_normal((1, 32, 16, 16))))
    g.op("Relu")
    g.conv(32, (3, 3), pads=(1, 1, 1, 1), group=32)
    g.op("Relu")
    g.conv(8, (1, 1))
    source = g.save(tmp_path / "bias_map.onnx")
    result, emitted = run_cascaded(source, streaming(), tmp_path / "c")
    refused = [d.message for d in result.partition.cascade_decisions if "C backend" in d.message]
    assert refused and not any("Add" in k.ops for k in result.partition.cascades)
    why = refused[0]
    assert re.search(r"\(Add\): constant '.*' varies across rows or columns", why), why


def test_a_member_that_broadcasts_what_it_streams_is_no_stage() -> None:
    # squeeze-excite: the 1x1 conv of the pooled 1 x 48 x 1 x 1 vector, clipped, scales the
    # 48 x 24 x 24 map; fused with that Mul, the kernel's streamed value (one row) is smaller than
    # its output (24 rows): no row schedule fits, so it cannot be a cascade's member.
    proto = onnx.shape_inference.infer_shapes(squeeze_excite().model())
    part = partition(import_proto(proto, "se"), streaming())
    assert part.cascades  # the depthwise and project convs still stream
    assert all("Mul" not in k.ops for k in part.cascades)
    why = [d.message for d in part.cascade_decisions if d.reason == "cascade_global_op"]
    assert any("broadcasts the value it streams" in m for m in why), why


@pytest.mark.parametrize("name", list(STREAMED))
def test_cascade_shapes_are_sanitizer_clean(name: str, tmp_path: Path) -> None:
    source = STREAMED[name]().save(tmp_path / f"{name}.onnx")
    folder = tmp_path / "c"
    emit_c(compile_model(str(source), streaming(cascade_band_rows=3)), folder,
           cascades=True)  # fmt: skip
    assert "_cascade(" in (folder / "model.c").read_text()
    sanitized_run_matches(folder, source, atol=1e-4)


def test_the_traffic_benchmark_block_is_one_cascade_moving_only_its_ends(tmp_path: Path) -> None:
    # benchmarks/traffic_measured.py compares this block's measured last-level traffic with the
    # cost model; its premise: one cascade on x86-host, and the prediction is the input, the
    # output and the weights (the expanded intermediates never leave the kernel)
    from benchmarks.traffic_measured import inverted_residual, predicted

    path = tmp_path / "block.onnx"
    onnx.save(inverted_residual(), path)
    result = compile_model(str(path), streaming())
    (kernel,) = result.partition.kernels
    assert kernel.is_cascade and kernel.ops.count("Conv") == 3 and "Add" in kernel.ops
    inits = result.optimized.graph.initializers.values()
    weights = sum(v.const_value.numpy().size * 4 for v in inits if v.const_value is not None)
    ends = 2 * 24 * 56 * 56 * 4
    assert predicted(result, True, True) == ends + weights
    assert predicted(result, True, False) > ends + weights + 2 * 144 * 56 * 56 * 4
