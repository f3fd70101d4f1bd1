"""A sweep from start to end: plan the tasks (models x targets, the precisions not yet done),
run them locally or on Ray, stream every row to the partial file, and write the output sorted by
key. Ctrl-C keeps what is done (docs/architecture.md, "Sweep")."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from opfuse.output import check_output
from opfuse.sweep.inputs import CalibrationRef, ModelRef, TargetRef
from opfuse.sweep.schema import row_key, sort_rows
from opfuse.sweep.tasks import Task


@dataclass(frozen=True)
class Outcome:
    rows: tuple[dict, ...]  # every row of the output: those done before (--resume) and new ones
    new: int  # rows computed by this run
    failed: int  # of those, error rows
    interrupted: bool


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


def plan(models: list[ModelRef], targets: list[TargetRef], precisions: tuple[str, ...],
         emulate: bool, timeout_s: float, done: set[tuple[str, ...]] = frozenset(),
         input_shape: tuple[str, ...] = (), calibration: CalibrationRef | None = None,
         input_value: tuple[str, ...] = ()) -> list[Task]:
    """One task per (model, target) with the precisions whose rows are not in ``done``."""
    tasks = []
    for model in models:
        for target in targets:
            probe = Task(model, target, precisions, emulate, timeout_s, input_shape, calibration,
                         input_value)
            todo = tuple(p for p in precisions if (model.name, model.sha256, target.name, p,
                                                   probe.options(p)) not in done)
            if todo:
                tasks.append(Task(model, target, todo, emulate, timeout_s, input_shape,
                                  calibration, input_value))
    return tasks


def largest_first(tasks: list[Task]) -> list[Task]:
    """The biggest models first (a built-in counts as big: its size is unknown until built), so
    the last tasks to finish are small ones and no worker idles long at the end. The output's
    order does not depend on it (rows are sorted by key)."""
    def size(task: Task) -> int:
        return len(task.model.data) if task.model.data is not None else 1 << 40

    return sorted(tasks, key=size, reverse=True)


def execute(tasks: list[Task], jobs: int, ray: str | None
            ) -> Iterator[tuple[Task, tuple[dict, ...]]]:
    tasks = largest_first(tasks)
    if ray is not None:
        from opfuse.sweep.ray_exec import run_ray

        return run_ray(tasks, jobs, ray)
    from opfuse.sweep.local import run_local

    return run_local(tasks, jobs)


def run(tasks: list[Task], jobs: int, ray: str | None, previous: dict[tuple[str, ...], dict],
        on_rows: Callable[[tuple[dict, ...]], None] = lambda rows: None) -> Outcome:
    """Run ``tasks``; ``previous`` rows are kept (and replaced by a new row of the same key).
    A KeyboardInterrupt stops the run: the outcome holds what finished, marked interrupted."""
    rows = dict(previous)
    new = failed = 0
    interrupted = False
    stream = execute(tasks, jobs, ray)
    try:
        for _, task_rows in stream:
            for row in task_rows:
                rows[row_key(row)] = row
            new += len(task_rows)
            failed += sum(1 for r in task_rows if r["status"] == "error")
            on_rows(task_rows)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        stream.close()  # cancels what has not finished
    return Outcome(tuple(sort_rows(list(rows.values()))), new, failed, interrupted)


def protect_inputs(models: list[ModelRef], *outputs: str | None) -> None:
    """Never write over a model the sweep reads (same file, symlink or hard link:
    opfuse/output)."""
    inputs = [m.name for m in models if m.format != "builtin"]
    for out in outputs:
        if out is not None:
            check_output(out, inputs)
