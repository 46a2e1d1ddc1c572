"""The outcome vocabulary: what can happen to one test variant in one job, and how outcomes
count.

One enum for the harness (which records them), the store (which keeps and counts them), the API
(which shows and filters them) and the spec gating rules. pytest's own outcomes come first; the
last three only a supervisor can see (a process that died, a test past its timeout, a test the
job never reached).

A test whose module fails to import or collect is an ``error`` with the collection error as its
message, as pytest itself reports it ("ERROR collecting"): a test that could not run because
something around it failed, counted and gated like a failure, unless its spec mode does not gate
(the mode the plan gave it, since no spec plugin saw it run). ``not_run`` is left for tests a
job cancelled or never reached, which stay neutral.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any


class Outcome(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"  # setup or teardown failed, or the test's module failed to collect
    SKIPPED = "skipped"
    XFAILED = "xfailed"  # expected to fail (a spec's xfail, or pytest's), and did
    XPASSED = "xpassed"  # expected to fail, and passed: a candidate for promotion
    CRASHED = "crashed"  # the test process died during the test
    TIMEOUT = "timeout"  # past the per-test timeout; the process was killed
    NOT_RUN = "not_run"  # cancelled, or never reached (never gates)

    @property
    def bucket(self) -> str:
        """CRCR's ``test_results`` bucket: passed, failed or skipped."""
        if self in PASSED:
            return "passed"
        if self in FAILED:
            return "failed"
        return "skipped"

    @property
    def ran(self) -> bool:
        """The test body executed (it was neither skipped nor left unrun)."""
        return self not in (Outcome.SKIPPED, Outcome.NOT_RUN)

    @property
    def as_expected(self) -> bool:
        """Per-test history: the run went the way its spec says (passed, or failed as xfail)."""
        return self in PASSED or self is Outcome.XFAILED


PASSED = frozenset({Outcome.PASSED, Outcome.XPASSED})
FAILED = frozenset({Outcome.FAILED, Outcome.ERROR, Outcome.CRASHED, Outcome.TIMEOUT})
SKIPPED = frozenset({Outcome.SKIPPED, Outcome.XFAILED, Outcome.NOT_RUN})

#: spec modes whose failures do not gate the job
NON_GATING_MODES = frozenset({"xfail"})


def tally(counts: Iterable[tuple[str, int]]) -> dict[str, int]:
    """CRCR's ``{passed, failed, skipped, total}`` from (outcome, count) pairs."""
    out = {"passed": 0, "failed": 0, "skipped": 0, "total": 0}
    for outcome, n in counts:
        out[Outcome(outcome).bucket] += n
        out["total"] += n
    return out


def tally_apart(counts: Iterable[tuple[str, int]]) -> dict[str, int]:
    """The API's counts: CRCR's buckets with the expected-failure outcomes kept apart
    (``xfailed`` is not counted as skipped, ``xpassed`` not as passed), so
    ``passed + failed + skipped + xfailed + xpassed == total``."""
    out = {"passed": 0, "failed": 0, "skipped": 0, "xfailed": 0, "xpassed": 0, "total": 0}
    for outcome, n in counts:
        o = Outcome(outcome)
        out[o.value if o in (Outcome.XFAILED, Outcome.XPASSED) else o.bucket] += n
        out["total"] += n
    return out


@dataclass
class TestOutcome:
    """One test's result as the harness records it and the store keeps it."""

    __test__ = False  # not a pytest class

    test_id: str
    outcome: Outcome
    duration_s: float = 0.0
    device_time_us: float | None = None
    message: str | None = None
    artifact_path: str | None = None
    # pytest user properties of the test (the testspecs plugin's spec_mode, spec_tags, ...)
    properties: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.outcome = Outcome(self.outcome)

    @property
    def spec_mode(self) -> str | None:
        return self.properties.get("mode") or self.properties.get("spec_mode")

    @property
    def tags(self) -> list[str]:
        tags = self.properties.get("spec_tags") or self.properties.get("tags") or []
        if isinstance(tags, str):  # the testspecs plugin writes "a,b"
            tags = [t for t in tags.split(",") if t]
        return list(tags)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
