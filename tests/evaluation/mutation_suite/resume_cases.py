"""Six tests for the resumable ground-truth runs (run by tests/evaluation/test_runparts.py, never
collected by ``make test`` itself: the name does not match ``test_*.py``).

Each test notes its name in ``$RESUME_CASES_DIR/ran.txt``; ``test_3`` kills its own process
while ``$RESUME_CASES_DIR/crash`` exists (a run killed half-way)."""

import os
import signal
from pathlib import Path


def _ran(name: str) -> None:
    folder = Path(os.environ["RESUME_CASES_DIR"])
    with open(folder / "ran.txt", "a", encoding="utf-8") as out:
        out.write(name + "\n")
    if name == "test_3" and (folder / "crash").exists():
        os.kill(os.getpid(), signal.SIGKILL)


def test_0():
    _ran("test_0")


def test_1():
    _ran("test_1")


def test_2():
    _ran("test_2")


def test_3():
    _ran("test_3")


def test_4():
    _ran("test_4")


def test_5():
    _ran("test_5")
    raise AssertionError("test_5 fails, and says so")
