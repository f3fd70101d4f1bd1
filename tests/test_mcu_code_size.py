"""What keeps the Cortex-M flash and the cascades' instructions down without changing a result
(docs/architecture.md, "int8 matrix kernels on Cortex-M"): one C function per distinct kernel body
(``backends/c/kernel_functions.py``), weights 8-byte aligned on a board, and cascade members that
keep the matrix core's full row tile (``int8/mcu_tiles.row_tile``, ``stack_budget``). Bit-exactness
of the same C is tests/test_c_int8_shared.py's and tests/test_mcu.py's; no QEMU here."""

from __future__ import annotations

import re

import pytest

from opfuse.backends.c.emit import generate, generate_pass
from opfuse.backends.c.int8.mcu_tiles import CONV_COLS, STACK_SCRATCH_BYTES, row_tile, row_tiles
from opfuse.backends.c.prefix import DEFAULT as DEFAULT_PREFIX
from opfuse.backends.c.tensors import MCU_WEIGHT_ALIGN, WEIGHT_ALIGN
from opfuse.compiled import DEFAULT_PLANNER
from opfuse.pipeline import compile_model
from tests.helpers.shared import shared_model

_DEF = re.compile(r"^OPFUSE_KERNEL\nstatic void (k\d+_\w+)\((.*?)\) \{\n(.*?)^\}\n", re.M | re.S)
_CALL = re.compile(r"^    (k\d+_\w+)\(", re.M)


def _definitions(model_c: str) -> dict[str, tuple[str, str]]:
    return {name: (args, body) for name, args, body in _DEF.findall(model_c)}


def test_identical_kernels_share_one_function() -> None:
    """kws_ref_model's four depthwise-separable blocks have one shape: their two kernels are
    written once each and called four times; no two functions left have the same code."""
    result = compile_model(str(shared_model("tflite", "kws_ref_model.tflite")), "cortex-m7")
    files, info, _ = generate(result, cascades=False)
    text = files["model.c"]
    defs = _definitions(text)
    bodies = list(defs.values())
    assert len(bodies) == len(set(bodies)), "two kernel functions with the same code"
    calls = _CALL.findall(text.split("int opfuse_model_invoke(void) {")[1].split("\n}\n")[0])
    assert len(calls) == info.kernels  # one call per kernel of the schedule
    assert set(calls) == set(defs)  # every function defined is called, every call defined
    shared = [name for name in defs if calls.count(name) > 1]
    assert len(shared) >= 2 and all(calls.count(name) == 4 for name in shared), shared
    # the manifest names the function each kernel runs (validate --per-kernel, ctime)
    assert [e.function for e in info.kernel_outputs] == calls


@pytest.mark.parametrize("target", ["cortex-m7", "x86-host"])
def test_weights_are_aligned_for_the_target(target: str) -> None:
    """Every weight array the kernels point at starts at a multiple of the target's alignment,
    and on a Cortex-M board the blob is smaller than 64-byte alignment makes it."""
    path = shared_model("tflite", "vww_96_int8.tflite")
    files, info, _ = generate(compile_model(str(path), target), cascades=False)
    offsets = [int(k) for k in re.findall(r"WB \+ (\d+)\)", files["model.c"])]
    align = WEIGHT_ALIGN if target == "x86-host" else MCU_WEIGHT_ALIGN
    assert offsets and all(k % align == 0 for k in offsets)
    if target == "cortex-m7":
        host = generate(compile_model(str(path), "x86-host"), cascades=False)[1]
        assert info.weights_bytes < host.weights_bytes


def test_row_tile_wastes_no_more_than_the_plane_tile() -> None:
    """A row of a cascade member is tiled by 4-6 pixels, never repeating more pixels than
    CONV_COLS would; ResNet-8's rows of 8, 16 and 32 by 4 (6 repeats 4, 2 and 4 pixels)."""
    for width in range(1, 200):
        cols = row_tile(width)
        assert 1 <= cols <= CONV_COLS
        assert cols == width if width <= CONV_COLS else cols >= 4
        waste = -(-width // cols) * cols - width
        assert waste <= -(-width // CONV_COLS) * CONV_COLS - width
    assert [row_tile(w) for w in (8, 16, 32)] == [4, 4, 4]


_TILE = re.compile(r"for \(int p0 = 0; p0 < (\d+); p0 \+= (\d+)\) \{\n(?:\s*const int n = p0 < (\d+))?")
_COL = re.compile(r"int64_t col\[(\d+)\];")


def test_row_tiles_cover_a_row_exactly() -> None:
    """A cascade row in wider tiles and one narrower last tile: the tiles cover it exactly, no
    wider than ``most``, in no more core instructions than ``row_tile``'s (which repeats
    pixels where it does not divide the row)."""
    for width in range(1, 200):
        for most in range(1, CONV_COLS + 1):
            cols, tail = row_tiles(width, most)
            assert 1 <= cols <= most and 0 <= tail < cols and width % cols == tail
    assert [row_tiles(w) for w in (8, 16, 32, 96)] == [(4, 0), (6, 4), (6, 2), (6, 0)]


def test_cascade_members_keep_the_full_row_tile() -> None:
    """pretrainedResnet_quant's cascades on cortex-m7: every member conv runs the row tile (not
    the 1-3 columns 1 KB of stack held) or wider tiles with an exact narrower tail (rows of 32
    and 16: 5x6 + 2, 2x6 + 4) where that scratch is no deeper than the build's deepest without
    tails; its scratch may exceed STACK_SCRATCH_BYTES only because the cascades save more arena
    than twice the excess, and arena + stack scratch stay below the layer-by-layer build's."""
    result = compile_model(str(shared_model("tflite", "pretrainedResnet_quant.tflite")),
                           "cortex-m7")
    files, info, _ = generate(result, cascades=True)
    _, plain, _ = generate(result, cascades=False)
    assert info.cascades, "no cascades on cortex-m7"
    bodies = [body for name, (_, body) in _definitions(files["model.c"]).items()
              if "cascade" in name]
    tiles = [(int(w), int(c), int(end or w)) for body in bodies for w, c, end in _TILE.findall(body)]
    assert tiles and all(c == row_tile(w) and end == w or (c, w - end) == row_tiles(w)
                         for w, c, end in tiles), tiles
    assert any(end < w for w, _, end in tiles), "no row ends in a narrower tile"
    # the tails' wider tiles take no deeper a stack than the same build without them
    without = generate_pass(result, True, DEFAULT_PLANNER, True, DEFAULT_PREFIX)[1]
    assert info.stack_scratch_bytes <= without.stack_scratch_bytes
    scratch = max(int(n) * 8 for body in bodies for n in _COL.findall(body))
    saving = plain.arena_bytes - info.arena_bytes
    assert scratch > STACK_SCRATCH_BYTES  # what the 1 KB bound cost: see row_tile's figures
    assert scratch - STACK_SCRATCH_BYTES <= saving // 2
    assert info.arena_bytes + info.stack_scratch_bytes \
        < plain.arena_bytes + plain.stack_scratch_bytes
