"""pytest plugin that streams per-test progress to a JSON-lines file, crash-safely.

Enabled by ``-p spyre_stack.testing.progress`` with ``SPYRE_PROGRESS_FILE`` set. Each line is
flushed and fsync'ed before the next test starts, so when the process dies (a segfault or abort in
the device) the file still says which tests finished and which one was running.

Lines: ``{"event": "start", "nodeid": ...}`` before a test, then one ``{"event": "report", ...}``
per phase with ``when``, ``outcome``, ``duration`` and, from the spyre plugin, ``device_us``.
"""

from __future__ import annotations

import json
import os
from typing import IO, Any

import pytest

ENV = "SPYRE_PROGRESS_FILE"
_stream: IO[str] | None = None


def _write(record: dict[str, Any]) -> None:
    if _stream is None:
        return
    _stream.write(json.dumps(record) + "\n")
    _stream.flush()
    os.fsync(_stream.fileno())


def pytest_configure(config: pytest.Config) -> None:
    global _stream
    path = os.environ.get(ENV)
    if path:
        _stream = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the session


def pytest_unconfigure(config: pytest.Config) -> None:
    global _stream
    if _stream is not None:
        _stream.close()
        _stream = None


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _write({"event": "start", "nodeid": nodeid})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    props = dict(report.user_properties)
    outcome: str = report.outcome
    if getattr(report, "wasxfail", None) is not None:
        outcome = "xfailed" if report.skipped else "xpassed"
    _write(
        {
            "event": "report",
            "nodeid": report.nodeid,
            "when": report.when,
            "outcome": outcome,
            "duration": report.duration,
            "device_us": props.get("spyre_device_us"),
            "message": str(report.longrepr)[-2000:] if report.failed else "",
        }
    )
