"""Execution on Ray: the same ``run_task`` as a Ray remote function, one task per (model, target),
each shipping the model's bytes and the target's TOML (``opfuse.sweep.inputs``) and returning its
rows; Ray does the scheduling. ``local`` starts a Ray instance on this machine with ``jobs`` CPUs
(or uses one this process already started); any other value is the address of an existing
cluster whose workers have opfuse installed (``pip install 'opfuse[ray]'``).
Ray is imported only here, only when ``--ray`` is given (docs/architecture.md, "Sweep")."""

from __future__ import annotations

import logging
import os
import re
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path

from opfuse.errors import OpfuseError
from opfuse.sweep.local import error_rows
from opfuse.sweep.tasks import Task, one_line, run_task

RAY_HINT = "--ray needs Ray: pip install 'opfuse[ray]'"


def import_ray():  # noqa: ANN201 (the ray module)
    try:
        import ray
    except ImportError:
        raise OpfuseError(RAY_HINT) from None
    return ray


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A HOST:PORT (or ray://HOST:PORT) that nothing answers on is one line now, rather than
    Ray's own minute of retries. Other forms (``auto``) go to Ray as they are."""
    match = re.fullmatch(r"(?:ray://)?\[?([^\[\]]+?)\]?:(\d+)", address.strip())
    if match is None:
        return
    try:
        socket.create_connection((match.group(1), int(match.group(2))), timeout_s).close()
    except OSError as exc:
        raise OpfuseError(f"--ray {address}: cannot connect: {exc.strerror or exc}") from None


def _connect(ray, address: str, jobs: int) -> bool:  # noqa: ANN001
    """Connect; True when this call started Ray (and so must shut it down)."""
    if ray.is_initialized():
        return False
    if address == "local":
        # workers import the same opfuse as this process (a source tree on PYTHONPATH too)
        root = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH", "")]))
        ray.init(num_cpus=jobs, include_dashboard=False, log_to_driver=False,
                 _node_ip_address=LOOPBACK,
                 logging_level=logging.ERROR,  # its start-up notes would bury the progress bar
                 runtime_env={"env_vars": {"PYTHONPATH": path}})
    else:
        check_reachable(address)
        try:
            ray.init(address=address, log_to_driver=False)
        except Exception as exc:  # noqa: BLE001 (ConnectionError, ValueError... by version)
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise OpfuseError(f"--ray {address}: cannot connect: {first}") from None
    return True


LOOPBACK = "127.0.0.1"
# Ray's switch for a machine that is not part of a cluster (named for the platforms where it is the
# default): with it off, Ray's own node address is 127.0.0.1, not the machine's reachable one
# (``services.get_node_ip_address``), and its GCS, raylet and worker gRPC servers listen on
# 127.0.0.1 only, which they do when their node address is exactly that (Ray 2.60)
_CLUSTER_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def require_token(address: str) -> None:
    """A local Ray instance is confined to 127.0.0.1 and started with token authentication, a
    fresh random token: both set in this process's environment, which its GCS, raylet and workers
    inherit, before Ray is imported (it reads them when it loads). Ray turns a node address of
    127.0.0.1 into the machine's reachable one (``services.resolve_ip_for_localhost``) unless its
    cluster switch is off, and its servers then listen on every interface, where anyone who reached
    them without a token could run code in its workers. A token or mode the user set is kept."""
    if address != "local":
        return
    os.environ[_CLUSTER_SWITCH] = "0"
    if not os.environ.get("RAY_AUTH_MODE"):
        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))


def run_ray(tasks: list[Task], jobs: int, address: str) -> Iterator[tuple[Task, tuple[dict, ...]]]:
    """(task, its rows) for every task, in the order Ray finishes them."""
    require_token(address)
    ray = import_ray()
    if not tasks:
        return
    started = _connect(ray, address, jobs)
    remote = ray.remote(num_cpus=1, max_retries=1)(run_task)
    pending = {remote.remote(task): task for task in tasks}
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                task = pending.pop(ref)
                try:
                    yield task, tuple(ray.get(ref))
                except Exception as exc:  # noqa: BLE001 (a worker that died, a lost object)
                    first = (str(exc).strip().splitlines() or [""])[0]
                    yield task, error_rows(task, one_line(f"Ray task failed: "
                                                          f"{type(exc).__name__}: {first}"))
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
        if started:
            ray.shutdown()
