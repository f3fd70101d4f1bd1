"""The generated C's branch-free exp/erf/tanh/sigmoid (opfuse/backends/c/fastmath.py) against
float64 references over a dense sweep, built with the generated code's own flags (FMA contraction
on) and with -march=native; the bounds are the ones its docstring states."""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from opfuse.backends.c.fastmath import FUNCTIONS, used
from opfuse.backends.c.flags import BASE, WARN

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

_DRIVER = """
#include <math.h>
#include <string.h>
{defs}
void run_{name}(const float *x, float *y, int n) {{
    for (int i = 0; i < n; ++i) y[i] = {name}(x[i]);
}}
"""


def _build(tmp: Path, march: tuple[str, ...]) -> ctypes.CDLL:
    calls = " ".join(f"{name}(" for name in FUNCTIONS)
    src = "\n".join(_DRIVER.format(defs=used(calls) if i == 0 else "", name=name)
                    for i, name in enumerate(FUNCTIONS))
    (tmp / "fm.c").write_text(src)
    lib = tmp / f"fm{abs(hash(march))}.so"
    subprocess.run(["gcc", *BASE, *WARN, *march, "-shared", "-fPIC", "fm.c", "-o", lib.name,
                    "-lm"], cwd=tmp, check=True)
    return ctypes.CDLL(str(lib))


@pytest.fixture(scope="module", params=[(), ("-march=native",), ("-DOPFUSE_SCALAR_MATH=1",)],
                ids=["base", "native", "libm"])
def lib(request, tmp_path_factory):
    return _build(tmp_path_factory.mktemp("fastmath"), request.param)


def _run(lib: ctypes.CDLL, name: str, x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    y = np.empty_like(x)
    fn = getattr(lib, f"run_{name}")
    fn(x.ctypes.data_as(ctypes.c_void_p), y.ctypes.data_as(ctypes.c_void_p), ctypes.c_int(x.size))
    return y


def _ulps(got: np.ndarray, ref64: np.ndarray) -> np.ndarray:
    """|got - ref| in units of the float32 spacing at the reference."""
    ref32 = ref64.astype(np.float32)
    spacing = np.spacing(np.abs(ref32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - ref64) / spacing


def _sweep(lo: float, hi: float, n: int = 400_001) -> np.ndarray:
    return np.linspace(lo, hi, n, dtype=np.float32)


def test_exp_within_2_ulp(lib):
    x = _sweep(-87.3, 88.7)
    assert _ulps(_run(lib, "opfuse_expf", x), np.exp(x.astype(np.float64))).max() <= 2.0
    small = _sweep(-1e-3, 1e-3, 20_001)  # r near 0 and n = 0
    assert _ulps(_run(lib, "opfuse_expf", small), np.exp(small.astype(np.float64))).max() <= 2.0


def test_exp_edges(lib):
    x = np.array([np.nan, np.inf, -np.inf, 89.0, -88.0, -1e30, 1e30, 0.0, -0.0, 88.72],
                 dtype=np.float32)
    y = _run(lib, "opfuse_expf", x)
    assert np.isnan(y[0]) and y[1] == np.inf and y[2] == 0.0 and y[3] == np.inf
    assert 0.0 <= y[4] < 1.2e-38 and y[5] == 0.0  # 0 (fast) or subnormal (libm) and y[6] == np.inf and y[7] == 1.0 and y[8] == 1.0
    assert np.isfinite(y[9]) and abs(y[9] / math.exp(float(x[9])) - 1) < 3e-7  # n = 128


def test_erf_within_bound(lib):
    x = _sweep(-6.0, 6.0)
    ref = np.array([math.erf(v) for v in x.astype(np.float64)])
    got = _run(lib, "opfuse_erff", x)
    assert np.abs(got - ref).max() <= 2e-7
    assert _ulps(got, ref).max() <= 3.0  # relative accuracy near 0 too (x * P(x^2))
    edges = _run(lib, "opfuse_erff", np.array([np.nan, np.inf, -np.inf, -0.0], np.float32))
    assert np.isnan(edges[0]) and edges[1] == 1.0 and edges[2] == -1.0
    assert edges[3] == 0.0 and np.signbit(edges[3])


def test_tanh_within_3_ulp(lib):
    x = _sweep(-10.0, 10.0)
    assert _ulps(_run(lib, "opfuse_tanhf", x), np.tanh(x.astype(np.float64))).max() <= 3.0
    tiny = _sweep(-1e-4, 1e-4, 20_001)
    assert _ulps(_run(lib, "opfuse_tanhf", tiny), np.tanh(tiny.astype(np.float64))).max() <= 3.0
    edges = _run(lib, "opfuse_tanhf", np.array([np.nan, np.inf, -np.inf, 1e30], np.float32))
    assert np.isnan(edges[0]) and list(edges[1:]) == [1.0, -1.0, 1.0]


def test_sigmoid_within_3_ulp(lib):
    x = _sweep(-80.0, 80.0)
    ref = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    assert _ulps(_run(lib, "opfuse_sigmoidf", x), ref).max() <= 3.0
    edges = _run(lib, "opfuse_sigmoidf", np.array([np.inf, -np.inf, np.nan], np.float32))
    assert edges[0] == 1.0 and edges[1] == 0.0 and np.isnan(edges[2])


def test_only_called_functions_are_emitted():
    assert used("y = expf(x);") == ""
    text = used("v = opfuse_erff(v);")
    assert "opfuse_erff(float x)" in text and "opfuse_expf(float x)" in text
    assert "opfuse_tanhf" not in text and "opfuse_sigmoidf" not in text
    assert text.index("opfuse_expf(float x)") < text.index("opfuse_erff(float x)")


def _macro(cc: list[str], tmp: Path) -> str:
    (tmp / "pre.c").write_text("#include <math.h>\n#include <string.h>\n" + used("opfuse_expf("))
    out = subprocess.run([*cc, "-dM", "-E", "pre.c"], cwd=tmp, check=True, capture_output=True,
                         text=True).stdout
    return next(line for line in out.splitlines() if "define OPFUSE_SCALAR_MATH" in line)


@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None, reason="needs arm-none-eabi-gcc")
def test_cortex_m_builds_call_libm(tmp_path):
    """No vector unit on a Cortex-M4/M7: libm's branches cost fewer instructions there."""
    m7 = ["arm-none-eabi-gcc", "-mcpu=cortex-m7", "-mfpu=fpv5-sp-d16", "-mfloat-abi=hard"]
    assert _macro(m7, tmp_path).endswith(" 1")
    assert _macro(["gcc", "-march=native"], tmp_path).endswith(" 0")


@pytest.mark.parametrize("axis,rows", [(-1, 3), (0, 3), (-1, 700)])
def test_softmax_row_max_in_the_remainder(axis, rows, tmp_path):
    """Each row's largest score is its last element, past the 8-wide blocks of the running
    maxima (13 = 8 + 5; on the host, whose 32 lanes are wider than the row, the plain loops of
    a short row): left out of the max, exp(500 - max) overflows and the row is NaN. 700 rows of
    2 (Ultraface's scores): the short rows gcc vectorizes across."""
    import onnx
    from onnx import TensorProto, helper

    from opfuse.api import validate_c

    n = 2 if rows == 700 else 13
    shape = [rows, n] if axis == -1 else [n, rows]
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["y"], axis=axis)], "softmax_tail",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    path = tmp_path / "softmax.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    if axis == -1:
        x[:, -1] += 500.0
    else:
        x[-1, :] += 500.0
    report = validate_c(path, "x86-host", inputs={"x": x})
    assert report.ok, report
