"""Running `opfuse sweep` as a user does, from this checkout (tests/test_sweep*.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.shared import REPO


def sweep_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    return env


def sweep_cli(folder: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opfuse", "sweep", *args, "--quiet"],
                          cwd=folder, env=sweep_env(), capture_output=True, text=True,
                          timeout=timeout, check=False)
