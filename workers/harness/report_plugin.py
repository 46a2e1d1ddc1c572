"""pytest plugin (``-p workers.harness.report_plugin --relay-events PATH``): one JSON line per event.

``{"kind": "start", "nodeid"}`` before a test runs, ``{"kind": "result", ...}`` when it finished
(outcome after other plugins rewrote it, folded by :mod:`testspecs.outcomes`, duration, the
device time the backend's plugin recorded in the user property ``--relay-device-time`` names,
truncated message, the full failure text as an artifact, user properties such as spec mode and
tags) and
``{"kind": "collect_error", ...}`` for modules that failed to import or collect (the exception
line first, the full text as an artifact). Lines are flushed at once:
if the process dies, everything before the line that was running is on disk.

A child is given node ids (``file::Class::test``); pytest collects all of a class's tests to find
them, and upstream's device-generic classes hold thousands (``TestCommonPRIVATEUSE1``: 16,717),
so collecting a class costs seconds for a shard of a few hundred. The plugin hides, from a
unittest class the child is given tests of by name only, the test methods it was not given (its
own and those it inherits) before pytest collects it: the same tests run, with the same ids, and
the rest are never built. A class also named whole (``file::Class``, or its file or folder) is
left alone; a class collected after one it inherits from was trimmed (or the same class again,
imported into another module) finds that one as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import unittest
from pathlib import Path
from typing import Any

import pytest

from testspecs.outcomes import fold

MESSAGE_LIMIT = 2000

_OPTION = "--relay-events"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("relay")
    group.addoption(
        _OPTION, dest="relay_events", default=None, help="write JSON-lines test events here"
    )
    group.addoption(
        "--relay-artifacts",
        dest="relay_artifacts",
        default=None,
        help="folder for full failure texts",
    )
    group.addoption(
        "--relay-device-time",
        dest="relay_device_time",
        default=None,
        help="the user property in which the backend's plugin records a test's device time (us)",
    )


class _Writer:
    def __init__(self, path: str, artifacts: str | None, device_time: str | None) -> None:
        self._file = open(path, "a", buffering=1)  # noqa: SIM115 - lives as long as the session
        self._artifacts = Path(artifacts) if artifacts else None
        self._device_time = device_time
        self._reports: dict[str, list[pytest.TestReport]] = {}

    def reopen(self, path: str, artifacts: str | None, device_time: str | None) -> None:
        """Write to ``path`` from now on (a module server's child, forked after collection)."""
        self._file.close()
        self._file = open(path, "a", buffering=1)  # noqa: SIM115 - lives as long as the session
        self._artifacts = Path(artifacts) if artifacts else None
        self._device_time = device_time

    def emit(self, **record: Any) -> None:
        self._file.write(json.dumps(record, default=str) + "\n")
        self._file.flush()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.emit(kind="start", nodeid=nodeid, t=time.time(), pid=os.getpid())

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._reports.setdefault(report.nodeid, []).append(report)

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        reports = self._reports.pop(nodeid, [])
        outcome, message, longrepr = _summarize(reports)
        artifact = self._artifact(nodeid, longrepr) if longrepr else None
        properties: dict[str, Any] = {}
        for rep in reports:
            for key, value in rep.user_properties:
                properties[key] = value
        device_us = properties.get(self._device_time) if self._device_time else None
        self.emit(
            kind="result",
            nodeid=nodeid,
            outcome=outcome,
            duration=sum(r.duration for r in reports),
            device_us=float(device_us) if device_us is not None else None,
            message=message,
            artifact=str(artifact) if artifact else None,
            properties=properties,
        )

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            text = str(report.longrepr)
            artifact = self._artifact(report.nodeid or "<session>", text)
            self.emit(
                kind="collect_error",
                nodeid=report.nodeid,
                message=_collect_message(text),
                artifact=str(artifact) if artifact else None,
            )

    def _artifact(self, nodeid: str, text: str) -> Path | None:
        if self._artifacts is None:
            return None
        self._artifacts.mkdir(parents=True, exist_ok=True)
        artifact = self._artifacts / (hashlib.sha1(nodeid.encode()).hexdigest()[:16] + ".txt")
        artifact.write_text(f"{nodeid}\n\n{text}\n")
        return artifact

    def close(self) -> None:
        self._file.close()


def _collect_message(text: str) -> str:
    """A collection error's message: its exception line (``E   ImportError: ...``, the first of
    the traceback's last ``E`` block) first, then as much of the text's end as fits."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    marked = [i for i, ln in enumerate(lines) if ln.startswith("E ")]
    first = marked[-1] if marked else len(lines) - 1
    while first - 1 in marked:
        first -= 1
    headline = (lines[first].removeprefix("E ").strip() if lines else "collection failed")[:300]
    room = MESSAGE_LIMIT - len(headline) - 2
    rest = text.strip()
    if len(rest) > room:
        rest = "..." + rest[len(rest) - room + 3 :]
    return f"{headline}\n\n{rest}".rstrip()


def _summarize(reports: list[pytest.TestReport]) -> tuple[str, str | None, str | None]:
    """Final outcome of one test from its setup/call/teardown reports, with the message of its
    first failure (or its skip reason, or for an expected failure the reason it was expected
    and how it failed) and the failure's full text."""
    outcome: str | None = None
    failed = None
    expected = None  # the report of an xfail (failed as expected) or xpass
    for rep in reports:
        outcome = fold(outcome, rep)
        if hasattr(rep, "wasxfail"):
            expected = expected or rep
        elif rep.failed or (rep.skipped and isinstance(rep.longrepr, tuple)):
            failed = failed or rep
    outcome = outcome or "passed"
    if outcome in ("xfailed", "xpassed") and expected is not None:
        return _expected_failure(outcome, expected)
    if failed is None:
        return outcome, None, None
    if isinstance(failed.longrepr, tuple):  # skip: (path, line, reason)
        return outcome, str(failed.longrepr[2]).removeprefix("Skipped: ")[:MESSAGE_LIMIT], None
    text = str(failed.longrepr)
    crash = getattr(getattr(failed.longrepr, "reprcrash", None), "message", None)
    return outcome, (crash or text)[:MESSAGE_LIMIT], text


def _expected_failure(outcome: str, rep: pytest.TestReport) -> tuple[str, str, str | None]:
    """``xfail (<why expected>): <how it failed>`` with the full failure text, or for an xpass
    what it was expected to fail for."""
    reason = str(getattr(rep, "wasxfail", "") or "").removeprefix("reason: ").strip()
    why = f" ({reason})" if reason else ""
    if outcome == "xpassed":
        return outcome, f"expected to fail{why}, but passed"[:MESSAGE_LIMIT], None
    longrepr = rep.longrepr
    if isinstance(longrepr, tuple):  # an xfail that skipped rather than ran: (path, line, text)
        return outcome, f"xfail{why}: {longrepr[2]}"[:MESSAGE_LIMIT], None
    text = str(longrepr) if longrepr else None
    crash = getattr(getattr(longrepr, "reprcrash", None), "message", None)
    return outcome, f"xfail{why}: {crash or text or 'failed as expected'}"[:MESSAGE_LIMIT], text


class _OnlyRequested:
    """Trims a unittest class to the tests of it the child was given by name before pytest builds
    its items (see the module's docstring)."""

    def __init__(self, config: pytest.Config) -> None:
        self.names: dict[tuple[Path, str], set[str]] = {}
        self.whole: set[tuple[Path, str]] = set()
        self.paths: set[Path] = set()  # files or folders named without a class
        # what is hidden of each class trimmed so far, kept until the collection ends: another
        # class collected later may be the same class or inherit from it
        self.hidden: dict[type, dict[str, Any]] = {}
        here = Path(config.invocation_params.dir)
        for arg in config.args:
            path, *parts = str(arg).split("::")
            resolved = (here / path).resolve()
            if not parts:
                self.paths.add(resolved)
            elif len(parts) == 1:
                self.whole.add((resolved, parts[0]))
            elif len(parts) == 2 and "[" not in parts[1]:
                self.names.setdefault((resolved, parts[0]), set()).add(parts[1])
            else:  # a nested class or a parametrized id: that class is not trimmed
                self.whole.add((resolved, parts[0]))

    def pytest_collectstart(self, collector: pytest.Collector) -> None:
        from _pytest.unittest import UnitTestCase

        if not isinstance(collector, UnitTestCase):
            return
        cls = collector.obj
        if not (isinstance(cls, type) and issubclass(cls, unittest.TestCase)):
            return
        for base in cls.__mro__:  # this class, or one it inherits from, trimmed for another id
            if base in self.hidden:
                _put_back(base, self.hidden.pop(base))
        path = collector.path.resolve()
        key = (path, collector.name)
        wanted = self.names.get(key)
        if not wanted or key in self.whole or any(p == path or p in path.parents for p in self.paths):
            return
        self.hidden[cls] = _hide_tests(cls, keep=wanted)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # a test may call the one it overrides: a class that the class of a test inherits from is
        # put back; the tests hidden of the others are let go (kept, the 16,711 of
        # TestCommonPRIVATEUSE1 cost the rest of a child about a CPU-second of garbage collection)
        bases: set[type] = set()
        for item in session.items:
            cls = getattr(item, "cls", None)
            if isinstance(cls, type):
                bases.update(cls.__mro__[1:])
        for cls in bases & self.hidden.keys():
            _put_back(cls, self.hidden.pop(cls))
        self.hidden.clear()


_INHERITED = object()  # what a hidden name was on the class itself: nothing, it was inherited


def _hide_tests(cls: type[unittest.TestCase], *, keep: set[str]) -> dict[str, Any]:
    """Hide from unittest's loader (which pytest asks) every test method of ``cls`` but ``keep``:
    those defined on it and those it inherits, each shadowed on ``cls`` alone by a None (the loader
    passes over what is not callable; the bases, which other classes share, are not touched).
    Returns what each hidden name was on ``cls`` itself, for :func:`_put_back`."""
    hidden: dict[str, Any] = {}
    for name in unittest.TestLoader().getTestCaseNames(cls):
        if name not in keep:
            hidden[name] = vars(cls).get(name, _INHERITED)
            setattr(cls, name, None)
    return hidden


def _put_back(cls: type, hidden: dict[str, Any]) -> None:
    for name, value in hidden.items():
        if value is _INHERITED:
            delattr(cls, name)
        else:
            setattr(cls, name, value)


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("relay_events")
    if path:
        config.pluginmanager.register(_OnlyRequested(config), "relay-only-requested")
        writer = _Writer(
            path, config.getoption("relay_artifacts"), config.getoption("relay_device_time")
        )
        config.pluginmanager.register(writer, "relay-events-writer")
        config.add_cleanup(writer.close)
