"""What every `relay` command shares: its help and its standard output.

- Option help names a value's type (`<path>`, `<int>`) only for options that take a value: a flag
  (`--json`, `--static`, `--help`) shows none.
- Every default path a help shows is inside the project or the user's cache: a user's clone has no
  ../shared beside it (PyTorch's CI statistics come from RELAY_CI_STATS, else the cache).
- A reader that closes the pipe early (`relay tests list | head`) is not an error: the command
  exits 0 without a traceback or a message.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from cli import build_app


def _commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command's path under ``group`` (typer's own click: groups have ``commands``)."""
    for name, command in sorted(group.commands.items()):
        yield (*path, name)
        if hasattr(command, "commands"):
            yield from _commands(command, (*path, name))


def test_help_shows_no_type_for_flags() -> None:
    app = build_app()
    paths = list(_commands(typer.main.get_command(app)))
    assert ("specs", "lint") in paths and ("tests", "list") in paths and ("up",) in paths
    runner = CliRunner()
    for path in paths:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "<bool>" not in result.output, (path, result.output)
    lint = runner.invoke(app, ["specs", "lint", "--help"]).output
    assert "--tests-root <path>" in " ".join(lint.split())  # a value still shows its type


HELPS = """
import typer
from typer.testing import CliRunner
from cli import build_app
app = build_app()
def walk(group, path=()):
    for name, command in sorted(group.commands.items()):
        yield (*path, name)
        if hasattr(command, "commands"):
            yield from walk(command, (*path, name))
for path in walk(typer.main.get_command(app)):
    out = CliRunner().invoke(app, [*path, "--help"], terminal_width=400).output
    print(" ".join(path), "::", " ".join(out.split()))
"""


def test_no_default_path_outside_the_project_or_the_users_cache(tmp_path: Path) -> None:
    """As on a user's machine: no RELAY_CI_STATS (the test session sets it to tests/data/no-ci-stats)
    and a home of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env["HOME"] = str(tmp_path)
    out = subprocess.run(
        [sys.executable, "-c", HELPS],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    helps = dict(line.split(" :: ", 1) for line in out.splitlines() if " :: " in line)
    assert {"replay", "select", "eval", "tests count", "tests list"} <= set(helps)
    outside = {cmd: text for cmd, text in helps.items() if "shared/" in text}
    assert not outside, outside
    stats = f"[default: {tmp_path}/.cache/crcr-relay/pytorch-ci-stats/"
    for cmd in ("replay", "select", "eval"):
        assert stats + "td_heuristic_profiling.json]" in helps[cmd], helps[cmd]
    for cmd in ("tests count", "tests list"):
        assert stats + "test-times.json]" in helps[cmd], helps[cmd]


def _reader_gone(*args: str) -> tuple[int, str]:
    """Run `relay ARGS` with its reader gone before it writes (exit status, stderr)."""
    with subprocess.Popen(
        [sys.executable, "-m", "cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        err = proc.stderr.read().decode()
        return proc.wait(timeout=120), err


def test_a_reader_closing_the_pipe_is_not_an_error() -> None:
    """Its first line meets a closed pipe, as the tail of `relay tests list | head` does once
    head has its ten lines."""
    assert _reader_gone("device", "ops", "native") == (0, "")


def test_a_failing_command_still_fails_when_its_reader_left() -> None:
    """Only the closed pipe is forgiven: a command that fails keeps its exit status."""
    assert _reader_gone("device", "ops", "nonsense") == (
        2,
        "error: unknown status 'nonsense' (one of native, fallback, unsupported)\n",
    )
