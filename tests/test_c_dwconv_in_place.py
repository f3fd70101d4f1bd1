"""The float depthwise conv read in place (opfuse/backends/c/dwconv.py on the row nest of
dwrow.py, an MCU board's depthwise convs) against the band core it replaces there, bit for bit:

- the two kernels, fed the same ring step by step as a cascade feeds it, built by gcc for the
  host and run (x86-64's baseline flags: no FMA, so every product and sum is rounded and only the
  order of the terms decides; with -march=native gcc fuses a vector loop's multiply-adds and not
  all of a scalar column's, so there the band disagrees with itself), and both against numpy;
  geometries: padding on every side or none, asymmetric, a dilated 5x5, 1x7 and 7x1, steps of
  one and of three rows, stride 2;
- whole models on QEMU's cortex-m7 (its FPv5 fuses every multiply-add alike), cascaded and layer
  by layer (``emit_depthwise`` reads rows in place on a scalar FPU too, its chain applied to each
  value as it is summed): the in-place build against the band build of the same model, its
  outputs' bytes, and both against onnxruntime.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from opfuse.backends.c import dwconv
from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.dwconv import emit_depthwise_rows, in_place
from opfuse.backends.c.emit import generate
from opfuse.backends.c.flags import BASE, WARN
from opfuse.backends.c.rowsource import RowSink, RowSource
from opfuse.kernelplan.conv8 import ConvGeom
from opfuse.measure.run import qemu
from opfuse.measure.validate.c_float import reference
from opfuse.pipeline import compile_model
from opfuse.targets import load_target
from tests.helpers.cascade import streaming
from tests.helpers.chain_graph import ChainGraph

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
needs_board_tools = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("arm-none-eabi-gcc", "qemu-system-arm")),
    reason="needs gcc-arm-none-eabi, libnewlib-arm-none-eabi and qemu-system-arm",
)

C, IH, IW = 3, 9, 11
RELU6 = ("v = v < 0.0f ? 0.0f : v;", "v = v > 6.0f ? 6.0f : v;")
# (kernel, dilation, pads top, left, bottom, right, stride)
GEOMETRIES = {
    "3x3_same": ((3, 3), 1, (1, 1, 1, 1), 1),
    "3x3_valid": ((3, 3), 1, (0, 0, 0, 0), 1),
    "5x5_dilated": ((5, 5), 2, (4, 4, 4, 4), 1),
    "1x7_asymmetric": ((1, 7), 1, (0, 3, 0, 2), 1),
    "7x1_asymmetric": ((7, 1), 1, (3, 0, 2, 0), 1),
    "3x3_wide_pads": ((3, 3), 1, (2, 2, 2, 2), 1),
    "3x3_stride2": ((3, 3), 1, (1, 1, 1, 1), 2),  # MobileNet's downsampling depthwise conv
    "3x3_stride2_end_pad": ((3, 3), 1, (0, 0, 1, 1), 2),  # TFLite's SAME on an even map
    "5x5_stride2_dilated": ((5, 5), 2, (3, 2, 4, 4), 2),
}


def _geom(kernel: tuple[int, int], d: int, pads: tuple[int, int, int, int],
          s: int) -> ConvGeom:
    oh = (IH + pads[0] + pads[2] - (kernel[0] - 1) * d - 1) // s + 1
    ow = (IW + pads[1] + pads[3] - (kernel[1] - 1) * d - 1) // s + 1
    return ConvGeom(1, C, IH, IW, C, oh, ow, C, kernel, (s, s), (d, d), (pads[0], pads[1]))


def _kernel(name: str, g: ConvGeom, ring_rows: int, step: int, zero: str | None) -> str:
    w = CWriter(1)
    src = RowSource.of("ring", C, IH, IW, ring_rows)
    sink = RowSink(RowSource.of("out", C, g.oh, g.ow), RELU6)
    emit_depthwise_rows(w, g, src, "wt", "bias", sink, step, zero)
    return (f"static void {name}(const float *restrict ring, const float *restrict wt, "
            f"const float *restrict bias, const float *restrict zero, float *restrict out, "
            f"int a, int b) {{\n    (void)zero;\n{w.text()}}}\n")


def _ring_rows(g: ConvGeom, step: int) -> int:
    """The rows a step of ``step`` output rows reads (at most the input's)."""
    return min(IH, (g.k[0] - 1) * g.d[0] + (step - 1) * g.s[0] + 1)


def _harness(g: ConvGeom, step: int) -> str:
    """Both kernels over the output in steps of ``step`` rows, the ring (the rows one step reads)
    refilled from x before each, as a cascade's producer would."""
    reach = (g.k[0] - 1) * g.d[0] + 1
    ring = _ring_rows(g, step)
    return f"""#include <string.h>
#define OPFUSE_ALIGNED __attribute__((aligned(64)))
{_kernel("band", g, ring, step, None)}
{_kernel("in_place", g, ring, step, "zero")}
void run(const float *x, const float *wt, const float *bias, const float *zero, float *ring,
         float *y_band, float *y_place);
void run(const float *x, const float *wt, const float *bias, const float *zero, float *ring,
         float *y_band, float *y_place) {{
    for (int a = 0; a < {g.oh}; a += {step}) {{
        const int b = a + {step - 1} < {g.oh - 1} ? a + {step - 1} : {g.oh - 1};
        for (int ih = a*{g.s[0]} - {g.p[0]}; ih < b*{g.s[0]} - {g.p[0]} + {reach}; ++ih) {{
            if (ih < 0 || ih >= {IH}) continue;
            for (int c = 0; c < {C}; ++c)
                memcpy(ring + (c*{ring} + ih % {ring})*{IW}, x + (c*{IH} + ih)*{IW}, {IW * 4});
        }}
        band(ring, wt, bias, zero, y_band, a, b);
        in_place(ring, wt, bias, zero, y_place, a, b);
    }}
}}
"""


def _reference(x: np.ndarray, wt: np.ndarray, bias: np.ndarray, g: ConvGeom,
               pads: tuple[int, int, int, int]) -> np.ndarray:
    xp = np.pad(x.astype(np.float64), ((0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    y = np.zeros((C, g.oh, g.ow)) + bias[:, None, None]
    s = g.s[0]
    for kh in range(g.k[0]):
        for kw in range(g.k[1]):
            y += wt[:, kh, kw, None, None] * xp[:, kh * g.d[0]:kh * g.d[0] + (g.oh - 1) * s + 1:s,
                                                kw * g.d[1]:kw * g.d[1] + (g.ow - 1) * s + 1:s]
    return np.clip(y, 0.0, 6.0)


@pytest.mark.parametrize("step", [1, 3])
@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_in_place_member_stores_the_bands_bits(name: str, step: int, tmp_path: Path) -> None:
    kernel, d, pads, s = GEOMETRIES[name]
    g = _geom(kernel, d, pads, s)
    assert in_place(g, load_target("cortex-m7").isa)  # x86's choice: test_c_dwconv_narrow.py
    (tmp_path / "dw.c").write_text(_harness(g, step))
    subprocess.run(["gcc", *BASE, *WARN, "-shared", "-fPIC", "dw.c", "-o", "dw.so"],
                   cwd=tmp_path, check=True)
    lib = ctypes.CDLL(str(tmp_path / "dw.so"))
    rng = np.random.default_rng(7)
    x = rng.standard_normal((C, IH, IW)).astype(np.float32)
    wt = rng.standard_normal((C, *kernel)).astype(np.float32)
    bias = rng.standard_normal(C).astype(np.float32)
    zero = np.zeros(IW, np.float32)
    ring = np.zeros(C * _ring_rows(g, step) * IW, np.float32)
    y_band, y_place = (np.full((C, g.oh, g.ow), np.nan, np.float32) for _ in range(2))
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    lib.run(ptr(x), ptr(wt), ptr(bias), ptr(zero), ptr(ring), ptr(y_band), ptr(y_place))
    np.testing.assert_allclose(y_band, _reference(x, wt, bias, g, pads), rtol=1e-5, atol=1e-5)
    assert y_place.tobytes() == y_band.tobytes()


def _chain() -> ChainGraph:
    """MobileNetV2's block with a dilated 5x5 and a residual: 1x1, Relu, dw 3x3, Clip, dw 5x5
    dilation 2, + x, 1x1, on a 17 x 23 map."""
    g = ChainGraph(8, 17, 23)
    g.conv(16, (1, 1))
    g.op("Relu")
    g.conv(16, (3, 3), pads=(1, 1, 1, 1), group=16)
    g.op("Clip", g.const("lo", np.array(0.0)), g.const("hi", np.array(6.0)))
    g.conv(16, (5, 5), pads=(4, 4, 4, 4), group=16, d=2)
    g.conv(8, (1, 1))
    g.op("Add", "x")
    return g


def _downsample() -> ChainGraph:
    """MobileNetV2's downsampling block: 1x1, Relu, dw 3x3 stride 2 (padded at the end, as
    TFLite's SAME on an even map), Clip, 1x1, on an 18 x 24 map."""
    g = ChainGraph(8, 18, 24)
    g.conv(16, (1, 1))
    g.op("Relu")
    g.conv(16, (3, 3), pads=(0, 0, 1, 1), s=2, group=16)
    g.op("Clip", g.const("lo", np.array(0.0)), g.const("hi", np.array(6.0)))
    g.conv(8, (1, 1))
    return g


def _residual() -> ChainGraph:
    """A depthwise conv whose chain reads an operand: dw 3x3, + x, Relu, on a 17 x 23 map."""
    g = ChainGraph(8, 17, 23)
    g.conv(8, (3, 3), pads=(1, 1, 1, 1), group=8)
    g.op("Add", "x")
    g.op("Relu")
    return g


def _run_on_board(result, folder: Path, cascades: bool) -> np.ndarray:  # noqa: ANN001
    board = qemu.require_board(result.target)
    files, info, _ = generate(result, True, cascades=cascades)
    assert bool(info.cascades) == cascades, "the chain does not stream"
    feeds, outputs, _ = reference(result.source)
    arrays = [np.asarray(feeds[x.name], np.float32) for x in info.inputs]
    files["inputs.c"] = qemu.board_files(board, info, arrays, "seed 0")["inputs.c"]
    qemu.write_tree(folder, files, manifest="model.json", rebuilt=qemu.rebuilt_by_make("opfuse"))
    text, _ = qemu.run_qemu(qemu.build_elf(folder, board, ()), board, 120)
    y = qemu.decode(info, qemu.parse_output(text)[0])["y"]
    np.testing.assert_allclose(y, outputs["y"], rtol=1e-4, atol=1e-4)  # onnxruntime's
    return y


# the in-place row's tap-row pointers (dwrow.row_pointers), which the band build has not
IN_PLACE_ROWS = re.compile(r"const float \*r0 = \(unsigned\)\(ih0 \+ 0\) < \d+u \? ")


@needs_board_tools
@pytest.mark.parametrize(("graph", "cascades", "band"), [
    ("chain", True, 1), ("chain", True, 3),  # cascade members, one and three rows a step
    ("downsample", True, 1),  # a stride-2 member
    ("chain", False, 1), ("residual", False, 1),  # layer by layer, a chain with an operand
    ("downsample", False, 1),
])
def test_board_in_place_is_the_band_build_bit_for_bit(graph: str, cascades: bool, band: int,
                                                      tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    graphs = {"chain": _chain, "residual": _residual, "downsample": _downsample}
    source = graphs[graph]().save(tmp_path / "chain.onnx")
    result = compile_model(str(source), streaming("cortex-m7", cascade_band_rows=band))
    placed = _run_on_board(result, tmp_path / "in_place", cascades)
    assert IN_PLACE_ROWS.search((tmp_path / "in_place" / "model.c").read_text())
    monkeypatch.setattr(dwconv, "in_place", lambda g, isa: False)
    banded = _run_on_board(result, tmp_path / "band", cascades)
    assert not IN_PLACE_ROWS.search((tmp_path / "band" / "model.c").read_text())
    assert placed.tobytes() == banded.tobytes()
