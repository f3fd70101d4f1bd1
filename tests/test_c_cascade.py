"""Cascaded kernels in the C backend: rows streamed through ring buffers in the arena match
onnxruntime, run clean under AddressSanitizer/UndefinedBehaviorSanitizer, and the arena is
analyze's peak with cascades (below the layer-by-layer one)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import onnx
import pytest

from opfuse.analysis import analyze
from opfuse.backends.c import emit_c
from opfuse.pipeline import compile_model
from tests.helpers.c_cascade import arena_of, check_against_onnxruntime, host
from tests.helpers.cascade import NUMERIC_CHAINS, conv_chain
from tests.helpers.sanitize import sanitized_run_matches

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

STREAMED = ["inverted_residual", "stride_2_and_odd_size", "dilated_5x5"]


def chain_file(name: str, folder: Path) -> Path:
    layers, residual, size = NUMERIC_CHAINS[name]
    path = folder / f"{name}.onnx"
    onnx.save(conv_chain(layers, size=size, residual=residual), path)
    return path


@pytest.mark.parametrize("name", [*STREAMED, "mobilenet_v2"])
def test_cascades_stream_in_c_and_match_onnxruntime(name: str, tmp_path: Path) -> None:
    source = name if name == "mobilenet_v2" else chain_file(name, tmp_path)
    result = compile_model(source, host(name))
    assert result.partition.cascades
    emitted = emit_c(result, tmp_path / "c", cascades=True)
    check_against_onnxruntime(source, tmp_path / "c")
    text = (tmp_path / "c" / "model.c").read_text()
    found = re.findall(r"^static void k\d+_cascade", text, re.M)
    assert (
        len(found)
        == len(result.partition.cascades)
        == emitted.kernels - (len(result.partition.kernels) - len(result.partition.cascades))
    )
    after = analyze(result, precision="fp32").after
    assert arena_of(tmp_path / "c") == after.plan.peak_bytes <= after.layer_lower_bound
    if name == "mobilenet_v2":
        assert after.plan.peak_bytes < after.layer_lower_bound
    # with --no-cascades the C backend runs the same kernels layer by layer
    plain = emit_c(result, tmp_path / "plain", cascades=False)
    assert "_cascade(" not in (tmp_path / "plain" / "model.c").read_text()
    assert (
        plain.arena_bytes == analyze(result, precision="fp32", cascades=False).after.plan.peak_bytes
    )


@pytest.mark.parametrize("name", [*STREAMED, "mobilenet_v2"])
def test_cascades_are_sanitizer_clean(name: str, tmp_path: Path) -> None:
    source = name if name == "mobilenet_v2" else chain_file(name, tmp_path)
    folder = tmp_path / "c"
    emit_c(compile_model(source, host(name)), folder, cascades=True)
    assert "_cascade(" in (folder / "model.c").read_text()
    sanitized_run_matches(folder, source)


def test_a_cascade_the_c_backend_cannot_stream_is_refused_by_the_partitioner(tmp_path: Path) -> None:
    # conv -> maxpool (ceil_mode) -> conv: a pool with ceil_mode has no row-streaming C template
    source = chain_file("conv_then_pool", tmp_path)
    proto = onnx.load(source)
    for node in proto.graph.node:
        if node.op_type == "MaxPool":
            node.attribute.append(onnx.helper.make_attribute("ceil_mode", 1))
    onnx.save(proto, source)
    result = compile_model(source, host("conv_then_pool"))
    assert not any("MaxPool" in k.ops for k in result.partition.cascades)
    refused = [d.message for d in result.partition.cascade_decisions if "C backend" in d.message]
    assert any("ceil_mode" in why for why in refused), refused
    emitted = emit_c(result, tmp_path / "c")
    assert "_cascade(" not in (tmp_path / "c" / "model.c").read_text()
    layers = analyze(result, precision="fp32", cascades=False).after
    assert emitted.arena_bytes == layers.plan.peak_bytes
    check_against_onnxruntime(source, tmp_path / "c")
