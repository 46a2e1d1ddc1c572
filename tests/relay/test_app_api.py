"""The health and deliveries answers of the status API (``/healthz``, ``/readyz``,
``/api/v1/deliveries``; its jobs: ``test_app_api_jobs.py``, ``test_app_api_selection.py``) in
process: the app from ``create_app`` on a fresh SQLite database, with rows written through the
store's own functions (and deliveries through the webhook)."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

DELIVERY_FIELDS = {
    "delivery_id",
    "event",
    "action",
    "repo",
    "source",
    "upstream_delivery_id",
    "pr_number",
    "head_sha",
    "base_sha",
    "received_at",
    "state",
    "attempts",
    "last_error",
    "processed_at",
    "body_sha256",
    "normalized",
    "job_ids",
    "links",
}


# ----------------------------------------------------------------------------- health


def test_healthz(client: Any) -> None:
    from relay.app import VERSION

    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"ok": True, "version": VERSION}


def test_readyz_with_the_database_and_the_broker_reachable(client: Any) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200, response.text
    assert response.json() == {
        "ok": True,
        "database": {"ok": True, "detail": "ok"},
        "broker": {"ok": True, "detail": "ok"},
    }


def test_readyz_is_503_when_the_broker_is_unreachable(
    make_client: Any, app_settings: Any, free_port: Any
) -> None:
    settings = app_settings.model_copy(update={"broker_url": f"redis://127.0.0.1:{free_port()}/0"})
    response = make_client(settings).get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["ok"] is False
    assert body["database"] == {"ok": True, "detail": "ok"}
    assert body["broker"]["ok"] is False
    assert "Error" in body["broker"]["detail"]  # the exception's type and message


def test_readyz_is_503_when_the_database_is_unreachable(
    make_client: Any, app_settings: Any, free_port: Any
) -> None:
    missing = f"postgresql+psycopg://relay@127.0.0.1:{free_port()}/relay"  # nothing listens
    response = make_client(app_settings.model_copy(update={"database_url": missing})).get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["ok"] is False
    assert body["database"]["ok"] is False
    assert body["database"]["detail"].startswith("OperationalError: ")
    assert body["broker"] == {"ok": True, "detail": "ok"}


# ----------------------------------------------------------------------------- deliveries


@pytest.fixture
def three(webhook: Any, github_fixtures: Path) -> list[str]:
    """Three deliveries through the webhook: a pull request, a push, another pull request."""
    pr = (github_fixtures / "pull_request/opened.payload.json").read_bytes()
    push = (github_fixtures / "push/with-new-branch.payload.json").read_bytes()
    ids = [f"d-{i}-{uuid.uuid4()}" for i in range(3)]
    for delivery_id, (event, body) in zip(
        ids, [("pull_request", pr), ("push", push), ("pull_request", pr)], strict=True
    ):
        assert webhook.post(event, body, delivery_id=delivery_id).status_code == 202
    return ids


def _set_state(settings: Any, delivery_id: str, state: str) -> None:
    from sqlalchemy import select, update

    from store.db import session_scope
    from store.deliveries import mark_failed
    from store.models import Delivery

    with session_scope(settings.database_url) as session:
        if state == "failed":
            pk = session.scalar(select(Delivery.id).where(Delivery.delivery_id == delivery_id))
            mark_failed(session, pk=pk, error="RuntimeError: boom")
        else:
            session.execute(
                update(Delivery).where(Delivery.delivery_id == delivery_id).values(state=state)
            )
            session.commit()


def test_deliveries_empty(client: Any) -> None:
    response = client.get("/api/v1/deliveries")
    assert (response.status_code, response.json()) == (
        200,
        {"items": [], "total": 0, "limit": 50, "offset": 0, "next_cursor": None},
    )
    assert "link" not in response.headers


def test_deliveries_newest_first_with_their_public_fields(
    client: Any, three: list[str], github_fixtures: Path, webhook: Any
) -> None:
    page = client.get("/api/v1/deliveries").json()
    assert (page["total"], page["next_cursor"]) == (3, None)
    listed = page["items"]
    assert [d["delivery_id"] for d in listed] == three[::-1]
    assert all(set(d) == DELIVERY_FIELDS for d in listed)
    pr = json.loads((github_fixtures / "pull_request/opened.payload.json").read_bytes())
    newest = listed[0]
    assert (newest["event"], newest["action"], newest["repo"], newest["source"]) == (
        "pull_request",
        "opened",
        webhook.upstream,
        "webhook",
    )
    assert (newest["state"], newest["attempts"], newest["last_error"]) == ("received", 0, None)
    assert newest["pr_number"] == pr["number"]
    assert newest["head_sha"] == pr["pull_request"]["head"]["sha"]
    assert newest["normalized"]["pr_number"] == pr["number"]
    assert listed[1]["event"] == "push" and listed[1]["pr_number"] is None


def test_deliveries_filtered_by_state(client: Any, three: list[str], app_settings: Any) -> None:
    _set_state(app_settings, three[0], "processed")
    _set_state(app_settings, three[1], "failed")

    def ids(state: str) -> list[str]:
        response = client.get("/api/v1/deliveries", params={"state": state})
        assert response.status_code == 200
        return [d["delivery_id"] for d in response.json()["items"]]

    assert ids("processed") == [three[0]]
    assert ids("failed") == [three[1]]
    assert ids("received") == [three[2]]
    assert ids("processing") == []
    failed = client.get(f"/api/v1/deliveries/{three[1]}").json()
    assert (failed["state"], failed["last_error"]) == ("failed", "RuntimeError: boom")


@pytest.mark.parametrize(
    "query",
    [
        {"state": "bogus"},
        {"event": "bogus"},
        {"limit": 0},
        {"limit": 501},
        {"limit": "many"},
        {"pr": 2**80},
        {"offset": -1},
    ],
)
def test_deliveries_bad_query_is_422(client: Any, query: dict[str, Any]) -> None:
    response = client.get("/api/v1/deliveries", params=query)
    assert response.status_code == 422
    body = response.json()
    assert body["errors"][0]["loc"] == ["query", next(iter(query))]
    assert body["detail"].startswith(f"query.{next(iter(query))}: ")  # one line
    assert "\n" not in body["detail"]


def test_deliveries_paged_by_limit_offset_and_cursor(client: Any, three: list[str]) -> None:
    first = client.get("/api/v1/deliveries?limit=2")
    page = first.json()
    assert [d["delivery_id"] for d in page["items"]] == [three[2], three[1]]
    assert (page["total"], page["limit"], page["offset"]) == (3, 2, 0)
    assert page["next_cursor"] and page["next_cursor"] in first.headers["link"]
    rest = client.get("/api/v1/deliveries", params={"limit": 2, "cursor": page["next_cursor"]})
    assert [d["delivery_id"] for d in rest.json()["items"]] == [three[0]]
    assert (rest.json()["total"], rest.json()["next_cursor"]) == (3, None)
    by_offset = client.get("/api/v1/deliveries", params={"limit": 2, "offset": 2}).json()
    assert [d["delivery_id"] for d in by_offset["items"]] == [three[0]]
    assert (by_offset["offset"], by_offset["next_cursor"]) == (2, None)
    assert len(client.get("/api/v1/deliveries?limit=500").json()["items"]) == 3


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ({"cursor": "bogus"}, "cursor: not a cursor this API issued"),
        ({"cursor": "YzE6aTo0Mg", "offset": 1}, "offset and cursor: give one, not both"),
        (
            {"stat": "failed"},
            "unknown query parameter(s) stat; this endpoint takes: cursor, event, "
            "limit, offset, pr, state",
        ),
    ],
)
def test_deliveries_bad_paging_and_unknown_parameters_are_422(
    client: Any, query: dict[str, Any], reason: str
) -> None:
    response = client.get("/api/v1/deliveries", params=query)
    assert (response.status_code, response.json()) == (422, {"detail": reason})


def test_one_delivery(client: Any, three: list[str], webhook: Any) -> None:
    response = client.get(f"/api/v1/deliveries/{three[1]}")
    assert response.status_code == 200
    one = response.json()
    assert set(one) == DELIVERY_FIELDS
    row = webhook.stored(three[1])
    assert one["delivery_id"] == three[1] and one["event"] == "push"
    assert one["body_sha256"] == hashlib.sha256(row.raw_body).hexdigest()
    assert one["normalized"] == row.normalized
    assert one["normalized"]["delivery_id"] == three[1]
    assert one["base_sha"] == row.base_sha and one["head_sha"] == row.head_sha


def test_unknown_delivery_is_404(client: Any) -> None:
    response = client.get("/api/v1/deliveries/nope")
    assert (response.status_code, response.json()) == (404, {"detail": "no delivery nope"})
