"""cli.progress: a bar with the rate and the time left on a terminal, sparse plain lines on
anything else (CI logs, pipes), the sum over the parts a library reports."""

from __future__ import annotations

import io

from cli.progress import ProgressBar


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_are_sparse_and_carry_rate_and_time_left() -> None:
    out, clock = io.StringIO(), Clock()
    with ProgressBar("ground-truth runs", stream=out, tty=False, clock=clock) as bar:
        bar.update("baseline", 0, 100)  # counting begins: a first line
        for t, done in ((10, 20), (20, 40), (31, 62), (45, 90)):
            clock.now = 1000 + t
            bar.update("baseline", done, 100)
        clock.now = 1050
        bar.update("baseline", 100, 100)
    assert out.getvalue().splitlines() == [
        "ground-truth runs: 0 of 100 tests (0 %), 0 s elapsed",
        # 30 s after the first line: 62 tests in 31 s is 2.0/s, 38 left: about 19 s
        "ground-truth runs: 62 of 100 tests (62 %), 31 s elapsed, 2.0 tests/s, about 19 s left",
        # closing says where it ended, whatever the interval
        "ground-truth runs: 100 of 100 tests (100 %), 50 s elapsed, 2.0 tests/s",
    ]


def test_parts_add_up_and_long_waits_read_in_minutes_and_hours() -> None:
    out, clock = io.StringIO(), Clock()
    bar = ProgressBar("eval", stream=out, tty=False, clock=clock, every=60)
    bar.update("F.relu", 0, 1000)
    bar.update("F.gelu", 0, 9000)  # within the interval: no line
    clock.now += 120
    bar.update("F.relu", 1000, 1000)
    bar.update("F.gelu", 200, 9000)  # still within the interval of the line just printed
    clock.now += 60
    bar.update("F.gelu", 800, 9000)
    assert (bar.done, bar.total) == (1800, 10000)
    assert out.getvalue().splitlines() == [
        "eval: 0 of 1,000 tests (0 %), 0 s elapsed",
        "eval: 1,000 of 10,000 tests (10 %), 2 min 00 s elapsed, 8.3 tests/s, about 18 min 00 s left",
        "eval: 1,800 of 10,000 tests (18 %), 3 min 00 s elapsed, 10.0 tests/s, about 13 min 40 s left",
    ]
    clock.now += 3 * 3600
    assert bar.line().endswith("3 h 03 min elapsed, 0.2 tests/s, about 13 h 53 min left")


def test_a_run_resumed_from_its_cache_counts_its_rate_from_where_it_began() -> None:
    out, clock = io.StringIO(), Clock()
    bar = ProgressBar("collecting", unit="files", stream=out, tty=False, clock=clock)
    bar.update("collect", 500, 1000)
    clock.now += 100
    bar.update("collect", 700, 1000)
    assert bar.line() == (
        "collecting: 700 of 1,000 files (70 %), 1 min 40 s elapsed, 2.0 files/s, "
        "about 2 min 30 s left"
    )


def test_nothing_counted_prints_nothing() -> None:
    out = io.StringIO()
    with ProgressBar("collecting", stream=out, tty=False):
        pass  # a cache hit: no collection, no line
    with ProgressBar("collecting", stream=out, tty=True):
        pass
    assert out.getvalue() == ""


def test_a_terminal_gets_a_bar_with_the_rate_and_the_time_left() -> None:
    out, clock = io.StringIO(), Clock()
    with ProgressBar("replay 2.13 -> 2.14", stream=out, tty=True, clock=clock) as bar:
        for done in (0, 50, 100):
            bar.update("run", done, 400)
            clock.now += 10
    text = out.getvalue()
    assert "\x1b[" in text  # drawn for a terminal (colours, cursor movement)
    assert "replay 2.13 -> 2.14" in text and "100/400" in text
    assert "━" in text  # the bar
    # 50 tests every 10 s: 5.0 tests/s, 300 left: one minute
    assert "5.0 tests/s" in text and "elapsed" in text and "left \x1b[36m0:01:00" in text
