"""Progress bars that show on a terminal and stay quiet otherwise."""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator, Protocol


class Progress(Protocol):
    def advance(self, amount: float = 1) -> None: ...


class _Silent:
    def advance(self, amount: float = 1) -> None:
        pass


class _RichTask:
    def __init__(self, progress, task_id):
        self._progress = progress
        self._task_id = task_id

    def advance(self, amount: float = 1) -> None:
        self._progress.advance(self._task_id, amount)


def show_progress() -> bool:
    """Progress is shown only when stderr is a terminal."""
    return sys.stderr.isatty()


@contextlib.contextmanager
def progress_bar(description: str, total: float | None, enabled: bool | None = None) -> Iterator[Progress]:
    """Context manager yielding an object with ``advance(n)``.

    ``enabled=None`` means: show on a terminal only.
    """
    if enabled is None:
        enabled = show_progress()
    if not enabled:
        yield _Silent()
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn()]
    with RichProgress(*columns, console=Console(stderr=True), transient=True) as progress:
        task_id = progress.add_task(description, total=total)
        yield _RichTask(progress, task_id)
