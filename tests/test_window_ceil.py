"""A pool with ceil_mode may have one window overhanging its input (opfuse/frontends/window_check.py).

``transformers``' EfficientNet pools with ``AvgPool2d(hidden_dim, ceil_mode=True)``: a 1280-wide
window on a 7x7 map, one output element (ONNX's ``ceil((n + pads - extent) / stride) + 1``). Before
the import knew the map's size (the exporter's computed Pads hid it) nothing checked it; once known
the window check refused it although onnxruntime runs it.
"""

from __future__ import annotations

import onnx
import onnx.parser
import pytest

from tests.helpers.cli import assert_clean_error

POOL = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,3,2,2] x) => (float[1,3,1,1] y) {{
  y = AveragePool<kernel_shape = [9, 9], strides = [{stride}, {stride}], ceil_mode = {ceil},
                  count_include_pad = 1>(x)
}}
"""


@pytest.mark.parametrize("emit", ["onnx", "c"])
def test_an_overhanging_ceil_mode_window_compiles_and_matches(run_cli, tmp_path, emit: str) -> None:
    path = tmp_path / "pool.onnx"
    onnx.save(onnx.parser.parse_model(POOL.format(stride=9, ceil=1)), path)
    out = tmp_path / ("c" if emit == "c" else "out.onnx")
    code, stdout, err = run_cli("compile", str(path), "--emit", emit, "-o", str(out), "--check")
    assert code == 0, err
    assert "result: match" in stdout


@pytest.mark.parametrize(("stride", "ceil"), [(9, 0), (1, 1)])
def test_a_window_that_cannot_fit_is_still_refused(run_cli, tmp_path, stride: int,
                                                   ceil: int) -> None:
    """Floor mode gives no output; with stride 1 even ceil mode's one window starts past the end
    (9 > 2 + 1 - 1)."""
    text = POOL.format(stride=stride, ceil=ceil).replace("float[1,3,1,1] y", "float[1,3,?,?] y")
    path = tmp_path / "pool.onnx"
    onnx.save(onnx.parser.parse_model(text), path)
    code, _, err = run_cli("fusion", str(path))
    assert_clean_error(code, err, "pool.onnx", "kernel extent 9")
