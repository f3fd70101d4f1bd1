from __future__ import annotations

import pytest

from tests.helpers.shared import SHARED_ABSENT, SHARED_MODELS


@pytest.fixture
def run_cli(capsys):
    """Run the CLI in-process; return (exit status, stdout, stderr)."""
    from opfuse.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test parametrized over an absent shared corpus says so, not just 'empty parameter set'."""
    if SHARED_MODELS.is_dir():
        return
    for item in items:
        if any("empty parameter set" in str(m.kwargs.get("reason", ""))
               for m in item.iter_markers("skip")):
            item.add_marker(pytest.mark.skip(reason=f"{SHARED_ABSENT} (empty parameter set)"),
                            append=False)
