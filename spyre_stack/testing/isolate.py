"""Crash isolation: run tests in pytest subprocesses and survive a crash in one of them.

A test that crashes the interpreter (the simulated device aborts, a segfault in a kernel) would
take every later test of the same process with it. :func:`run_isolated` prevents that:

1. it runs ``pytest`` in a child process with the :mod:`.progress` plugin, which writes a
   crash-safe line before and after every test;
2. if the child dies, the test that started but never finished is recorded as ``crashed`` (with
   the exit signal) and the same selection runs again in a **fresh process** with every test
   that already has a result deselected (``--deselect`` lines in an ``@file`` argument list);
3. this repeats until a process runs to its end, or ``max_restarts`` is exhausted (``gave_up``
   then says why tests may be missing).

The result lists every test id with its outcome, duration and simulated device time, and how many
processes it took. Workers build their shard runs on this (the test ids are upstream's).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class TestOutcome:
    nodeid: str
    outcome: str  # passed failed skipped xfailed xpassed error crashed not_run
    duration: float = 0.0
    device_us: float | None = None
    message: str = ""


@dataclass
class IsolatedRun:
    outcomes: dict[str, TestOutcome] = field(default_factory=dict)
    processes: int = 0
    return_codes: list[int] = field(default_factory=list)
    gave_up: str = ""  # why tests may be missing (a crash before any test, too many restarts)
    output_tail: str = ""

    def count(self, outcome: str) -> int:
        return sum(1 for o in self.outcomes.values() if o.outcome == outcome)

    def summary(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for o in self.outcomes.values():
            counts[o.outcome] = counts.get(o.outcome, 0) + 1
        return dict(sorted(counts.items()))


def run_isolated(
    args: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    plugins: Sequence[str] = ("spyre_stack.testing.pytest_plugin",),
    max_restarts: int = 20,
    timeout: float = 1800,
) -> IsolatedRun:
    """Run the tests selected by the pytest ``args``, isolating crashes (see module doc)."""
    full_env = {**os.environ, **(env or {})}
    plugin_args = [a for p in ("spyre_stack.testing.progress", *plugins) for a in ("-p", p)]
    result = IsolatedRun()
    with tempfile.TemporaryDirectory(prefix="spyre-isolate-") as tmp:
        while True:
            if result.processes > max_restarts:
                result.gave_up = f"gave up after {max_restarts} restarts"
                break
            progress = Path(tmp) / f"progress-{result.processes}.jsonl"
            args_file = Path(tmp) / f"args-{result.processes}.txt"
            done = [f"--deselect={nodeid}" for nodeid in result.outcomes]
            args_file.write_text("\n".join([*args, *done]) + "\n")
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    *plugin_args,
                    f"@{args_file}",
                ],
                cwd=cwd,
                env={**full_env, "SPYRE_PROGRESS_FILE": str(progress)},
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            result.processes += 1
            result.return_codes.append(proc.returncode)
            result.output_tail = (proc.stdout + proc.stderr)[-3000:]
            started = _read_progress(progress, result)
            unfinished = [n for n in started if n not in result.outcomes]
            if not unfinished and proc.returncode >= 0:
                break  # the process ran to its end: every selected test has a result
            crash = _describe(proc.returncode)
            for nodeid in unfinished:
                result.outcomes[nodeid] = TestOutcome(
                    nodeid, "crashed", message=f"{crash}\n{proc.stderr[-2000:]}"
                )
            if not started:
                result.gave_up = f"{crash} before any test started"
                break
    return result


def _describe(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"process killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"process killed by signal {-returncode}"
    return f"process exited with status {returncode} before the test finished"


def _read_progress(path: Path, result: IsolatedRun) -> list[str]:
    started: list[str] = []
    if not path.exists():
        return started
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by the crash
        nodeid = rec["nodeid"]
        if rec["event"] == "start":
            started.append(nodeid)
            continue
        outcome, when = rec["outcome"], rec["when"]
        if when == "call" or outcome in ("failed", "skipped") or rec["outcome"] == "xfailed":
            if when != "call" and outcome == "failed":
                outcome = "error"
            prev = result.outcomes.get(nodeid)
            if prev is None or prev.outcome == "passed":
                result.outcomes[nodeid] = TestOutcome(
                    nodeid,
                    outcome,
                    rec.get("duration") or 0.0,
                    rec.get("device_us"),
                    rec.get("message", ""),
                )
    return started
