"""Progress where people wait (`relay replay --run`, `relay eval --run`, `relay tests count` on a
cold cache): on a terminal a bar with the rate and the time left (rich, which typer brings); on
anything else (CI logs, pipes, files) a plain line now and then, so a log stays short.

The libraries report progress through a plain callback, ``progress(part, done, total)``: one
``part`` per thing counted at once (a ground-truth run, a collection), so runs side by side add
up into one bar. They never print.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import IO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

#: a plain line at most this often (seconds) on a stream that is not a terminal
PLAIN_EVERY = 30.0


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class _Rate(ProgressColumn):
    """The task's rate in its unit per second (rich's own speed column speaks bytes)."""

    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(
            "-" if speed is None else f"{speed:.1f} {self.unit}/s", style="progress.data.speed"
        )


class ProgressBar:
    """A progress bar on ``stream`` (default stderr) for ``what``, counted in ``unit``.

    ``update(part, done, total)`` is the libraries' callback; the bar shows the sum over parts.
    ``tty`` overrides the stream's own answer (tests); ``clock`` is the monotonic clock."""

    def __init__(
        self,
        what: str,
        *,
        unit: str = "tests",
        stream: IO[str] | None = None,
        tty: bool | None = None,
        every: float = PLAIN_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what, self.unit, self.every, self.clock = what, unit, every, clock
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.parts: dict[str, tuple[int, int]] = {}
        self.start = clock()  # when counting began (the first update)
        self.first_done: int | None = None  # done then: a resumed run's rate counts from it
        self.last_line = -float("inf")
        self.last_said: tuple[int, int] | None = None
        self._rich: Progress | None = None
        self._task: TaskID | None = None

    def _start_bar(self) -> None:
        """The terminal's bar, drawn from the first update (a cache hit draws nothing)."""
        self._rich = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            _Rate(self.unit),
            TextColumn("elapsed"),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            console=Console(file=self.stream, force_terminal=True),
            get_time=self.clock,
        )
        self._rich.start()
        self._task = self._rich.add_task(self.what, total=None)

    @property
    def done(self) -> int:
        return sum(d for d, _ in self.parts.values())

    @property
    def total(self) -> int:
        return sum(t for _, t in self.parts.values())

    def update(self, part: str, done: int, total: int) -> None:
        """``part`` has ``done`` of ``total`` (the libraries' callback)."""
        self.parts[part] = (done, total)
        if self.first_done is None:
            self.first_done, self.start = self.done, self.clock()
            if self.tty:
                self._start_bar()
        if self._rich is not None and self._task is not None:
            self._rich.update(self._task, completed=self.done, total=self.total or None)
        elif self.clock() - self.last_line >= self.every:
            self._plain()

    def rate(self) -> float | None:
        """Units per second since counting began (None before anything was counted)."""
        elapsed = self.clock() - self.start
        counted = self.done - (self.first_done or 0)
        return counted / elapsed if elapsed > 0 and counted > 0 else None

    def line(self) -> str:
        done, total = self.done, self.total
        text = f"{self.what}: {done:,}"
        if total:
            text += f" of {total:,} {self.unit} ({100 * done / total:.0f} %)"
        else:
            text += f" {self.unit}"
        rate = self.rate()
        text += f", {_duration(self.clock() - self.start)} elapsed"
        if rate is not None:
            text += f", {rate:.1f} {self.unit}/s"
            if total and done < total:
                text += f", about {_duration((total - done) / rate)} left"
        return text

    def _plain(self) -> None:
        now = (self.done, self.total)
        if now == self.last_said:
            return
        self.last_line, self.last_said = self.clock(), now
        print(self.line(), file=self.stream, flush=True)

    def close(self) -> None:
        """The last word: the bar's final state, or a plain line with the final count."""
        if self._rich is not None:
            self._rich.stop()
            self._rich = None
        elif self.parts and not self.tty:
            self._plain()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
