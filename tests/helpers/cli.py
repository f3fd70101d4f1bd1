"""Helpers for tests of the CLI's bad-input contract: one line, exit 2, nothing written."""

from __future__ import annotations


def assert_clean_error(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    lines = [line for line in err.strip().splitlines() if line]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]


def compile_refused(run_cli, model, tmp_path):  # noqa: ANN001, ANN201
    """Run `opfuse compile MODEL -o out.onnx`; nothing (not even a temp file) may be left."""
    out = tmp_path / "out.onnx"
    code, _, err = run_cli("compile", str(model), "-o", str(out))
    assert not out.exists(), "nothing may be written on error"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.onnx")]
    return code, err
