"""What keeps a cascaded Cortex-M build's flash at the layer-by-layer one's (issue 20, part 2;
docs/architecture.md, "Cascades"): int8 members of one shape are one C function, their ring rows
arguments (``int8/cascade.py``, ``kernel_functions.py``); the band loop computes its steps from
the members' windows instead of storing a table (``cascade_bands.pulled_schedule``). Each must leave
the integers alone: the C of both
boards is checked against TFLite Micro on 20 seeded inputs. Flash itself is measured in
benchmarks/mcu.py, not asserted here."""

from __future__ import annotations

import re
from itertools import product

import pytest

from opfuse.backends.c.cascade_bands import pulled_schedule
from opfuse.backends.c.emit import c_schedule, generate
from opfuse.fusion.rings import Window, band_schedule
from opfuse.pipeline import compile_model
from tests.helpers.shared import shared_model

_MEMBER = re.compile(r"^OPFUSE_KERNEL\nstatic void (m\d+_\w+)\((.*?)\) \{\n(.*?)^\}\n", re.M | re.S)


def _model_c(name: str, target: str = "cortex-m7") -> str:
    result = compile_model(str(shared_model("tflite", f"{name}.tflite")), target)
    files, info, _ = generate(result, cascades=True)
    assert info.cascades, f"{name}: no cascades on {target}"
    return files["model.c"]


def test_members_of_one_shape_share_one_function() -> None:
    """person_detect's five 128-channel blocks on 6 x 6 maps stream through rings of 2 to 5 rows:
    their depthwise and pointwise members are one function each, called with the rows; no two
    member functions left have the same code, and every one is called."""
    text = _model_c("person_detect")
    defs = {name: (args, body) for name, args, body in _MEMBER.findall(text)}
    assert defs, "no member functions"
    bodies = list(defs.values())
    assert len(bodies) == len(set(bodies)), "two member functions with the same code"
    calls = re.findall(r"^\s+(m\d+_\w+)\(", text, re.M)
    assert set(calls) == set(defs)
    shared = sorted(calls.count(name) for name in defs)
    assert shared[-1] >= 3 and shared[-2] >= 2, shared  # the repeated pointwise and depthwise
    # the rows are arguments: a shared function's ring addressing names no row count
    assert all(re.search(r"% arg\d+", body) for name, (_, body) in defs.items()
               if calls.count(name) > 1)


@pytest.mark.parametrize("name", ["person_detect", "pretrainedResnet_quant"])
def test_cascades_keep_no_step_table(name: str) -> None:
    """The band loops of the shared models' cascades compute their steps: no table in flash."""
    text = _model_c(name)
    assert "cas_win" in text
    assert not re.search(r"static const \w+ steps\[", text)


def test_the_computed_steps_are_the_demand_driven_schedule() -> None:
    """pulled_schedule (the C's loop, in Python) against band_schedule on chains of windows of
    every kernel, stride, pad and band tried: the C takes the loop only where they agree, so
    this says how often the table would be left in flash (never, on these)."""
    wins = [Window(k, s, 1, p) for k, s, p in ((1, 1, 0), (3, 1, 1), (3, 2, 0), (3, 2, 1),
                                                (5, 1, 2), (2, 2, 0))]
    tried = 0
    for a, b, c in product(wins, repeat=3):
        for band, top in product((1, 2, 3), (17, 32)):
            heights = [top]
            for win in (a, b, c):
                heights.append((heights[-1] + 2 * win.pad_top - win.extent) // win.stride + 1)
            if heights[-1] < 1:
                continue
            assert pulled_schedule([a, b, c], heights, band) == \
                band_schedule([a, b, c], heights, band), (a, b, c, heights, band)
            tried += 1
    assert tried > 1000


@pytest.mark.parametrize("name", ["person_detect", "pretrainedResnet_quant"])
@pytest.mark.parametrize("target", ["cortex-m7", "cortex-m4"])
def test_board_cascades_are_bit_exact_with_tflite_micro(name: str, target: str) -> None:
    pytest.importorskip("tflite_micro")
    from opfuse.api import compile
    from opfuse.measure.validate.c_int8 import validate_c_int8

    result = compile(shared_model("tflite", f"{name}.tflite"), target)
    assert result.partition.cascades
    report = validate_c_int8(result, trials=20, steps=0)
    assert report.ok, "\n".join(report.notes)
    assert all(o.max_abs_err == 0 for o in report.outputs)


def test_the_table_fallback_is_bit_exact_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the computed steps would differ, the C keeps the table: forced here on ResNet-8."""
    pytest.importorskip("tflite_micro")
    import opfuse.backends.c.cascade as cascade
    from opfuse.api import compile
    from opfuse.measure.validate.c_int8 import validate_c_int8

    monkeypatch.setattr(cascade, "pulled_schedule", lambda *args: None)
    result = compile(shared_model("tflite", "pretrainedResnet_quant.tflite"), "cortex-m7")
    files, _, _ = generate(result, cascades=True)
    assert re.search(r"static const uint8_t steps\[", files["model.c"])
    report = validate_c_int8(result, trials=3, steps=0)
    assert report.ok, "\n".join(report.notes)


def test_a_residual_add_member_is_the_conv_members_epilogue() -> None:
    """ResNet-8's cascades end in a residual Add (+ Relu) member after a conv: it is written as
    more of the conv member's epilogue, so each cascade's band loop has a case fewer than the
    plan has members (its rows stored once, and one member's code fewer in flash)."""
    result = compile_model(str(shared_model("tflite", "pretrainedResnet_quant.tflite")),
                           "cortex-m7")
    kernels = [k for k in c_schedule(result).partition.kernels if k.is_cascade]
    text = _model_c("pretrainedResnet_quant")
    cases = len(re.findall(r"^\s+case \d+: \{", text, re.M))  # the band loops' members
    led_by_add = sum(1 for k in kernels for m in k.members
                     if m.ops[0] == "Add")
    assert led_by_add >= 3, led_by_add
    assert cases == sum(len(k.members) for k in kernels) - led_by_add, cases


@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m7"])
def test_depthwise_members_are_functions_with_their_setup_hoisted(target: str) -> None:
    """vww_96_int8's 13 depthwise members (issue 28: its cascades ran 2.3% more instructions than
    layer by layer): on Armv7E-M each is a function of its own (none inline in a band loop), reads
    its zero-point-folded biases from a table instead of summing its taps on every row, and on
    rows up to 16 wide steps its tap-row pointers from channel to channel. Bit-exactness: the
    board test above; the instructions: benchmarks/mcu.py --int8."""
    text = _model_c("vww_96_int8", target)
    defs = {name: body for name, _, body in _MEMBER.findall(text)}
    depthwise = {name: body for name, body in defs.items() if "bk0_3" in body}
    assert depthwise, "no depthwise member function"
    for name, body in re.findall(r"^static void (k\d+_cascade\w*)\(.*?\) \{\n(.*?)^\}\n", text,
                                 re.M | re.S):
        assert "bk0_3" not in body, f"{name}: a depthwise member inline in the band loop"
    for name, body in depthwise.items():
        assert re.search(r"bk0_3 = arg\d+\[c\*\d+ \+ \d+\];", body), f"{name}: biases summed"
        assert "- -128*(" not in body, name
    stepped = [name for name, body in depthwise.items() if "r0 += st0;" in body]
    assert len(stepped) >= 3, stepped  # the 12-, 6- and 3-wide layers' (and shared) functions
