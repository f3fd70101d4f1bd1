"""validate --backend c --per-kernel: every kernel's output against onnxruntime, and the first
divergent kernel named exactly when one generated kernel is broken by hand."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from opfuse.cli import cli
from opfuse.errors import OpfuseError
from opfuse.measure.validate.c_float import reference
from opfuse.measure.validate.per_kernel import format_per_kernel, per_kernel
from opfuse.pipeline import compile_model

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def _break_kernel(model_c: Path, index: int) -> str:
    """Negate the first element of kernel ``index``'s output at the end of its function (which
    kernels of the same code share, backends/c/kernel_functions.py): the fault a sign error in
    one template would make. Returns the function's name."""
    import json

    entries = json.loads((model_c.parent / "model.json").read_text())["kernel_outputs"]
    fname = next(e["function"] for e in entries if e["index"] == index)
    text = model_c.read_text()
    match = re.search(rf"^static void ({fname})\((.*)\) \{{$", text, re.M)
    assert match, f"kernel {index} not found"
    out = re.search(r"(?<!const )float \*(?: restrict)? (arg\d+)", match.group(2))
    assert out, match.group(0)
    end = text.index("\n}\n", match.end())
    fault = f"\n    {out.group(1)}[0] = -{out.group(1)}[0] - 1.0f;"
    model_c.write_text(text[:end] + fault + text[end:])
    return match.group(1)


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_injected_fault_is_the_first_divergence(fuse: bool, tmp_path: Path) -> None:
    result = compile_model("ds_cnn")
    feeds, _, _ = reference(result.source, None, 0, result.input_shapes)
    folder = tmp_path / "c"
    clean = per_kernel(result, folder, feeds, fuse=fuse)
    assert clean.ok, format_per_kernel(clean)
    name = _break_kernel(folder / "model.c", 4)
    # the first kernel that runs the broken function (kernel 4 or an earlier one of its code)
    target = next(k.index for k in clean.kernels if k.function == name)
    report = per_kernel(result, folder, feeds, fuse=fuse, emit=False)
    first = report.first_divergent
    assert first is not None and first.index == target and first.function == name
    assert all(k.ok for k in report.kernels[:target])
    # each kernel is fed the reference's inputs: the fault stays in the broken function's kernels
    assert report.isolated
    assert all(k.ok for k in report.kernels if k.function != name)
    text = format_per_kernel(report)
    assert f"first divergence: kernel {target} {name}" in text


def test_table_on_mobilenet_v2(tmp_path: Path) -> None:
    result = compile_model("mobilenet_v2")
    report = per_kernel(result, tmp_path / "c")
    assert len(report.kernels) == len(result.partition.without_cascades().kernels)  # the C runs layer by layer
    assert all(k.outputs for k in report.kernels)
    assert report.ok, format_per_kernel(report)


def test_cli_per_kernel(tmp_path: Path) -> None:
    np.savez(tmp_path / "x.npz", input=np.random.default_rng(1).standard_normal(
        [1, 1, 49, 10]).astype(np.float32))
    res = CliRunner().invoke(cli, ["validate", "ds_cnn", "--backend", "c", "--per-kernel",
                                   "--inputs", str(tmp_path / "x.npz")])
    assert res.exit_code == 0, res.output
    assert "per-kernel: all 12 kernels match" in res.output
    res = CliRunner().invoke(cli, ["validate", "ds_cnn", "ds_cnn", "--per-kernel"])
    assert isinstance(res.exception, OpfuseError) and "--per-kernel" in str(res.exception)


def test_int8_fused_against_unfused(tmp_path: Path) -> None:
    from opfuse import api
    from tests.helpers.shared import shared_model

    result = api.compile(str(shared_model("tflite", "kws_ref_model.tflite")), api.DEFAULT_TARGET,
                         None)
    folder = tmp_path / "c"
    assert per_kernel(result, folder).ok
    kernel3 = re.compile(r"^static void (k3_\w+)\((.*)\) \{$", re.M)
    text = (folder / "model.c").read_text()
    match = kernel3.search(text)
    out = re.search(r"(?<!const )int8_t \*(?: restrict)? (arg\d+)", match.group(2))
    end = text.index("\n}\n", match.end())
    arg = out.group(1)
    (folder / "model.c").write_text(
        text[:end] + f"\n    {arg}[0] = (int8_t)({arg}[0] ^ 0x55);" + text[end:])
    report = per_kernel(result, folder, emit=False)
    assert report.first_divergent is not None and report.first_divergent.index == 3


def test_saturating_head_hides_a_fault_that_per_kernel_names(tmp_path: Path) -> None:
    """light_squeezenet ends in a near-uniform softmax: with kernel 3 broken its final output
    still matches onnxruntime, and only the per-kernel comparison finds the fault."""
    from opfuse.measure.run.host import CModel
    from opfuse.measure.validate.ort import compare
    from tests.helpers.shared import shared_onnx

    result = compile_model(shared_onnx("light_squeezenet.onnx"))
    feeds, ref, _ = reference(result.source, None, 0, result.input_shapes)
    folder = tmp_path / "c"
    assert per_kernel(result, folder, feeds).ok
    _break_kernel(folder / "model.c", 3)
    report = per_kernel(result, folder, feeds, emit=False)
    assert report.first_divergent is not None and report.first_divergent.index == 3
    got = CModel(folder).run(feeds)  # the release build of the same broken model.c
    finals = [compare(k, v, got[k].reshape(v.shape), 1e-4, 1e-4) for k, v in ref.items()]
    assert all(c.ok for c in finals)  # what validate alone would have reported
