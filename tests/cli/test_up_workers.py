"""`relay up`'s worker processes: nicer than the web server, and dying with it."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from cli import serve
from config.settings import Settings


def _niceness_of_child(tmp_path: Path, nice: int) -> int:
    out = tmp_path / f"nice{nice}.txt"
    code = f"import os, pathlib; pathlib.Path({str(out)!r}).write_text(str(os.nice(0)))"
    proc = serve._spawn([sys.executable, "-c", code], nice)
    assert proc.wait(timeout=60) == 0
    return int(out.read_text())


def test_workers_run_nicer_than_relay_up(tmp_path: Path) -> None:
    mine = os.nice(0)
    assert _niceness_of_child(tmp_path, 5) == min(mine + 5, 19)
    assert _niceness_of_child(tmp_path, 0) == mine


def test_the_default_niceness_is_a_setting() -> None:
    assert Settings().worker_nice == 5
    assert Settings(worker_nice=0).worker_nice == 0


def test_sigterm_stops_relay_up_and_every_worker_warmly(relay_up: Any, tmp_path: Path) -> None:
    """What a service manager's stop (or Ctrl-C) does: `relay up` stops its three workers and
    the beat itself (each a warm shutdown), then exits with the signal's code. The other tests'
    stacks are killed at teardown (tests/support/stack.py), so this is the one that checks it."""
    stack = relay_up.local(tmp_path)
    tree = stack.processes()
    assert len(tree) >= 1 + len(serve.WORKER_QUEUES) + 1  # relay up, its workers, the beat
    code = stack.stop(graceful=True)
    assert code == 128 + signal.SIGTERM, stack.log_tail()
    assert stack.log_path.read_text(errors="replace").count("Warm shutdown") == len(
        serve.WORKER_QUEUES
    ), stack.log_tail()
    assert stack.outlived == []  # nothing it started outlives it
