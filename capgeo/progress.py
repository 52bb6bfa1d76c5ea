"""Progress bars that show on a terminal and stay quiet otherwise.

A command of several passes says which one each bar is: ``with labelled(pass_label("length 64", 2, 6)):``
prefixes every bar opened inside (``length 64 (2/6): Encoding with ...``), and a command wrapped in
:func:`counts_passes` numbers its bars (``[pass 3] pairs: pairwise cosines``). A new bar is a new pass,
so none reads as the one before running backwards. :func:`progress_bar` keeps its signature.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
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


class Tally:
    """A bar that counts what it was advanced by, so the caller can make up for a worker
    that reports fewer items than it did (an encoder that ignores the bar it is given)."""

    def __init__(self, bar: Progress):
        self._bar = bar
        self.count = 0.0

    def advance(self, amount: float = 1) -> None:
        self.count += amount
        self._bar.advance(amount)


#: the bar's own width; the description gets what the bar and the numbers leave
BAR_WIDTH = 12
#: with less room than this for the description, the bar shows its numbers alone
MIN_DESCRIPTION = 12


#: the unit of a bar that counts bytes: its count and rate in decimal units ("12.3/46.2 MB", "3.1 MB/s")
BYTES = "bytes"


def numbers_width(total: float | None, unit: str | None = None) -> int:
    """Columns the count, rate, elapsed and remaining times take, with their spaces
    ("61725/1000000 41,121.6/s 0:00:01 eta 0:00:23": twice the total's digits and 37 more;
    bytes: "999.9/999.9 MB 999.9 MB/s 0:00:01 eta 0:00:23", at most 48)."""
    if unit == BYTES:
        return 16 + 1 + 11 + 8 + 4 + 8
    digits = len(str(int(total))) if total else 1
    return 2 * digits + 1 + 12 + 8 + 4 + 8 + 4


#: the passes a bar opened here belongs to, outermost first (:func:`labelled`)
_labels: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("capgeo_progress_labels", default=())
#: the overall count of passes, where a command runs several (:func:`counted_passes`)
_count: contextvars.ContextVar[list | None] = contextvars.ContextVar("capgeo_progress_count", default=None)


def pass_label(name: str, index: int, count: int) -> str:
    """One pass of several known ones, as every bar names it: ``length 64 (2/6)``."""
    return f"{name} ({index}/{count})"


@contextlib.contextmanager
def labelled(label: str) -> Iterator[None]:
    """Every bar opened inside the block says which pass it is ("exact copies: pairwise cosines"),
    so that a new bar with a smaller count reads as the next pass, not as one running backwards.
    Labels nest: ``length 64 (2/6): pairs: pairwise cosines``."""
    token = _labels.set((*_labels.get(), label))
    try:
        yield
    finally:
        _labels.reset(token)


@contextlib.contextmanager
def counted_passes(total: int | None = None) -> Iterator[None]:
    """Number every bar opened inside the block, ``[2/4]`` (``[pass 2]`` where how many passes
    will run is not known ahead, as when a cache hit skips the encoding): an overall count for a
    command of several passes. A block inside another counts in the outer one."""
    if _count.get() is not None:
        yield
        return
    token = _count.set([0, total])
    try:
        yield
    finally:
        _count.reset(token)


def counts_passes(function):
    """A command whose bars are numbered by :func:`counted_passes` (put next to its ``def``)."""
    @functools.wraps(function)
    def counting(*args, **kwargs):
        with counted_passes():
            return function(*args, **kwargs)

    return counting


def bar_description(description: str) -> str:
    """``description`` with its pass: the overall count, then the labels of :func:`labelled`.
    Each call (one per bar) takes the next number of :func:`counted_passes`."""
    labels = _labels.get()
    text = ": ".join((*labels, description))
    count = _count.get()
    if count is None:
        return text
    count[0] += 1
    number = f"{count[0]}/{count[1]}" if count[1] else f"pass {count[0]}"
    return f"[{number}] {text}"


def show_progress() -> bool:
    """Progress is shown only when stderr is a terminal."""
    return sys.stderr.isatty()


@contextlib.contextmanager
def progress_bar(description: str, total: float | None, enabled: bool | None = None,
                 unit: str | None = None) -> Iterator[Progress]:
    """Context manager yielding an object with ``advance(n)``.

    ``enabled=None`` means: show on a terminal only. ``unit`` :data:`BYTES`: the bar counts bytes and
    says so ("12.3/46.2 MB", "3.1 MB/s"), else it counts items.
    """
    if enabled is None:
        enabled = show_progress()
    description = bar_description(description)  # numbered whether shown or not: the count stays true
    if not enabled:
        yield _Silent()
        return
    from rich.cells import cell_len
    from rich.console import Console
    from rich.progress import (BarColumn, DownloadColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn, TransferSpeedColumn)
    from rich.table import Column

    from capgeo.display import visible

    console = Console(stderr=True)
    whole = lambda: Column(no_wrap=True)  # noqa: E731
    counts = ([DownloadColumn(binary_units=False, table_column=whole()), TransferSpeedColumn(table_column=whole())]
              if unit == BYTES else [MofNCompleteColumn(table_column=whole()), _rate_column(table_column=whole())])
    numbers = [*counts, TimeElapsedColumn(table_column=whole()), TextColumn("eta", table_column=whole()),
               TimeRemainingColumn(table_column=whole())]
    # the description names an encoder (a user's folder or file name): shown as text, never as markup
    # or terminal control, and whole: where it does not fit beside the bar and the numbers it takes the
    # line above them ("Encoding with al…" named no encoder). The numbers are never cut either (at 40
    # columns squeezing them in cut them to "288/3…", "0:00:…"): the bar and then the elapsed time give way
    description = visible(description)
    width = numbers_width(total, unit)
    room = console.width - width - BAR_WIDTH - 2
    beside = room >= MIN_DESCRIPTION and cell_len(description) <= room  # in cells: a CJK character takes two
    if console.width < width:
        numbers = [column for column in numbers if not isinstance(column, (TextColumn, TimeElapsedColumn))]
    elif not beside:
        numbers = [column for column in numbers if not isinstance(column, TextColumn)]
    columns = ([TextColumn("{task.description}", markup=False, table_column=whole()),
                BarColumn(bar_width=BAR_WIDTH), *numbers] if beside
               else [BarColumn(bar_width=BAR_WIDTH), *numbers] if console.width - width >= BAR_WIDTH + 1
               else numbers)
    kind = RichProgress if beside else _named_above()
    # speed over the whole run, not rich's last 30 s: an encoding batch can take longer than that on a CPU,
    # and the window then held one sample (no rate, no ETA) or none (0.0/s)
    with kind(*columns, console=console, transient=True, speed_estimate_period=24 * 3600) as progress:
        task_id = progress.add_task(description, total=total)
        yield _RichTask(progress, task_id)


@functools.cache
def _named_above() -> type:
    """The class of a bar whose name takes the line above it (rich loads only with a bar shown)."""
    from rich.progress import Progress as RichProgress
    from rich.text import Text

    class NamedAbove(RichProgress):
        """A bar whose name takes the line above it, wrapped at the terminal's width rather than cut."""

        def get_renderables(self):
            for task in self.tasks:
                yield Text(task.description, overflow="fold")
            yield self.make_tasks_table(self.tasks)

    return NamedAbove


@contextlib.contextmanager
def batch_progress(progress, description: str, total: float) -> Iterator[Progress]:
    """Where a worker reports each batch it finishes: the caller's bar when ``progress``
    is one (it has ``advance``), else a bar of its own when ``progress`` is true
    (shown on a terminal), else nothing. Rich shows one live display at a time, so a
    caller that owns a bar passes it down instead of letting the worker open another."""
    if hasattr(progress, "advance"):
        yield progress
        return
    with progress_bar(description, total, enabled=None if progress else False) as bar:
        yield bar


def _rate_column(**options):
    from rich.progress import ProgressColumn
    from rich.text import Text

    class RateColumn(ProgressColumn):
        """Items per second, from rich's own moving estimate."""

        def render(self, task) -> Text:
            speed = task.finished_speed or task.speed
            return Text("" if speed is None else f"{speed:,.1f}/s", style="progress.data.speed")

    return RateColumn(**options)
