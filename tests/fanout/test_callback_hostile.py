"""Hostile callbacks (issue #31): strings that are not UTF-8 without NUL, counts past their
column, OIDC tokens valid for years. Each is refused with a 4xx naming what was wrong, and
nothing is stored."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from wire.crcr import callback as crcr

SURROGATE = "\ud800"


class Caller:
    def __init__(self, bench: Any, issuer: Any, client_payload: dict[str, Any]) -> None:
        self.bench, self.issuer, self.client_payload = bench, issuer, client_payload

    def body(self) -> dict[str, Any]:
        built = crcr.build(
            event_type=self.client_payload["event_type"],
            delivery_id=self.client_payload["delivery_id"],
            payload=self.client_payload["payload"],
            status="completed",
            workflow_name="upstream-tests",
            url="https://github.com/org/down/actions/runs/77",
            run_id="77",
            run_attempt="1",
            job_name="test",
            completed_at=datetime.now(UTC),
            conclusion="success",
            test_results=crcr.TestCounts(passed=9, failed=1, skipped=0, total=10),
        )
        return {**built, "crcr_relay": dict(self.client_payload["crcr_relay"])}

    def post(self, body: dict[str, Any], **mint: Any) -> Any:
        token = self.issuer.mint("org/down", **mint)
        return self.bench.client.post(
            "/github/callback",
            content=json.dumps(body),
            headers={"Authorization": f"Bearer {token}"},
        )

    def jobs(self) -> int:
        from sqlalchemy import func, select

        from store.db import session_scope
        from store.models import Job

        with session_scope(self.bench.settings.database_url) as session:
            return int(session.scalar(select(func.count()).select_from(Job)) or 0)


@pytest.fixture
def caller(bench: Callable[..., Any], issuer: Any, example_events: Path) -> Caller:
    b = bench({"L2": ["org/down"]})
    payload = json.loads((example_events / "pull_request.opened.json").read_text())
    assert b.post("pull_request", payload, delivery_id="hostile-1").status_code == 202
    b.settle()
    (call,) = b.github.dispatches("org/down")
    return Caller(b, issuer, call.body["client_payload"])


CASES = [
    (
        "surrogate in delivery_id",
        ("delivery_id",),
        f"d{SURROGATE}",
        "delivery_id contains a lone surrogate",
    ),
    (
        "surrogate in run_id",
        ("workflow", "run_id"),
        SURROGATE,
        "workflow.run_id contains a lone surrogate",
    ),
    (
        "surrogate in job_name",
        ("workflow", "job_name"),
        f"test{SURROGATE}",
        "workflow.job_name contains a lone surrogate",
    ),
    (
        "NUL in job_name",
        ("workflow", "job_name"),
        "te\x00st",
        "workflow.job_name contains a NUL character",
    ),
    (
        "surrogate in the payload's head sha",
        ("payload", "head_sha"),
        SURROGATE,
        "payload.head_sha contains a lone surrogate",
    ),
    (
        "passed 2**80",
        ("workflow", "test_results", "passed"),
        2**80,
        "workflow.test_results.passed is out of range",
    ),
    (
        "passed 2**40",
        ("workflow", "test_results", "passed"),
        2**40,
        "workflow.test_results.passed: Input should be less than or equal to 2147483647",
    ),
    (
        "total -1",
        ("workflow", "test_results", "total"),
        -1,
        "workflow.test_results.total: Input should be greater than or equal to 0",
    ),
]


@pytest.mark.parametrize(("case", "path", "value", "reason"), CASES, ids=[c[0] for c in CASES])
def test_a_hostile_value_is_refused_and_nothing_stored(
    caller: Caller, case: str, path: tuple[str, ...], value: Any, reason: str
) -> None:
    body = caller.body()
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    response = caller.post(body)
    assert response.status_code == 400, response.text
    assert response.json()["error"].startswith("not a CRCR callback body: ")
    assert reason in response.json()["error"]
    assert caller.jobs() == 0
    good = caller.post(caller.body())
    assert (good.status_code, good.json()) == (200, {"ok": True, "status": "completed"})
    assert caller.jobs() == 1


@pytest.mark.parametrize(
    ("lifetime", "status"), [(600, 200), (3600, 200), (3601, 401), (10 * 365 * 86400, 401)]
)
def test_oidc_tokens_valid_longer_than_the_maximum_are_refused(
    caller: Caller, lifetime: int, status: int
) -> None:
    # iat is 5 seconds ago (the issuer's), so exp - iat is lifetime
    response = caller.post(caller.body(), expires_in=lifetime - 5)
    assert response.status_code == status, response.text
    if status == 401:
        assert response.json() == {"error": "the token's lifetime (exp - iat) is over 3600 seconds"}
        assert caller.jobs() == 0


def test_the_maximum_lifetime_is_a_setting(
    bench: Callable[..., Any], issuer: Any, example_events: Path
) -> None:
    b = bench({"L2": ["org/down"]}, oidc_max_lifetime_seconds=60)
    token = issuer.mint("org/down", expires_in=300)
    response = b.client.post(
        "/github/callback", content="{}", headers={"Authorization": f"Bearer {token}"}
    )
    assert (response.status_code, response.json()) == (
        401,
        {"error": "the token's lifetime (exp - iat) is over 60 seconds"},
    )
