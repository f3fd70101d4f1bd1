"""`sweep --ray local` listens on 127.0.0.1 only (issue 31): Ray's GCS, raylet and workers,
watched with `ss` while the sweep runs (opfuse/sweep/ray_exec.py, docs/limits.md)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _listening(session: int) -> set[tuple[str, str]]:
    """(local address, process name) of every TCP socket listening in process session
    ``session``."""
    pids = set(subprocess.run(["pgrep", "-s", str(session)], capture_output=True,
                              text=True).stdout.split())
    found = set()
    for line in subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout.splitlines():
        owners = re.findall(r'\("([^"]+)",pid=(\d+)', line)
        for name, pid in owners:
            if pid in pids:
                found.add((line.split()[3].rsplit(":", 1)[0], name))
    return found


@pytest.mark.skipif(shutil.which("ss") is None or shutil.which("pgrep") is None,
                    reason="needs ss and pgrep (iproute2, procps)")
def test_a_local_ray_cluster_listens_on_loopback_only(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="pip install 'opfuse[ray]' to test --ray")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    proc = subprocess.Popen([sys.executable, "-m", "opfuse", "sweep", "seed_block", "ds_cnn",
                             "--targets", "cortex-m7,cortex-m4", "--ray", "local", "--jobs", "1",
                             "--quiet", "-o", str(tmp_path / "rows.json")],
                            env={**env, "PYTHONPATH": str(ROOT)}, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: set[tuple[str, str]] = set()
    try:
        while proc.poll() is None:
            seen |= _listening(proc.pid)
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    servers = {name for _, name in seen}
    assert {"gcs_server", "raylet"} <= servers, seen  # the watch saw Ray's servers
    wide = {(addr, name) for addr, name in seen
            if addr not in ("127.0.0.1", "[::ffff:127.0.0.1]", "[::1]")}
    assert not wide, wide
