"""How the command line shows maintenance progress: bars in a terminal, a few plain lines elsewhere.

Both views are `ProgressCallback`s for the maintenance layer (icetide.maintenance.progress),
which itself prints nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from icetide.maintenance.progress import ProgressEvent

if TYPE_CHECKING:
    from rich.console import Console

PLAIN_STEPS = 10  # a non-terminal view prints a step's first and last events and every tenth of the way


class ProgressBars:
    """One rich progress bar per (table, step), with counts and the unit just finished."""

    def __init__(self, console: Console) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self._tasks: dict[tuple[str, str], Any] = {}

    def __enter__(self) -> ProgressBars:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def __call__(self, event: ProgressEvent) -> None:
        key = (event.table, event.step)
        task = self._tasks.get(key)
        if task is None:
            task = self._progress.add_task(f"{event.table}: {event.step}", total=event.total, info="")
            self._tasks[key] = task
        self._progress.update(task, completed=event.done, total=event.total, info=event.detail[:60])


class ProgressLines:
    """Plain lines for logs and pipes: a step's start, its end, and each tenth in between."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._shown: dict[tuple[str, str], int] = {}  # last tenth printed per step

    def __enter__(self) -> ProgressLines:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __call__(self, event: ProgressEvent) -> None:
        key = (event.table, event.step)
        if event.total:
            tenth = event.done * PLAIN_STEPS // event.total
            if key in self._shown and tenth == self._shown[key] and not event.finished:
                return
            self._shown[key] = tenth
            count = f"{event.done}/{event.total}"
        else:
            if key in self._shown and event.done % 1000:
                return
            self._shown[key] = event.done
            count = str(event.done)
        detail = f" ({event.detail})" if event.detail else ""
        self._console.print(f"{event.table}: {event.step} {count}{detail}", highlight=False, soft_wrap=True)


def progress_view(console: Console) -> ProgressBars | ProgressLines:
    """Bars when the console is a terminal, plain lines otherwise."""
    return ProgressBars(console) if console.is_terminal else ProgressLines(console)
