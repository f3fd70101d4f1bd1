"""The live progress bar of a sweep (rich, on stderr): rows done of rows planned, how many
failed, time elapsed and an estimate of time left. Silent when stderr is not a terminal or with
``--quiet``."""

from __future__ import annotations

import sys
from types import TracebackType


class SweepProgress:
    def __init__(self, total: int, quiet: bool = False) -> None:
        self.total = total
        self.enabled = not quiet and sys.stderr.isatty() and total > 0
        self._bar = None
        self._task = None
        self.failed = 0

    def __enter__(self) -> SweepProgress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("sweep"), BarColumn(), MofNCompleteColumn(),
                TextColumn("rows, [red]{task.fields[failed]} failed"), TimeElapsedColumn(),
                TextColumn("elapsed,"), TimeRemainingColumn(), TextColumn("left"),
                console=Console(stderr=True),
            )
            self._bar.__enter__()
            self._task = self._bar.add_task("sweep", total=self.total, failed=0)
        return self

    def advance(self, rows: tuple[dict, ...]) -> None:
        self.failed += sum(1 for r in rows if r["status"] == "error")
        if self._bar is not None:
            self._bar.update(self._task, advance=len(rows), failed=self.failed)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.__exit__(kind, exc, tb)
