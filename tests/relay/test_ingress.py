"""Webhook ingress through real HTTP, against `relay up` with a real Celery worker process, once
on SQLite + the embedded broker and once on PostgreSQL + Redis: each delivery followed until the
worker processed it. Every answer of the webhook, one by one, is checked in process (and faster)
in test_app_ingress.py; what is here is what needs the real server, broker and worker."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

# Every payload of tests/data/github, with what the relay must answer. The stacks serve UPSTREAM
# (example-org/upstream, the repository of the pull_request and push payloads; the check_run is
# another repository's).
FIXTURE_CASES = [
    ("pull_request", "pull_request/opened.payload.json", 202, None),
    ("pull_request", "pull_request/closed.payload.json", 202, None),
    ("pull_request", "pull_request/labeled.payload.json", 202, None),
    ("pull_request", "pull_request/synchronize.payload.json", 202, None),
    ("push", "push/with-new-branch.payload.json", 202, None),
    ("check_run", "check_run/rerequested.payload.json", 200, "is not the configured upstream"),
    ("ping", "ping/payload.json", 200, None),
    (
        "repository_dispatch",
        "repository_dispatch/payload.json",
        200,
        "without a CRCR client_payload",
    ),
]


def test_fixture_set_is_complete(github_fixtures: Path) -> None:
    on_disk = {p.relative_to(github_fixtures).as_posix() for p in github_fixtures.rglob("*.json")}
    assert on_disk == {case[1] for case in FIXTURE_CASES}


@pytest.mark.parametrize(
    ("event", "path", "status", "reason"), FIXTURE_CASES, ids=[c[1] for c in FIXTURE_CASES]
)
def test_github_fixture(
    stack: Any, github_fixtures: Path, event: str, path: str, status: int, reason: str | None
) -> None:
    body = (github_fixtures / path).read_bytes()
    delivery_id = str(uuid.uuid4())
    response = stack.post(event, body, delivery_id=delivery_id)
    assert response.status_code == status, response.text
    if status == 202:
        assert response.json() == {
            "accepted": True,
            "delivery_id": delivery_id,
            "redelivery": False,
        }
        row = stack.wait_state(delivery_id, {"processed"})
        assert row.raw_body == body  # byte-exact
        assert row.attempts == 1
        payload = json.loads(body)
        normalized = row.normalized or {}
        assert normalized["event"] == event
        assert normalized["repo"] == stack.env["RELAY_UPSTREAM_REPO"]
        if event == "pull_request":
            pr = payload["pull_request"]
            assert normalized["pr_number"] == payload["number"]
            assert normalized["head_sha"] == pr["head"]["sha"]
            assert normalized["base_sha"] == pr["base"]["sha"]
            assert normalized["base_ref"] == pr["base"]["ref"]
            assert normalized["labels"] == [lb["name"] for lb in pr["labels"]]
            assert normalized["merged"] == bool(pr["merged"])
            assert normalized["author_association"] == pr["author_association"]
        else:
            assert normalized["ref"] == payload["ref"]
            assert normalized["after_sha"] == payload["after"]
    elif event == "ping":
        assert response.json() == {"ok": True, "ping": True, "hook_id": json.loads(body)["hook_id"]}
        assert stack.delivery(delivery_id) is None
    else:
        assert response.json()["ignored"] is True
        assert reason in response.json()["reason"]
        assert stack.delivery(delivery_id) is None


def test_github_docs_test_vector(stack: Any) -> None:
    # Secret and body from GitHub's docs: the signature is accepted (so not 401); the body is
    # not JSON, so 400.
    body = b"Hello, World!"
    headers = stack.headers("push", body)
    assert headers["X-Hub-Signature-256"] == (
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    )
    response = httpx.post(stack.webhook, content=body, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"].startswith("malformed JSON")


@pytest.fixture(scope="module")
def opened(github_fixtures: Path) -> Any:
    """``opened(**changes)``: the pull_request.opened example as bytes, with ``a__b=value``
    setting ``payload["a"]["b"]``."""

    def make(**changes: object) -> bytes:
        payload = json.loads((github_fixtures / "pull_request/opened.payload.json").read_bytes())
        for dotted, value in changes.items():
            target = payload
            *parents, leaf = dotted.split("__")
            for key in parents:
                target = target[key]
            target[leaf] = value
        return json.dumps(payload).encode()

    return make


def test_wrong_secret_is_401(stack: Any, opened: Any) -> None:
    response = stack.post("pull_request", opened(), secret="not-the-secret")
    assert response.status_code == 401
    assert response.json() == {"error": "signature does not match"}


def test_rotated_second_secret_is_accepted(stack: Any, opened: Any, relay_up: Any) -> None:
    delivery_id = str(uuid.uuid4())
    response = stack.post(
        "pull_request", opened(), delivery_id=delivery_id, secret=relay_up.SECRETS[1]
    )
    assert response.status_code == 202
    stack.wait_state(delivery_id, {"processed"})


def test_missing_signature_is_400(stack: Any, opened: Any) -> None:
    response = stack.post("pull_request", opened(), secret=None)
    assert response.status_code == 400
    assert response.json() == {"error": "missing X-Hub-Signature-256 header"}


def test_oversized_chunked_body_without_length_is_413(
    stack: Any, opened: Any, relay_up: Any
) -> None:
    body = opened(pull_request__body="y" * relay_up.MAX_BODY)

    def chunks():  # no Content-Length: the limit must hold while streaming
        for i in range(0, len(body), 16_384):
            yield body[i : i + 16_384]

    headers = stack.headers("pull_request", body)
    response = httpx.post(stack.webhook, content=chunks(), headers=headers)
    assert response.status_code == 413


def test_crcr_repository_dispatch_is_stored_as_the_inner_event(stack: Any, opened: Any) -> None:
    inner = json.loads(opened())
    upstream_id = str(uuid.uuid4())
    body = json.dumps(
        {
            "action": "pull_request",
            "branch": "main",
            "client_payload": {
                "event_type": "pull_request",
                "delivery_id": upstream_id,
                "payload": inner,
            },
            "repository": {"full_name": "downstream/spyre"},
        }
    ).encode()
    delivery_id = str(uuid.uuid4())
    assert stack.post("repository_dispatch", body, delivery_id=delivery_id).status_code == 202
    row = stack.wait_state(delivery_id, {"processed"})
    assert (row.event, row.source, row.upstream_delivery_id) == (
        "pull_request",
        "repository_dispatch",
        upstream_id,
    )
    assert row.raw_body == body
    assert row.normalized is not None
    assert row.normalized["upstream_delivery_id"] == upstream_id
    assert row.normalized["pr_number"] == inner["number"]


def test_check_run_rerequest_of_the_upstream(stack: Any, github_fixtures: Path) -> None:
    payload = json.loads((github_fixtures / "check_run/rerequested.payload.json").read_bytes())
    payload["repository"]["full_name"] = stack.env["RELAY_UPSTREAM_REPO"]
    payload["check_run"]["name"] = "crcr/org/spyre/ci/test"
    delivery_id = str(uuid.uuid4())
    assert (
        stack.post("check_run", json.dumps(payload).encode(), delivery_id=delivery_id).status_code
        == 202
    )
    row = stack.wait_state(delivery_id, {"processed"})
    assert row.normalized is not None
    assert row.normalized["actionable"] is True
    assert row.normalized["check_name"] == "crcr/org/spyre/ci/test"


def test_fifty_concurrent_duplicates_are_processed_once(stack: Any, opened: Any) -> None:
    body = opened()
    delivery_id = str(uuid.uuid4())
    headers = stack.headers("pull_request", body, delivery_id=delivery_id)

    async def burst() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=50)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:
            return await asyncio.gather(
                *(client.post(stack.webhook, content=body, headers=headers) for _ in range(50))
            )

    responses = asyncio.run(burst())
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 49 + [202], statuses
    assert all(
        r.json() == {"duplicate": True, "delivery_id": delivery_id}
        for r in responses
        if r.status_code == 200
    )
    row = stack.wait_state(delivery_id, {"processed"})
    # Let any stray second task run before judging "exactly once".
    stack.wait_for(
        lambda: any(
            line.get("delivery_id") == delivery_id and line.get("event") == "delivery processed"
            for line in stack.log_lines()
        ),
        what="the worker's log line",
    )
    processed = [
        line
        for line in stack.log_lines()
        if line.get("delivery_id") == delivery_id and line.get("event") == "delivery processed"
    ]
    assert len(processed) == 1
    assert row.attempts == 1


def test_redelivery_after_failed_processing_is_processed_again(
    stack: Any, opened: Any, relay_up: Any
) -> None:
    payload = json.loads(opened())
    payload["pull_request"]["labels"].append({"name": relay_up.FAIL_ONCE_LABEL})
    body = json.dumps(payload).encode()
    delivery_id = str(uuid.uuid4())
    assert stack.post("pull_request", body, delivery_id=delivery_id).status_code == 202
    failed = stack.wait_state(delivery_id, {"failed"})
    assert failed.attempts == 1
    assert "injected transient failure" in (failed.last_error or "")
    # A duplicate of a failed delivery is a redelivery: processed again, now successfully.
    again = stack.post("pull_request", body, delivery_id=delivery_id)
    assert again.status_code == 202
    assert again.json()["redelivery"] is True
    row = stack.wait_state(delivery_id, {"processed"})
    assert row.attempts == 2
    assert row.last_error is None
    # ...and once processed, a further copy is only a duplicate.
    third = stack.post("pull_request", body, delivery_id=delivery_id)
    assert (third.status_code, third.json()["duplicate"]) == (200, True)


def test_logs_carry_the_delivery_id_from_request_to_worker(stack: Any, opened: Any) -> None:
    delivery_id = str(uuid.uuid4())
    assert stack.post("pull_request", opened(), delivery_id=delivery_id).status_code == 202
    stack.wait_state(delivery_id, {"processed"})
    events = stack.wait_for(
        lambda: (
            {
                (line.get("logger"), line.get("event"))
                for line in stack.log_lines()
                if line.get("delivery_id") == delivery_id
            }
            >= {("relay.ingress", "delivery stored"), ("workers.ingest", "delivery processed")}
        ),
        what="both log lines",
    )
    assert events


def test_health_and_readiness(stack: Any) -> None:
    assert httpx.get(f"{stack.base_url}/healthz").json()["ok"] is True
    ready = httpx.get(f"{stack.base_url}/readyz").json()
    assert ready["ok"] is True
    assert ready["database"]["ok"] and ready["broker"]["ok"]


def test_delivery_api(stack: Any, opened: Any) -> None:
    delivery_id = str(uuid.uuid4())
    stack.post("pull_request", opened(), delivery_id=delivery_id)
    stack.wait_state(delivery_id, {"processed"})
    one = httpx.get(f"{stack.base_url}/api/v1/deliveries/{delivery_id}").json()
    assert one["state"] == "processed" and one["normalized"]["delivery_id"] == delivery_id
    listed = httpx.get(f"{stack.base_url}/api/v1/deliveries", params={"state": "processed"}).json()
    assert delivery_id in {d["delivery_id"] for d in listed["items"]}
    assert httpx.get(f"{stack.base_url}/api/v1/deliveries/nope").status_code == 404
