"""Corrupt .tflite flatbuffers (issue 18, item 4): the reader decodes every table at read time and
checks indices, scales and step options, so each corruption is one line naming the tensor or
operator, exit 2, nothing written: never a struct.error, ZeroDivisionError or OverflowError later
in the importers or the C backend (docs/architecture.md, "Import: what is checked")."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from benchmarks.fuzz_flatbuffers import find_sites
from tests.helpers import tflite_builder as tb
from tests.helpers.cli import assert_clean_error, compile_refused


def _conv_model(stride: int = 1, scale: float = 0.1, bias_len: int = 4) -> bytes:
    rng = np.random.default_rng(0)
    b = tb.TfliteBuilder()
    x = b.input("x", (1, 8, 8, 3), np.int8, scale=0.05, zero_point=-3)
    w = b.const("w", rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8),
                scale=np.full(4, 0.01), zero_point=0, axis=0)
    bias = b.const("b", np.zeros(bias_len, np.int32), scale=np.full(bias_len, 5e-4), axis=0)
    y = b.tensor("y", (1, 8, 8, 4), np.int8, scale=scale, zero_point=5)
    b.op("CONV_2D", [x, w, bias], [y], "Conv2DOptions", Padding=tb.SAME, StrideH=stride,
         StrideW=1, DilationHFactor=1, DilationWFactor=1)
    b.output(y)
    return b.build()


def _refused(run_cli, tmp_path: Path, data: bytes, *needles: str) -> None:
    model = tmp_path / "m.tflite"
    model.write_bytes(data)
    code, err = compile_refused(run_cli, model, tmp_path)
    assert_clean_error(code, err, str(model), *needles)
    code, _, err = run_cli("compile", str(model), "--emit", "c", "-o", str(tmp_path / "c"))
    assert_clean_error(code, err, *needles)
    assert not (tmp_path / "c").exists()


def test_the_model_itself_compiles(run_cli, tmp_path: Path) -> None:
    """The corruptions below are what makes each variant fail."""
    model = tmp_path / "m.tflite"
    model.write_bytes(_conv_model())
    code, _, err = run_cli("compile", str(model), "--emit", "c", "-o", str(tmp_path / "c"))
    assert code == 0, err


def test_zero_stride_is_refused_at_read(run_cli, tmp_path: Path) -> None:
    _refused(run_cli, tmp_path, _conv_model(stride=0), "operator 0 (CONV_2D)", "StrideH is 0")


@pytest.mark.parametrize("scale", [float("inf"), float("nan"), 0.0, -1.0])
def test_a_scale_that_is_not_finite_and_positive_is_refused(run_cli, tmp_path: Path,
                                                            scale: float) -> None:
    _refused(run_cli, tmp_path, _conv_model(scale=scale), "tensor 3 'y'", "quantization scale")


def test_a_bias_of_the_wrong_length_is_refused(run_cli, tmp_path: Path) -> None:
    _refused(run_cli, tmp_path, _conv_model(bias_len=3), "operator 0 (CONV_2D)",
             "3 values for 4 output channels")


def _patched(data: bytes, pos: int, value: int) -> bytes:
    buf = bytearray(data)
    struct.pack_into("<i", buf, pos, value)
    return bytes(buf)


def test_an_operator_input_out_of_range_is_refused(run_cli, tmp_path: Path) -> None:
    data = _conv_model()
    sites = find_sites(data)
    # the operator's input vector: the tensor indices 0, 1, 2 in a row
    first = next(p for p in sites.indices if struct.unpack_from("<3i", data, p) == (0, 1, 2))
    _refused(run_cli, tmp_path, _patched(data, first + 4, 99), "operator 0 (CONV_2D)",
             "input tensor 99 does not exist")


def test_an_option_table_whose_vtable_is_itself_is_refused(run_cli, tmp_path: Path) -> None:
    """The options table's vtable offset 0 makes the table read itself as its vtable: the eager
    decode fails, or the decoded fields are refused; either way one line names the operator."""
    data = _conv_model()
    options_table = find_sites(data).tables[-1]  # the last table the walk found: the options
    _refused(run_cli, tmp_path, _patched(data, options_table, 0), "operator 0")


def test_a_huge_vector_length_is_refused(run_cli, tmp_path: Path) -> None:
    data = _conv_model()
    sites = find_sites(data)
    _refused(run_cli, tmp_path, _patched(data, sites.vectors[-1], 2**31 - 1), "m.tflite")


def test_what_tflite_micro_refuses_is_one_line(tmp_path: Path) -> None:
    """A bias scale TFLite Micro's FULLY_CONNECTED refuses in Prepare: it printed its reasons on
    the process's stdout before opfuse's line; now only the line is left (a subprocess, since
    TFLite Micro writes to the file descriptor, past pytest's capture)."""
    import subprocess
    import sys

    rng = np.random.default_rng(0)
    b = tb.TfliteBuilder()
    x = b.input("x", (1, 16), np.int8, scale=0.05, zero_point=-3)
    w = b.const("w", rng.integers(-127, 128, (5, 16)).astype(np.int8), scale=0.01, zero_point=0)
    bias = b.const("b", np.zeros(5, np.int32), scale=1.0)  # TFLite wants 0.05 * 0.01
    y = b.tensor("y", (1, 5), np.int8, scale=0.1, zero_point=5)
    b.op("FULLY_CONNECTED", [x, w, bias], [y], "FullyConnectedOptions")
    b.output(y)
    model = tmp_path / "fc.tflite"
    model.write_bytes(b.build())
    proc = subprocess.run([sys.executable, "-m", "opfuse", "validate", str(model), "--backend",
                           "c"], capture_output=True, text=True, cwd=tmp_path)
    assert_clean_error(proc.returncode, proc.stderr, "TFLite Micro cannot run it")
    assert proc.stdout == ""
