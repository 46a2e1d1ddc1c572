"""Hostile input to the in-process app: every case is data, paired with the exact answer it must
get. Nothing is ever a 5xx; what is not valid JSON of a handled event is refused in one line (and
not stored), what is valid JSON but not the shape of its event is stored as ``rejected`` with
the reason, and the API refuses out-of-range parameters with 422."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest


def _pr(github_fixtures: Path, **set_: Any) -> bytes:
    payload = json.loads((github_fixtures / "pull_request/opened.payload.json").read_bytes())
    for dotted, value in set_.items():
        target = payload
        *parents, leaf = dotted.split("__")
        for key in parents:
            target = target[key]
        target[leaf] = value
    return json.dumps(payload).encode()


DEEP = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
DEEPISH = b'{"a": ' + b'{"b": ' * 70 + b"1" + b"}" * 70 + b"}"
# (case, event, body (or a function of tests/data/github's payloads), status, the answer's reason)
REFUSED = [
    (
        "deep nesting past the recursion limit",
        "pull_request",
        DEEP,
        400,
        "malformed JSON: nested deeper than 64 levels",
    ),
    (
        "nesting past 64 levels",
        "pull_request",
        DEEPISH,
        400,
        "malformed JSON: nested deeper than 64 levels",
    ),
    (
        "an integer of 5,000 digits",
        "push",
        b'{"n": ' + b"9" * 5000 + b"}",
        400,
        "malformed JSON: Exceeds the limit (4300 digits) for integer string conversion: value has "
        "5000 digits; use sys.set_int_max_str_digits() to increase the limit",
    ),
    (
        "not UTF-8",
        "push",
        b'{"a": "\xff\xfe"}',
        400,
        "malformed JSON: 'utf-8' codec can't decode byte 0xff in position 7: invalid start byte",
    ),
    ("an array", "push", b"[1, 2]", 400, "malformed JSON: the body must be a JSON object"),
]
REJECTED = [
    (
        "PR number 2**80",
        {"number": 2**80},
        "payload's number 1208925819614629174706176 is out of range (1 to 2147483647)",
    ),
    ("PR number 1e400", {"number": float("inf")}, "payload's number is not an integer"),
    ("PR number a string", {"number": "seven"}, "payload's number is not an integer"),
    ("pull_request a string", {"pull_request": "oops"}, "payload's pull_request is not an object"),
    ("labels an object", {"pull_request__labels": {"a": 1}}, "payload's labels is not a list"),
    ("head sha a number", {"pull_request__head__sha": 7}, "payload's head.sha is not a string"),
    (
        "head sha too long",
        {"pull_request__head__sha": "a" * 65},
        "head_sha: Value error, longer than 64 characters",
    ),
    (
        "a NUL in the head ref",
        {"pull_request__head__ref": "main\x00"},
        "head_ref: Value error, contains a NUL character",
    ),
    ("action too long", {"action": "o" * 51}, "action: Value error, longer than 50 characters"),
    ("action a list", {"action": ["opened"]}, "payload's action is not a string"),
]


@pytest.mark.parametrize(
    ("case", "event", "body", "status", "reason"), REFUSED, ids=[c[0] for c in REFUSED]
)
def test_bodies_that_are_not_json_objects_are_refused_in_one_line(
    make_webhook: Any,
    app_settings: Any,
    case: str,
    event: str,
    body: bytes,
    status: int,
    reason: str,
) -> None:
    webhook = make_webhook(app_settings.model_copy(update={"max_body_bytes": 1 << 20}))
    response = webhook.post(event, body)
    assert (response.status_code, response.json()) == (status, {"error": reason})
    assert webhook.count() == 0 and webhook.enqueued.calls == []


@pytest.mark.parametrize(("case", "changes", "reason"), REJECTED, ids=[c[0] for c in REJECTED])
def test_valid_json_of_the_wrong_shape_is_stored_rejected(
    webhook: Any, github_fixtures: Path, case: str, changes: dict[str, Any], reason: str
) -> None:
    body = _pr(github_fixtures, **changes)
    delivery_id = str(uuid.uuid4())
    response = webhook.post("pull_request", body, delivery_id=delivery_id)
    assert (response.status_code, response.json()) == (
        422,
        {
            "error": f"not a valid pull_request event: {reason}",
            "rejected": True,
            "delivery_id": delivery_id,
            "duplicate": False,
        },
    )
    row = webhook.stored(delivery_id)
    assert row is not None
    assert (row.state, row.last_error, row.raw_body, row.normalized) == (
        "rejected",
        reason,
        body,
        None,
    )
    assert row.pr_number is None or 0 < row.pr_number < 2**31
    assert webhook.enqueued.calls == []


def test_headers_out_of_range(webhook: Any, github_fixtures: Path) -> None:
    body = _pr(github_fixtures)
    long_id = webhook.post("pull_request", body, delivery_id="d" * 101)
    assert (long_id.status_code, long_id.json()) == (
        400,
        {"error": "X-GitHub-Delivery must be at most 100 printable characters"},
    )
    odd_event = webhook.client.post(
        webhook.path,
        content=body,
        headers={
            **webhook.headers("pull_request", body),
            "X-GitHub-Event": "x" * 5000,
            "X-GitHub-Hook-ID": "9" * 500,
        },
    )
    assert odd_event.status_code == 200
    assert odd_event.json() == {"ignored": True, "reason": f"event {'x' * 60!r} is not handled"}
    assert webhook.count() == 0
    # an over-long hook id is informational: dropped, the delivery stored
    delivery_id = str(uuid.uuid4())
    headers = {
        **webhook.headers("pull_request", body, delivery_id=delivery_id),
        "X-GitHub-Hook-ID": "9" * 500,
    }
    assert webhook.client.post(webhook.path, content=body, headers=headers).status_code == 202
    assert webhook.stored(delivery_id).hook_id is None


def test_a_ping_with_an_odd_hook_id(webhook: Any) -> None:
    body = b'{"zen": "z", "hook_id": NaN}'
    response = webhook.post("ping", body)
    assert (response.status_code, response.json()) == (
        200,
        {"ok": True, "ping": True, "hook_id": None},
    )


def test_a_crcr_dispatch_with_an_over_long_inner_delivery_id_is_rejected(
    webhook: Any, github_fixtures: Path
) -> None:
    inner = json.loads(_pr(github_fixtures))
    body = json.dumps(
        {
            "action": "pull_request",
            "client_payload": {
                "event_type": "pull_request",
                "delivery_id": "u" * 300,
                "payload": inner,
            },
        }
    ).encode()
    delivery_id = str(uuid.uuid4())
    response = webhook.post("repository_dispatch", body, delivery_id=delivery_id)
    assert response.status_code == 422
    row = webhook.stored(delivery_id)
    assert row is not None and row.state == "rejected" and row.upstream_delivery_id is None
    assert row.last_error == "upstream_delivery_id: Value error, longer than 100 characters"


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        (
            "/api/v1/jobs/1208925819614629174706176",
            "path.job_id: Input should be less than or equal to 2147483647",
        ),
        ("/api/v1/jobs/0", "path.job_id: Input should be greater than or equal to 1"),
        (
            "/api/v1/jobs/1/results?limit=1e3",
            "query.limit: Input should be a valid integer, unable to parse string as an integer",
        ),
        (
            "/api/v1/jobs?pr=99999999999999999999",
            "query.pr: Input should be less than or equal to 2147483647",
        ),
        ("/api/v1/jobs?cursor=LS01", "cursor: not a cursor this API issued"),
        (
            "/api/v1/jobs?cursor=" + "A" * 201,
            "query.cursor: String should have at most 200 characters",
        ),
        (
            "/api/v1/deliveries/" + "d" * 101,
            "path.delivery_id: String should have at most 100 characters",
        ),
        ("/api/v1/deliveries/a%00b", "path.delivery_id: String should match pattern '^[^\\x00]*$'"),
        (
            "/api/v1/deliveries?offset=99999999999",
            "query.offset: Input should be less than or equal to 1000000000",
        ),
    ],
)
def test_api_parameters_out_of_range_are_422(client: Any, path: str, reason: str) -> None:
    response = client.get(path)
    assert response.status_code == 422, response.text
    assert response.json()["detail"] == reason


@pytest.mark.parametrize("number", [b"NaN", b"-Infinity", b"1e400"])
def test_nan_where_no_event_field_reads_it_is_rejected_not_a_database_error(
    any_database: Any, make_webhook: Any, github_fixtures: Path, number: bytes
) -> None:
    """Python's parser takes NaN and infinities (1e400 overflows to one), which the stored
    upstream payload (a JSON column) cannot hold on PostgreSQL nor a dispatch carry: the
    delivery is stored rejected with where it is, never a 5xx."""
    webhook = make_webhook(any_database)
    body = _pr(github_fixtures, title_extra="<n>").replace(b'"<n>"', number)
    delivery_id = str(uuid.uuid4())
    response = webhook.post("pull_request", body, delivery_id=delivery_id)
    assert (response.status_code, response.json()["error"]) == (
        422,
        "not a valid pull_request event: payload's title_extra is not a finite number",
    )
    row = webhook.stored(delivery_id)
    assert (row.state, row.raw_body, row.normalized, row.upstream_payload) == (
        "rejected",
        body,
        None,
        None,
    )
