"""Local execution: ``jobs`` warm worker processes (spawned once, each imports the compiler once
and runs task after task), results streamed as they finish. At most two tasks per worker are in
flight, so an interrupted sweep has little to cancel and a worker that dies (a crash in a native
library) costs only the tasks it held: the pool is rebuilt and those tasks retried once, then
given an error row (docs/architecture.md, "Sweep")."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from opfuse.sweep.schema import blank_row
from opfuse.sweep.tasks import Task, run_task

IN_FLIGHT_PER_WORKER = 2


def _exit_with(parent: int) -> None:
    """A worker whose sweep was killed (SIGKILL: no clean-up ran) ends too, instead of waiting on
    its queue for ever and holding the terminal's pipes open."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def _warm() -> None:
    """Worker start: Ctrl-C is the parent's to handle (it reaches the whole process group), the
    worker follows its parent's death, and the compiler is imported now, not in the first task."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with, args=(os.getppid(),), daemon=True).start()
    import opfuse.api  # noqa: F401


def error_rows(task: Task, message: str) -> tuple[dict, ...]:
    from opfuse import __version__

    m, t = task.model, task.target
    return tuple(blank_row(model=m.name, model_sha256=m.sha256, model_format=m.format,
                           target=t.name, target_sha256=t.sha256, precision=p,
                           options=task.options(p), opfuse_version=__version__, status="error",
                           error=message) for p in task.precisions)


class _Pool:
    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.executor = self._new()

    def _new(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=self.jobs, initializer=_warm,
                                   mp_context=multiprocessing.get_context("spawn"))

    def rebuild(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.executor = self._new()

    def stop(self) -> None:
        """Cancel what has not started and end the workers now (an emulated task can run for a
        minute): the processes this pool started, by their ids; ProcessPoolExecutor has no public
        way to end a running task."""
        processes = list(getattr(self.executor, "_processes", {}).values())
        self.executor.shutdown(wait=False, cancel_futures=True)
        for proc in processes:
            if proc.is_alive():
                proc.terminate()
        for proc in processes:
            proc.join(timeout=5)


def run_local(tasks: list[Task], jobs: int, fn: Callable[[Task], tuple[dict, ...]] = run_task
              ) -> Iterator[tuple[Task, tuple[dict, ...]]]:
    """(task, its rows) for every task, in the order they finish (``fn``: a module-level
    function, as a spawned worker imports it). When a worker dies, every task the pool held is a
    suspect: each is run again alone, so only the one that kills its worker gets error rows."""
    if not tasks:
        return
    pool = _Pool(max(1, min(jobs, len(tasks))))
    queue = list(reversed(tasks))
    suspects: list[Task] = []
    running: dict[Future, Task] = {}
    alone: set[int] = set()  # tasks running as the pool's only one

    def submit(task: Task) -> None:
        running[pool.executor.submit(fn, task)] = task

    try:
        while queue or running or suspects:
            if suspects and not running:
                alone.add(id(suspects[-1]))
                submit(suspects.pop())
            while not suspects and queue and len(running) < IN_FLIGHT_PER_WORKER * pool.jobs:
                submit(queue.pop())
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            broken: list[Task] = []
            for future in done:
                task = running.pop(future)
                try:
                    yield task, future.result()
                except BrokenProcessPool:
                    if id(task) in alone:
                        yield task, error_rows(task, "the worker process died running this "
                                               "model (a crash in a native library?)")
                    else:
                        broken.append(task)
                except Exception as exc:  # noqa: BLE001 (a task that cannot be sent or returned)
                    yield task, error_rows(task, f"internal error: {type(exc).__name__}: {exc}")
            if any(not f.cancelled() and isinstance(f.exception(), BrokenProcessPool)
                   for f in done):
                suspects += broken + list(running.values())  # the rebuilt pool loses these
                running.clear()
                pool.rebuild()
    finally:
        if running or queue or suspects:
            pool.stop()
        else:
            pool.executor.shutdown(wait=True)
