"""``pytest -p testspecs.messages_plugin --messages-out FILE``: each test's outcome and the first
line of its failure (the exception and its message, not the traceback's last file line), as
``{node id: [outcome, message or null]}``. ``relay specs promote`` reads failures with it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from testspecs.outcomes import fold

_SEEN: dict[str, list[Any]] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--messages-out", default=None, help="write {node id: [outcome, message]}")
    parser.addoption(
        "--messages-only", default=None, help="file of node ids, one a line: run only those"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    path = config.getoption("--messages-only")
    if not path:
        return
    wanted = set(Path(path).read_text(encoding="utf-8").split())
    dropped = [item for item in items if item.nodeid not in wanted]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = [item for item in items if item.nodeid in wanted]


def _message(report: pytest.TestReport) -> str | None:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = getattr(crash, "message", None) or (report.longreprtext or "")
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else None


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    previous = _SEEN.get(report.nodeid)
    outcome = fold(previous[0] if previous else None, report)
    message = previous[1] if previous else None
    if report.failed or (report.skipped and report.when == "call"):
        message = message or _message(report)
    _SEEN[report.nodeid] = [outcome, message]


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = session.config.getoption("--messages-out")
    if out:
        Path(out).write_text(json.dumps(_SEEN, sort_keys=True), encoding="utf-8")
