"""POST /api/crcr/results: the relay -> HUD envelope stored with counts, failed tests and the
artifact URL; a later envelope fills only non-null fields; 2 MB cap; bad envelopes refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from wire.crcr.callback import TestCounts, build, hud_envelope

TOKEN = {"x-hud-internal-bot": "hud-bot-secret"}


def _envelope(status: str, **kw: Any) -> dict[str, Any]:
    from datetime import UTC, datetime

    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    body = build(
        event_type="pull_request",
        delivery_id="d-1",
        payload={
            "repository": {"full_name": "pytorch/pytorch"},
            "pull_request": {"number": 42, "head": {"sha": "a" * 40}},
        },
        status=status,
        workflow_name="upstream",
        url="https://ci/run/5",
        run_id="5",  # type: ignore[arg-type]
        run_attempt="1",
        job_name="test",
        started_at=now,
        completed_at=now,
        conclusion="failure" if status == "completed" else None,
        test_results=TestCounts(passed=8, failed=2, skipped=0, total=10)
        if status == "completed"
        else None,
        artifact_url="https://ci/artifacts/5" if status == "completed" else None,
    )
    if status == "completed":
        body["workflow"]["failed_tests"] = ["test/a.py::T::test_x", "test/b.py::T::test_y"]
    return hud_envelope(
        verified_repo="org/down",
        level="L2",
        callback_body=body,
        queue_time=kw.get("queue_time"),
        execution_time=kw.get("execution_time"),
    )


def test_envelopes_fill_one_row(bench: Callable[..., Any]) -> None:
    from store import crcr_results
    from store.db import session_scope

    b = bench({"L2": ["org/down"]}, hud_bot_token="hud-bot-secret")
    first = b.client.post(
        "/api/crcr/results", json=_envelope("in_progress", queue_time=12.5), headers=TOKEN
    )
    assert first.status_code == 201, first.text
    assert first.json()["key"] == "org/down/d-1/upstream/test/5-1"
    second = b.client.post(
        "/api/crcr/results", json=_envelope("completed", execution_time=300.0), headers=TOKEN
    )
    assert (second.status_code, second.json()["id"]) == (200, first.json()["id"])
    with session_scope(b.settings.database_url) as session:
        (row,) = crcr_results.listing(session)
        assert (row.status, row.conclusion, row.queue_time, row.execution_time) == (
            "completed",
            "failure",
            12.5,
            300.0,
        )  # completed did not erase queue_time
        assert (row.pr_number, row.head_sha, row.tests_failed, row.tests_total) == (
            42,
            "a" * 40,
            2,
            10,
        )
        assert row.failed_tests == ["test/a.py::T::test_x", "test/b.py::T::test_y"]
        assert row.artifact_url == "https://ci/artifacts/5"
        assert (row.downstream_level, row.upstream_repo) == ("L2", "pytorch/pytorch")


def test_refusals(bench: Callable[..., Any]) -> None:
    from store import crcr_results
    from store.db import session_scope

    b = bench({"L2": ["org/down"]}, hud_bot_token="hud-bot-secret")
    url = "/api/crcr/results"
    big = b"{" + b" " * (2 * 1024 * 1024) + b"}"
    cases = [
        (b.client.post(url, content=big, headers=TOKEN), 413, "body exceeds 2097152 bytes"),
        (b.client.post(url, content=b"{nope", headers=TOKEN), 400, "malformed JSON"),
        (
            b.client.post(url, json={"trusted": {}}, headers=TOKEN),
            400,
            "the envelope needs objects 'trusted' and 'untrusted'",
        ),
        (
            b.client.post(
                url, json={"trusted": {"verified_repo": "x"}, "untrusted": {}}, headers=TOKEN
            ),
            400,
            "trusted.verified_repo must be an owner/name repository",
        ),
    ]
    for answer, status, error in cases:
        assert (answer.status_code, answer.json()) == (status, {"error": error})
    with session_scope(b.settings.database_url) as session:
        assert crcr_results.listing(session) == []
