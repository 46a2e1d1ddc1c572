"""How pytest's reports of one test become one outcome: the one implementation every plugin of
ours uses (the spec plugin's report, the inventory's outcome recorder, the harness's events).

A test has up to three reports (setup, call, teardown), after the spec plugin rewrote them by
mode. The outcome names are the store's vocabulary (``store.outcomes.Outcome``): passed, failed,
error, skipped, xfailed, xpassed.
"""

from __future__ import annotations

from typing import Any

FAILURES = ("failed", "error")


def phase_outcome(report: Any) -> str:
    """The outcome one report says: ``wasxfail`` makes a pass an xpass and a skip an xfail; a
    failure outside the test's call is an error."""
    if hasattr(report, "wasxfail"):
        return "xpassed" if report.passed else "xfailed"
    if report.failed:
        return "failed" if report.when == "call" else "error"
    return str(report.outcome)  # passed or skipped


def fold(outcome: str | None, report: Any) -> str:
    """The test's outcome so far (None before its first report) after one more report: the call
    decides, a failure in setup or teardown makes an error, and the first failure stays."""
    this = phase_outcome(report)
    if outcome in FAILURES:
        return outcome
    if outcome is None or report.when == "call" or this in FAILURES:
        return this
    return outcome
