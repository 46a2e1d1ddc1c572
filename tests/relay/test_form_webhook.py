"""GitHub webhooks configured with the form content type (``application/x-www-form-urlencoded``,
the JSON in ``payload=``): verified on the raw body as sent, stored byte-exact, parsed from
``payload=`` here and in the workers (issue #31: they got 400)."""

from __future__ import annotations

import json
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import pytest


def _form(payload: dict[str, Any]) -> bytes:
    return urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()


def _post(webhook: Any, event: str, body: bytes, **kw: Any) -> Any:
    headers = webhook.headers(event, body, **kw)
    headers["Content-Type"] = "application/x-www-form-urlencoded"
    return webhook.client.post(webhook.path, content=body, headers=headers)


def test_a_form_encoded_delivery_is_verified_stored_and_normalized(
    webhook: Any, example_events: Path
) -> None:
    from wire.github.events import stored_envelope

    payload = json.loads((example_events / "pull_request.opened.json").read_text())
    payload["repository"]["full_name"] = webhook.upstream
    body = _form(payload)
    delivery_id = str(uuid.uuid4())
    response = _post(webhook, "pull_request", body, delivery_id=delivery_id)
    assert response.status_code == 202, response.text
    row = webhook.stored(delivery_id)
    assert row is not None and row.state == "received" and row.raw_body == body
    assert (row.pr_number, row.head_sha) == (
        payload["number"],
        payload["pull_request"]["head"]["sha"],
    )
    # the workers read the payload ingress stored; the raw body stays readable for a replay
    assert row.upstream_payload == payload
    envelope = stored_envelope(row.raw_body, event=row.event, source=row.source)
    assert envelope.payload == payload
    assert [pk for pk, _ in webhook.enqueued.calls] == [row.id]


def test_a_form_ping_answers(webhook: Any) -> None:
    response = _post(webhook, "ping", _form({"zen": "z", "hook_id": 7}))
    assert (response.status_code, response.json()) == (
        200,
        {"ok": True, "ping": True, "hook_id": 7},
    )


def test_a_form_body_is_verified_on_its_raw_bytes(webhook: Any, example_events: Path) -> None:
    payload = json.loads((example_events / "pull_request.opened.json").read_text())
    payload["repository"]["full_name"] = webhook.upstream
    body = _form(payload)
    headers = webhook.headers("pull_request", json.dumps(payload).encode())  # signed: the JSON
    headers["Content-Type"] = "application/x-www-form-urlencoded"
    response = webhook.client.post(webhook.path, content=body, headers=headers)
    assert (response.status_code, response.json()) == (401, {"error": "signature does not match"})
    assert webhook.count() == 0


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"payload=%7B&payload=%7D", "malformed form body: it needs exactly one payload field"),
        (b"payload=%FF", "malformed form body: not percent-encoded UTF-8"),
        (b"payload=" + "ü".encode(), "malformed form body: not percent-encoded UTF-8"),
        (b"payload=%5B1%5D", "malformed JSON: the body must be a JSON object"),
    ],
)
def test_a_malformed_form_body_is_refused_in_one_line(
    webhook: Any, body: bytes, reason: str
) -> None:
    response = _post(webhook, "push", body)
    assert response.status_code == 400
    assert response.json()["error"].startswith(reason)
    assert webhook.count() == 0
