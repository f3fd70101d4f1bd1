"""Fast start: the light commands do not import the compiler's heavy dependencies (issue 9).

Structural, not timed: benchmarks/startup.py measures the start-up time."""

from __future__ import annotations

import pytest

from benchmarks.startup import LIGHT_COMMANDS, heavy_imports

FORBIDDEN = {"onnx_ir", "onnxscript", "onnxruntime", "sympy", "pyarrow", "ray"}


@pytest.mark.parametrize("command", LIGHT_COMMANDS, ids=lambda c: " ".join(c))
def test_light_command_skips_heavy_imports(command: tuple[str, ...]) -> None:
    assert not FORBIDDEN & set(heavy_imports(command))


def test_help_imports_not_even_onnx() -> None:
    assert heavy_imports(("--help",)) == []


def test_the_probe_sees_heavy_imports() -> None:
    """The check can fail: a command that compiles does import onnx_ir."""
    assert "onnx_ir" in heavy_imports(("fusion", "seed_block", "--json", "-"))


def test_package_still_exports_the_api() -> None:
    import opfuse
    from opfuse import api

    assert opfuse.compile is api.compile
    assert set(opfuse.__all__) == {*api.__all__, "OpfuseError"}
