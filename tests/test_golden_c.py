"""The golden gate (tests/helpers/golden.py): the generated C of the built-in and shared models on
x86-host, cortex-m4, cortex-m7 and cortex-m55 (the x86, armv7em and mve ISA modules), cascades on
and off, hashes as recorded. A change meant to alter the C re-records with ``python -m tests.helpers.golden --write`` and says which builds moved
in its commit; any other change must leave every hash as it is."""

from __future__ import annotations

import os

import onnx
import pytest

from tests.helpers import golden


@pytest.mark.parametrize(("name", "source"), golden.models(bool(os.environ.get("OPFUSE_GOLDEN_ALL"))),
                         ids=lambda v: v if "/" not in v else "")
def test_generated_c_is_as_recorded(name: str, source: str) -> None:
    then = golden.recorded()
    now = dict(golden.hashes(name, source))
    missing = [k for k in now if k not in then]
    if missing:
        pytest.fail(f"not in {golden.GOLDEN.name}: {missing} (record: python -m tests.helpers.golden --write)")
    assert golden.differences(now, then) == []


def test_the_gate_sees_a_change_in_the_c() -> None:
    """A digest moves with one byte of model.c or of weights.c, so the gate can fail."""
    base = {"model.c": "int x;\n", "weights.c": "const int w = 1;\n"}
    assert golden.digest(base) != golden.digest({**base, "model.c": "int y;\n"})
    assert golden.digest(base) != golden.digest({**base, "weights.c": "const int w = 2;\n"})
    assert golden.differences({"m|t|cascades": "a"}, {"m|t|cascades": "b"}) == \
        ["m|t|cascades: b -> a"]


def test_the_c_does_not_depend_on_where_the_model_was_read_from(tmp_path) -> None:
    """The same model file in two directories gives the same model.c (the gate's hashes hold on
    every machine and checkout, and the C names no directory of the user's)."""
    import opfuse
    from opfuse.backends.c.emit import generate
    from opfuse.models import build_model

    one, two = tmp_path / "a" / "m.onnx", tmp_path / "b" / "deeper" / "m.onnx"
    for path in (one, two):
        path.parent.mkdir(parents=True)
        onnx.save(build_model("seed_block"), path)
    first, second = (generate(opfuse.compile(str(p), target="x86-host"))[0] for p in (one, two))
    assert first["model.c"] == second["model.c"]
    assert str(tmp_path) not in first["model.c"] and "m.onnx" in first["model.c"]
