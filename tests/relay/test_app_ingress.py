"""Every answer of ``POST /github/webhook`` (the README's "Webhook answers"), in process: the app
from ``create_app`` on a fresh SQLite database, its ``enqueue`` a recorder. The same paths end
to end, through `relay up` and its worker, are in test_ingress.py."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

# Every payload of tests/data/github with what the in-process app must answer. It serves the test
# stacks' upstream (example-org/upstream, the repository of the pull_request and push payloads;
# the check_run is another repository's).
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


def _payload(github_fixtures: Path, name: str) -> dict[str, Any]:
    return dict(json.loads((github_fixtures / name).read_bytes()))


@pytest.fixture
def opened(github_fixtures: Path) -> Any:
    """``opened(**changes)``: the pull_request.opened example as bytes, with ``a__b=value``
    setting ``payload["a"]["b"]``."""

    def make(**changes: object) -> bytes:
        payload = _payload(github_fixtures, "pull_request/opened.payload.json")
        for dotted, value in changes.items():
            target = payload
            *parents, leaf = dotted.split("__")
            for key in parents:
                target = target[key]
            target[leaf] = value
        return json.dumps(payload).encode()

    return make


def test_fixture_set_is_complete(github_fixtures: Path) -> None:
    on_disk = {p.relative_to(github_fixtures).as_posix() for p in github_fixtures.rglob("*.json")}
    assert on_disk == {case[1] for case in FIXTURE_CASES}


@pytest.mark.parametrize(
    ("event", "path", "status", "reason"), FIXTURE_CASES, ids=[c[1] for c in FIXTURE_CASES]
)
def test_github_fixture(
    webhook: Any, github_fixtures: Path, event: str, path: str, status: int, reason: str | None
) -> None:
    body = (github_fixtures / path).read_bytes()
    delivery_id = str(uuid.uuid4())
    response = webhook.post(event, body, delivery_id=delivery_id)
    assert response.status_code == status, response.text
    row = webhook.stored(delivery_id)
    if status != 202:
        if event == "ping":
            assert response.json() == {
                "ok": True,
                "ping": True,
                "hook_id": json.loads(body)["hook_id"],
            }
        else:
            assert response.json()["ignored"] is True
            assert reason in response.json()["reason"]
        assert row is None
        assert webhook.enqueued.calls == []
        return
    assert response.json() == {"accepted": True, "delivery_id": delivery_id, "redelivery": False}
    assert row is not None
    assert webhook.enqueued.calls == [(row.id, delivery_id)]
    assert row.raw_body == body  # byte-exact
    assert row.body_sha256 == hashlib.sha256(body).hexdigest()
    assert (row.state, row.attempts, row.last_error) == ("received", 0, None)
    assert (row.event, row.source, row.repo, row.hook_id) == (
        event,
        "webhook",
        webhook.upstream,
        "4242",
    )
    payload = json.loads(body)
    assert row.action == payload.get("action")
    # the body is parsed once, on arrival: the normalized event is stored with the delivery
    normalized = row.normalized or {}
    assert normalized["event"] == event
    assert normalized["repo"] == webhook.upstream
    assert normalized["delivery_id"] == delivery_id
    if event == "pull_request":
        pr = payload["pull_request"]
        assert normalized["pr_number"] == payload["number"] == row.pr_number
        assert normalized["head_sha"] == pr["head"]["sha"] == row.head_sha
        assert normalized["base_sha"] == pr["base"]["sha"] == row.base_sha
        assert normalized["base_ref"] == pr["base"]["ref"]
        assert normalized["labels"] == [lb["name"] for lb in pr["labels"]]
        assert normalized["merged"] == bool(pr["merged"])
        assert normalized["author_association"] == pr["author_association"]
    else:
        assert normalized["ref"] == payload["ref"]
        assert normalized["after_sha"] == payload["after"]
        assert row.base_sha == payload["before"]  # a push's base is the commit before it


def test_same_delivery_again_is_a_duplicate_and_not_enqueued_again(
    webhook: Any, opened: Any
) -> None:
    body, delivery_id = opened(), str(uuid.uuid4())
    first = webhook.post("pull_request", body, delivery_id=delivery_id)
    assert first.status_code == 202
    for _ in range(2):
        again = webhook.post("pull_request", body, delivery_id=delivery_id)
        assert again.status_code == 200
        assert again.json() == {"duplicate": True, "delivery_id": delivery_id}
    row = webhook.stored(delivery_id)
    assert row is not None and row.state == "received"
    assert webhook.enqueued.calls == [(row.id, delivery_id)]
    assert webhook.count() == 1


def test_same_delivery_after_its_processing_failed_is_a_redelivery(
    webhook: Any, opened: Any
) -> None:
    from store.db import session_scope
    from store.deliveries import mark_failed

    body, delivery_id = opened(), str(uuid.uuid4())
    assert webhook.post("pull_request", body, delivery_id=delivery_id).status_code == 202
    row = webhook.stored(delivery_id)
    assert row is not None
    assert webhook.enqueued.calls == [(row.id, delivery_id)]  # published, then its processing fails
    with session_scope(webhook.settings.database_url) as session:
        mark_failed(session, pk=row.id, error="RuntimeError: downstream was down")
    failed = webhook.stored(delivery_id)
    assert failed is not None and failed.state == "failed"

    again = webhook.post("pull_request", body, delivery_id=delivery_id)
    assert again.status_code == 202
    assert again.json() == {"accepted": True, "delivery_id": delivery_id, "redelivery": True}
    # back in the outbox, published a second time, the same row: processed again
    assert webhook.enqueued.calls == [(row.id, delivery_id), (row.id, delivery_id)]
    back = webhook.stored(delivery_id)
    assert back is not None and back.state == "received" and back.id == row.id
    assert webhook.count() == 1
    # ...and once it is back in the queue, a further copy is only a duplicate
    third = webhook.post("pull_request", body, delivery_id=delivery_id)
    assert (third.status_code, third.json()) == (
        200,
        {"duplicate": True, "delivery_id": delivery_id},
    )
    assert len(webhook.enqueued.calls) == 2


def test_stored_even_when_the_broker_cannot_take_it(webhook: Any, opened: Any) -> None:
    """The broker is down: the delivery is stored and accepted (the request never talks to the
    broker); it waits in the outbox and is published once the broker takes messages again."""
    webhook.enqueued.result = False
    delivery_id = str(uuid.uuid4())
    response = webhook.post("pull_request", opened(), delivery_id=delivery_id)
    assert response.status_code == 202
    assert response.json()["accepted"] is True
    row = webhook.stored(delivery_id)
    assert row is not None and row.state == "received" and row.published_at is None
    assert webhook.enqueued.calls == []  # the publisher could not send it: still in the outbox
    webhook.enqueued.result = True
    assert webhook.enqueued.calls == [(row.id, delivery_id)]
    published = webhook.stored(delivery_id)
    assert published is not None and published.published_at is not None


def test_ping_is_answered_and_stores_nothing(webhook: Any, github_fixtures: Path) -> None:
    body = (github_fixtures / "ping/payload.json").read_bytes()
    response = webhook.post("ping", body)
    assert response.status_code == 200
    assert response.json() == {"ok": True, "ping": True, "hook_id": json.loads(body)["hook_id"]}
    assert webhook.count() == 0 and webhook.enqueued.calls == []


def test_unsupported_event_is_ignored(webhook: Any) -> None:
    body = json.dumps({"action": "opened", "repository": {"full_name": webhook.upstream}})
    response = webhook.post("issues", body.encode())
    assert response.status_code == 200
    assert response.json() == {"ignored": True, "reason": "event 'issues' is not handled"}
    assert webhook.count() == 0 and webhook.enqueued.calls == []


def test_other_repository_is_ignored(webhook: Any, opened: Any) -> None:
    delivery_id = str(uuid.uuid4())
    response = webhook.post(
        "pull_request", opened(repository__full_name="someone/else"), delivery_id=delivery_id
    )
    assert response.status_code == 200
    assert response.json() == {
        "ignored": True,
        "reason": f"repository 'someone/else' is not the configured upstream {webhook.upstream!r}",
    }
    assert webhook.stored(delivery_id) is None
    assert webhook.enqueued.calls == []


@pytest.mark.parametrize(
    ("omit", "error"),
    [
        ("X-Hub-Signature-256", "missing X-Hub-Signature-256 header"),
        ("X-GitHub-Delivery", "missing X-GitHub-Delivery header"),
        ("X-GitHub-Event", "missing X-GitHub-Event header"),
    ],
)
def test_missing_header_is_400(webhook: Any, opened: Any, omit: str, error: str) -> None:
    response = webhook.post("pull_request", opened(), omit=[omit])
    assert response.status_code == 400
    assert response.json() == {"error": error}
    assert webhook.count() == 0 and webhook.enqueued.calls == []


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b'{"action": "opened", ', "malformed JSON: Expecting property name"),
        (b"\x80not utf-8", "malformed JSON: 'utf-8' codec can't decode"),
        (b"[1, 2]", "malformed JSON: the body must be a JSON object"),
        (b'"a string"', "malformed JSON: the body must be a JSON object"),
    ],
    ids=["truncated", "not-utf-8", "array", "string"],
)
def test_malformed_or_non_object_json_is_400_and_stores_nothing(
    webhook: Any, body: bytes, error: str
) -> None:
    delivery_id = str(uuid.uuid4())
    response = webhook.post("pull_request", body, delivery_id=delivery_id)
    assert response.status_code == 400
    assert response.json()["error"].startswith(error), response.json()
    assert webhook.stored(delivery_id) is None
    assert webhook.enqueued.calls == []


def test_github_docs_test_vector(webhook: Any) -> None:
    # Secret and body from GitHub's docs: the signature is accepted (so not 401); the body is
    # not JSON, so 400.
    body = b"Hello, World!"
    headers = webhook.headers("push", body, secret="It's a Secret to Everybody")
    assert headers["X-Hub-Signature-256"] == (
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    )
    response = webhook.client.post(webhook.path, content=body, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"].startswith("malformed JSON")


@pytest.mark.parametrize(
    "signature",
    ["wrong-secret", "sha1=757107ea0eb2509fc211221cce984b8a37570b6d", "sha256=", "garbage"],
)
def test_signature_matching_no_secret_is_401(webhook: Any, opened: Any, signature: str) -> None:
    body = opened()
    headers = webhook.headers("pull_request", body)
    if signature == "wrong-secret":
        headers = webhook.headers("pull_request", body, secret="not-the-secret")
    else:
        headers["X-Hub-Signature-256"] = signature
    response = webhook.client.post(webhook.path, content=body, headers=headers)
    assert response.status_code == 401
    assert response.json() == {"error": "signature does not match"}
    assert webhook.count() == 0 and webhook.enqueued.calls == []


def test_signature_over_other_bytes_is_401(webhook: Any, opened: Any) -> None:
    body = opened()
    headers = webhook.headers("pull_request", body + b" ")
    response = webhook.client.post(webhook.path, content=body, headers=headers)
    assert (response.status_code, response.json()) == (401, {"error": "signature does not match"})


def test_rotated_second_secret_is_accepted(webhook: Any, opened: Any) -> None:
    assert len(webhook.secrets) == 2
    delivery_id = str(uuid.uuid4())
    response = webhook.post(
        "pull_request", opened(), delivery_id=delivery_id, secret=webhook.secrets[1]
    )
    assert response.status_code == 202
    assert webhook.stored(delivery_id) is not None
    assert len(webhook.enqueued.calls) == 1


def _padded(opened: Any, size: int) -> bytes:
    """The opened example padded (in its PR body) to exactly ``size`` bytes."""
    bare = len(opened(pull_request__body=""))
    body = opened(pull_request__body="x" * (size - bare))
    assert len(body) == size
    return body


def test_body_at_the_limit_is_accepted(webhook: Any, opened: Any) -> None:
    response = webhook.post("pull_request", _padded(opened, webhook.max_body))
    assert response.status_code == 202, response.text


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_body_over_the_limit_is_413(webhook: Any, opened: Any, chunked: bool) -> None:
    """One byte over, declared in Content-Length or (streamed without it) counted while read."""
    body = _padded(opened, webhook.max_body + 1)
    delivery_id = str(uuid.uuid4())
    response = webhook.post("pull_request", body, delivery_id=delivery_id, chunked=chunked)
    assert response.status_code == 413
    assert response.json() == {"error": f"body exceeds the limit of {webhook.max_body} bytes"}
    assert str(webhook.max_body) in response.json()["error"]
    assert webhook.stored(delivery_id) is None
    assert webhook.enqueued.calls == []


def test_large_chunked_body_is_413(webhook: Any, opened: Any) -> None:
    body = opened(pull_request__body="y" * (4 * webhook.max_body))
    response = webhook.post("pull_request", body, chunked=True)
    assert response.status_code == 413
    assert webhook.count() == 0


def test_chunked_body_under_the_limit_is_accepted(webhook: Any, opened: Any) -> None:
    delivery_id = str(uuid.uuid4())
    body = opened()
    response = webhook.post("pull_request", body, delivery_id=delivery_id, chunked=True)
    assert response.status_code == 202
    row = webhook.stored(delivery_id)
    assert row is not None and row.raw_body == body


def test_crcr_repository_dispatch_is_stored_as_the_inner_event(webhook: Any, opened: Any) -> None:
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
    response = webhook.post("repository_dispatch", body, delivery_id=delivery_id)
    assert response.status_code == 202
    assert response.json() == {"accepted": True, "delivery_id": delivery_id, "redelivery": False}
    row = webhook.stored(delivery_id)
    assert row is not None
    assert (row.event, row.source, row.upstream_delivery_id) == (
        "pull_request",
        "repository_dispatch",
        upstream_id,
    )
    assert (row.repo, row.action, row.pr_number) == (webhook.upstream, "opened", inner["number"])
    assert row.raw_body == body
    assert row.normalized is not None
    assert row.normalized["upstream_delivery_id"] == upstream_id
    assert row.normalized["pr_number"] == inner["number"]
    assert row.normalized["event"] == "pull_request"
    assert webhook.enqueued.calls == [(row.id, delivery_id)]


def test_crcr_dispatch_of_an_unsupported_or_foreign_event_is_ignored(
    webhook: Any, opened: Any
) -> None:
    def dispatch(event_type: str, payload: dict[str, Any]) -> bytes:
        client_payload = {"event_type": event_type, "delivery_id": "up", "payload": payload}
        return json.dumps({"action": event_type, "client_payload": client_payload}).encode()

    issues = webhook.post(
        "repository_dispatch", dispatch("issues", {"repository": {"full_name": webhook.upstream}})
    )
    assert (issues.status_code, issues.json()) == (
        200,
        {"ignored": True, "reason": "event 'issues' is not handled"},
    )
    foreign = webhook.post(
        "repository_dispatch",
        dispatch("pull_request", json.loads(opened(repository__full_name="someone/else"))),
    )
    assert foreign.status_code == 200 and foreign.json()["ignored"] is True
    assert "'someone/else'" in foreign.json()["reason"]
    assert webhook.count() == 0 and webhook.enqueued.calls == []


def test_check_run_rerequest_of_the_upstream(webhook: Any, github_fixtures: Path) -> None:
    payload = _payload(github_fixtures, "check_run/rerequested.payload.json")
    payload["repository"]["full_name"] = webhook.upstream
    payload["check_run"]["name"] = "crcr/org/spyre/ci/test"
    delivery_id = str(uuid.uuid4())
    response = webhook.post("check_run", json.dumps(payload).encode(), delivery_id=delivery_id)
    assert response.status_code == 202
    row = webhook.stored(delivery_id)
    assert row is not None and row.normalized is not None
    assert row.normalized["actionable"] is True
    assert row.normalized["check_name"] == "crcr/org/spyre/ci/test"
    # a check_run's head SHA (and PR) come from the normalized event
    assert row.head_sha == payload["check_run"]["head_sha"] == row.normalized["head_sha"]
    assert row.pr_number == row.normalized["pr_number"]


def test_a_payload_that_is_not_the_event_it_claims_is_stored_rejected_with_the_reason(
    webhook: Any, github_fixtures: Path
) -> None:
    """A push without ``ref``: stored (nothing is lost) as ``rejected`` with the reason, never
    enqueued, answered 422 with that reason in one line."""
    payload = _payload(github_fixtures, "push/with-new-branch.payload.json")
    del payload["ref"]
    body = json.dumps(payload).encode()
    delivery_id = str(uuid.uuid4())
    response = webhook.post("push", body, delivery_id=delivery_id)
    assert response.status_code == 422
    assert response.json() == {
        "error": "not a valid push event: payload has no ref",
        "rejected": True,
        "delivery_id": delivery_id,
        "duplicate": False,
    }
    row = webhook.stored(delivery_id)
    assert row is not None
    assert row.normalized is None
    assert row.last_error == "payload has no ref"
    assert (row.state, row.raw_body, row.event) == ("rejected", body, "push")
    assert row.processed_at is not None
    assert webhook.enqueued.calls == []
    again = webhook.post("push", body, delivery_id=delivery_id)  # GitHub's redelivery
    assert (again.status_code, again.json()["duplicate"]) == (422, True)
    assert webhook.count() == 1 and webhook.enqueued.calls == []


def test_a_pull_request_without_its_head_is_stored_rejected_with_the_reason(
    webhook: Any, github_fixtures: Path
) -> None:
    payload = _payload(github_fixtures, "pull_request/opened.payload.json")
    del payload["pull_request"]["head"]
    delivery_id = str(uuid.uuid4())
    response = webhook.post("pull_request", json.dumps(payload).encode(), delivery_id=delivery_id)
    assert response.status_code == 422
    row = webhook.stored(delivery_id)
    assert row is not None and row.normalized is None and row.state == "rejected"
    assert row.last_error == "payload has no head.sha"
    assert webhook.enqueued.calls == []


def test_the_group_commit_writer_stops_with_the_app_and_when_its_database_changes(
    app_settings: Any, tmp_path: Path, opened: Any, relay_up: Any
) -> None:
    import warnings

    from sqlalchemy import func, select

    from relay.app import create_app
    from store import migrate
    from store.db import session_scope
    from store.models import Delivery
    from wire.github.signature import sign

    with warnings.catch_warnings():  # starlette prefers httpx2 (see conftest)
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient
    body = opened()

    def post(client: Any) -> int:
        headers = {
            "Content-Type": "application/json",
            "X-GitHub-Event": "pull_request",
            "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": sign(relay_up.SECRETS[0], body),
        }
        return int(client.post("/github/webhook", content=body, headers=headers).status_code)

    def count(url: str) -> int:
        with session_scope(url) as session:
            return int(session.scalar(select(func.count()).select_from(Delivery)) or 0)

    other_url = f"sqlite:///{tmp_path}/other.sqlite"
    migrate.upgrade(other_url)
    app = create_app(app_settings)
    with TestClient(app) as client:
        assert post(client) == 202
        first = app.state.group_commit
        first_thread = first._thread
        assert first_thread is not None and first_thread.is_alive()
        app.state.settings = app_settings.model_copy(update={"database_url": other_url})
        assert post(client) == 202
        second = app.state.group_commit
        assert second is not first and second.url == other_url
        first_thread.join(timeout=10)
        assert not first_thread.is_alive()  # closed once it had stored what it was given
        second_thread = second._thread
        assert second_thread is not None and second_thread.is_alive()
    assert app.state.group_commit is None
    assert not second_thread.is_alive()  # the app's shutdown stopped it
    assert (count(app_settings.database_url), count(other_url)) == (1, 1)


def test_the_upstream_payload_is_stored_as_the_json_it_came_in(
    any_database: Any, make_webhook: Any, github_fixtures: Path
) -> None:
    """The payload a downstream gets verbatim is stored once, at ingress: a webhook's as its own
    JSON text (its spacing and key order, not serialized again), a CRCR dispatch's inner
    payload as a JSON object equal to it. No later stage parses the raw body."""
    import sqlalchemy as sa

    from store.db import session_scope
    from store.models import Delivery

    webhook = make_webhook(any_database)
    payload = _payload(github_fixtures, "pull_request/opened.payload.json")
    payload["repository"]["full_name"] = webhook.upstream
    body = json.dumps(dict(reversed(payload.items())), indent=3).encode()
    crcr = {
        "client_payload": {"event_type": "pull_request", "delivery_id": "u", "payload": payload}
    }
    assert webhook.post("pull_request", body, delivery_id="as-sent").status_code == 202
    dispatch_body = json.dumps(crcr).encode()
    assert webhook.post("repository_dispatch", dispatch_body, delivery_id="crcr").status_code == 202
    with session_scope(any_database.database_url) as session:
        text = dict(
            session.execute(
                sa.select(Delivery.delivery_id, sa.cast(Delivery.upstream_payload, sa.Text))
            ).all()
        )
        stored = dict(
            session.execute(sa.select(Delivery.delivery_id, Delivery.upstream_payload)).all()
        )
    assert text["as-sent"] == body.decode()
    assert stored["as-sent"] == payload and stored["crcr"] == payload
