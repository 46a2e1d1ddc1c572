"""Hostile values at the edge (issue #31): a lone surrogate or a NUL in a string, an integer past
its column, a date out of range, an id past 64 bits. Each is refused with a 4xx naming what was
wrong, or (a webhook, whose raw body is kept) stored as ``rejected`` with the reason: never a
5xx, never a half-stored row."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

SURROGATE = "\ud800"
BIG = 2**63  # one past SQLite's INTEGER and PostgreSQL's BIGINT


def _event(example_events: Path, name: str) -> dict[str, Any]:
    return json.loads((example_events / f"{name}.json").read_text())


def _set(payload: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    target = payload
    *parents, leaf = dotted.split(".")
    for key in parents:
        target = target[key]
    target[leaf] = value
    return payload


# (case, event, example, the field set to a lone surrogate, the column that stays empty)
OWN_COLUMNS = [
    ("action", "pull_request", "pull_request.opened", "action", "action"),
    ("head sha", "pull_request", "pull_request.opened", "pull_request.head.sha", "head_sha"),
    ("base sha", "pull_request", "pull_request.opened", "pull_request.base.sha", "base_sha"),
    ("push before", "push", "push.main", "before", "base_sha"),
    ("push after", "push", "push.main", "after", "head_sha"),
    ("check_run head sha", "check_run", "check_run.rerequested", "check_run.head_sha", "head_sha"),
    (
        "dispatch's delivery id",
        "repository_dispatch",
        "repository_dispatch.pull_request",
        "client_payload.delivery_id",
        "upstream_delivery_id",
    ),
]


@pytest.mark.parametrize(
    ("case", "event", "example", "field", "column"), OWN_COLUMNS, ids=[c[0] for c in OWN_COLUMNS]
)
@pytest.mark.parametrize("bad", [SURROGATE, "a\x00b"], ids=["surrogate", "nul"])
def test_a_bad_string_in_a_field_with_its_own_column_is_stored_rejected(
    webhook: Any,
    example_events: Path,
    case: str,
    event: str,
    example: str,
    field: str,
    column: str,
    bad: str,
) -> None:
    payload = _set(_event(example_events, example), field, bad)
    if event == "repository_dispatch":
        payload["client_payload"]["payload"]["repository"]["full_name"] = webhook.upstream
    else:
        payload["repository"]["full_name"] = webhook.upstream
    body = json.dumps(payload).encode()  # ensure_ascii: the surrogate as its \ud800 escape
    delivery_id = str(uuid.uuid4())
    response = webhook.post(event, body, delivery_id=delivery_id)
    assert response.status_code == 422, response.text
    assert response.json()["rejected"] is True
    row = webhook.stored(delivery_id)
    assert row is not None, "the docs promise a rejected delivery is stored anyway"
    assert (row.state, row.raw_body, row.normalized) == ("rejected", body, None)
    assert getattr(row, column) is None
    assert ("surrogate" if bad == SURROGATE else "NUL") in row.last_error
    assert webhook.enqueued.calls == []


@pytest.mark.parametrize(
    ("sent", "status", "stored"),
    [("über-1".encode(), 202, "über-1"), (b"\xff\xfe-1", 400, None)],
    ids=["utf-8", "not utf-8"],
)
def test_a_delivery_id_keeps_its_utf8_bytes(
    webhook: Any, served: Any, example_events: Path, sent: bytes, status: int, stored: str | None
) -> None:
    """Over real HTTP (the TestClient re-encodes header bytes): a UTF-8 delivery id is stored
    as the text it encodes, not as its bytes read as latin-1 (``Ã¼``); one that is not UTF-8
    is refused."""
    import httpx

    from relay.app import create_app

    payload = _event(example_events, "pull_request.opened")
    payload["repository"]["full_name"] = webhook.upstream
    body = json.dumps(payload).encode()
    headers: dict[str, Any] = webhook.headers("pull_request", body)
    headers["X-GitHub-Delivery"] = sent
    with served(create_app(webhook.settings)) as url:
        response = httpx.post(f"{url}{webhook.path}", content=body, headers=headers, timeout=30)
    assert response.status_code == status, response.text
    if stored is None:
        assert response.json() == {
            "error": "X-GitHub-Delivery must be at most 100 printable characters"
        }
        assert webhook.count() == 0
    else:
        assert response.json()["delivery_id"] == stored
        assert webhook.stored(stored) is not None
        assert webhook.stored(sent.decode("latin-1")) is None


@pytest.mark.parametrize(
    "path",
    [
        f"/api/v1/hud/runs/{BIG}",
        f"/api/v1/hud/runs/{BIG}/progress",
        f"/api/v1/hud/runs/{BIG}/results",
        f"/runs/{BIG}",
        f"/runs/1/artifacts/{BIG}",
        f"/runs/{BIG}/artifacts/1",
        f"/replays/{BIG}",
        f"/api/v1/hud/runs/{-BIG - 1}",
    ],
)
def test_ids_past_64_bits_are_refused(client: Any, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 422, response.text
    assert "job_id" in response.text or "result_id" in response.text


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/hud/health?at=0001-01-01T00:00:00",
        "/api/v1/hud/health?at=9999-12-31T23:59:59",
        "/downstreams?at=0001-01-01T00:00:00",
        "/downstreams?at=9999-12-31T23:59:59",
    ],
)
def test_dates_out_of_range_are_refused(client: Any, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 422, response.text
    assert "at" in response.text


def test_dates_in_range_answer(client: Any) -> None:
    assert client.get("/api/v1/hud/health?at=2026-01-01T00:00:00").status_code == 200
    assert client.get("/downstreams?at=2026-01-01T00:00:00").status_code == 200


@pytest.mark.parametrize("pr", ["%C2%B2", "%D9%A3", "1%00"])
def test_a_grid_pr_that_only_looks_like_digits_is_refused(client: Any, pr: str) -> None:
    response = client.get(f"/grid?pr={pr}")
    assert response.status_code == 422
    assert "PR must be a number" in response.text


def test_the_operator_retry_refuses_ids_past_64_bits(make_client: Any, app_settings: Any) -> None:
    settings = app_settings.model_copy(update={"operator_token": SecretStr("op-token")})
    client = make_client(settings)
    response = client.post(
        f"/api/v1/dispatches/{BIG}/retry", headers={"Authorization": "Bearer op-token"}
    )
    assert response.status_code == 422
    assert "dispatch_id" in response.json()["detail"]


# ------------------------------------------------------------------ HUD ingest (/api/crcr/results)


def _envelope() -> dict[str, Any]:
    from wire.crcr.callback import TestCounts, build, hud_envelope

    body = build(
        event_type="pull_request",
        delivery_id="d-1",
        payload={"number": 7},
        status="completed",
        workflow_name="ci",
        url="https://example.invalid/run",
        run_id="9",
        run_attempt="1",
        job_name="test",
        completed_at=__import__("datetime").datetime(2026, 1, 1),
        conclusion="success",
        test_results=TestCounts(passed=1, total=1),
    )
    return hud_envelope(
        verified_repo="org/down",
        level="L2",
        callback_body=body,
        queue_time=1.0,
        execution_time=2.0,
    )


HUD_CASES = [
    ("surrogate repo", "trusted.verified_repo", f"org/d{SURROGATE}", "trusted.verified_repo"),
    (
        "surrogate delivery",
        "untrusted.callback_payload.delivery_id",
        SURROGATE,
        "callback_payload.delivery_id",
    ),
    ("nul job", "untrusted.callback_payload.workflow.job_name", "a\x00b", "workflow.job_name"),
    (
        "count 2**80",
        "untrusted.callback_payload.workflow.test_results.passed",
        2**80,
        "test_results.passed",
    ),
    ("pr 2**80", "untrusted.callback_payload.payload.number", 2**80, "payload.number"),
    (
        "surrogate failed test",
        "untrusted.callback_payload.workflow.failed_tests",
        [f"t{SURROGATE}"],
        "workflow.failed_tests",
    ),
]


@pytest.mark.parametrize(
    ("case", "field", "value", "named"), HUD_CASES, ids=[c[0] for c in HUD_CASES]
)
def test_hud_ingest_refuses_values_its_columns_cannot_hold(
    make_client: Any, app_settings: Any, case: str, field: str, value: Any, named: str
) -> None:
    client = make_client(app_settings.model_copy(update={"hud_bot_token": SecretStr("bot")}))
    envelope = _set(_envelope(), field, value)
    response = client.post(
        "/api/crcr/results", content=json.dumps(envelope), headers={"x-hud-internal-bot": "bot"}
    )
    assert response.status_code == 400, response.text
    assert named in response.json()["error"]
    good = client.post(
        "/api/crcr/results", content=json.dumps(_envelope()), headers={"x-hud-internal-bot": "bot"}
    )
    assert good.status_code == 201 and good.json()["id"] == 1  # nothing was stored before


# ------------------------------------------------------------------ the push's file lists


@pytest.mark.parametrize(
    "commits",
    [
        [{"added": 7}],
        [{"removed": True}],
        [{"modified": "setup.py"}],
        [{"added": ["a.py", 3]}],
        [{"added": {"a.py": 1}}],
        [7],
        "commits",
    ],
)
def test_a_push_whose_file_lists_are_not_lists_of_strings_names_no_files(commits: Any) -> None:
    from wire.github.events import push_files

    assert push_files({"commits": commits}) is None


def test_a_push_with_lists_of_strings_names_its_files() -> None:
    from wire.github.events import push_files

    commits = [{"added": ["a.py"], "modified": ["b.py", "a.py"]}, {"removed": ["c.py"]}]
    assert push_files({"commits": commits}) == ["a.py", "b.py", "c.py"]
