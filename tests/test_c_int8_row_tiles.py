"""The portable int8 spatial conv as pointwise.py's column tiles over a line buffer
(opfuse/backends/c/int8/row_tiles.py), bit for bit with TFLite Micro: as an x86-host cascade
member reading its ring (spatial, strided and 1x1 members), and where the line buffer of a whole
row would exceed ``LINE_BYTES`` (a band of the row's columns at a time), layer by layer and
cascaded."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("tflite_micro")
pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

from opfuse.api import compile  # noqa: E402
from opfuse.backends.c import emit_c  # noqa: E402
from opfuse.backends.c.conv import conv_geom  # noqa: E402
from opfuse.backends.c.int8 import row_tiles  # noqa: E402
from tests.helpers.c_cascade import bit_exact, run_cascaded  # noqa: E402
from tests.helpers.int8_chain import Chain  # noqa: E402


def _chains() -> dict[str, Chain]:
    return {
        # 20 output channels (not a multiple of 16): conv_rows members, 3x3 stride 1 and 2,
        # dilated, and a 1x1 member reading its ring rows in place
        "members": Chain(26, 8, 11).conv(24, 1, act="relu").conv(20, 3, act="relu6")
        .conv(12, 3, 2).conv(12, 3, d=2, padding="VALID").conv(12, 1),
        # 96 x 7 x 50 bytes of line buffer: two bands of 22 columns (TFLite Micro's arena is
        # ten times the file, so the wide rows come from a large kernel, not many channels)
        "banded": Chain(44, 4, 12).conv(96, 1, act="relu").conv(8, 7),
        # stride 2: 64 x 7 x 2 x 37 bytes; bands of 17 columns
        "banded_s2": Chain(68, 4, 13).conv(64, 1, act="relu").conv(16, 7, 2),
    }


def _banded_convs(result) -> list[str]:  # noqa: ANN001
    return [n.name for n in result.optimized.graph
            if n.op_type == "Conv" and conv_geom(n).k != (1, 1)
            and row_tiles.band(conv_geom(n)) < conv_geom(n).ow]


@pytest.mark.parametrize("case", sorted(_chains()))
def test_int8_row_tiles_cascaded_match_tflite_micro(case: str, tmp_path: Path) -> None:
    path = tmp_path / f"{case}.tflite"
    path.write_bytes(_chains()[case].build())
    result, _ = run_cascaded(path, tmp_path / "c")
    code = (tmp_path / "c" / "model.c").read_text()
    members = [m for c in result.partition.cascades for m in c.ops]
    assert "Conv" in members
    assert re.search(r"int8_t line\[\d+\];", code)  # the members' line buffer
    assert ("b0 +=" in code) == case.startswith("banded")
    assert bool(_banded_convs(result)) == case.startswith("banded")
    bit_exact(path, tmp_path / "c")


@pytest.mark.parametrize("case", ["banded", "banded_s2"])
def test_int8_banded_row_tiles_layer_by_layer_match_tflite_micro(case: str,
                                                                 tmp_path: Path) -> None:
    path = tmp_path / f"{case}.tflite"
    path.write_bytes(_chains()[case].build())
    emit_c(compile(path, "x86-host"), tmp_path / "c", cascades=False)
    assert "b0 +=" in (tmp_path / "c" / "model.c").read_text()
    bit_exact(path, tmp_path / "c")


# (H, W, C, OC, K, stride, padding, dilation, act, None, seed): tests.helpers.c_int8.conv_pair's
STEMS = {
    "stem_c3_same": (13, 21, 3, 10, 3, 1, "SAME", 1, "relu", None, 31),
    "stem_c3_s2": (15, 20, 3, 8, 3, 2, "SAME", 1, None, None, 32),
    "stem_c2_dilated": (12, 17, 2, 6, 3, 1, "SAME", 2, None, None, 33),
    "stem_c4_5x5_valid": (11, 16, 4, 9, 5, 1, "VALID", 1, "relu", None, 35),
    "stem_c4_5x5_s2": (16, 19, 4, 12, 5, 2, "VALID", 1, "relu6", None, 34),
    "stem_c6_s2": (14, 17, 6, 8, 3, 2, "SAME", 1, "relu", None, 36),  # channel by channel
    "stem_c8_same": (9, 12, 8, 10, 3, 1, "SAME", 1, None, None, 37),
}


@pytest.mark.parametrize("case", sorted(STEMS))
def test_int8_nhwc_stem_row_tiles_match_tflite_micro(case: str, tmp_path: Path) -> None:
    """A stem reading the graph input's NHWC rows in place, in the portable C (-march=x86-64-v2:
    the x86 module's #else), as column tiles over a line buffer at any stride: of at most
    GATHER_CHANNELS channels gathered pixel by pixel (linebuffer._gather_pixels), of more
    channel by channel (phase_copy over the pixels' stride)."""
    from opfuse.backends.c.linebuffer import GATHER_CHANNELS
    from opfuse.measure.run.host import CModel, build_shared
    from opfuse.measure.validate.tflite_reference import TfliteReference
    from tests.helpers.c_int8 import conv_pair

    p = conv_pair(*STEMS[case])
    p.m.inputs, p.m.outputs = [p.x], [p.y]
    path = tmp_path / f"{case}.tflite"
    path.write_bytes(p.m.build())
    emit_c(compile(path, "x86-host"), tmp_path / "c", cascades=False)
    code = (tmp_path / "c" / "model.c").read_text()
    assert ("d0[j] = px[0];" in code) == (STEMS[case][2] <= GATHER_CHANNELS)
    assert "line[" in code
    model = CModel(build_shared(tmp_path / "c", ["-march=x86-64-v2"]))
    ref = TfliteReference(path)
    for seed in range(3):
        feeds = ref.random_inputs(seed)
        for name, value in ref.run(feeds).items():
            assert (model.run(feeds)[name].reshape(value.shape) == value).all(), (seed, name)
