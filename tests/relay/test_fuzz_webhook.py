"""A bounded fuzz of ``POST /github/webhook`` against the real app (``create_app`` on a migrated
SQLite file, FastAPI's TestClient): mutated real payloads (keys deleted, values replaced by
huge numbers, long strings, NULs, deep nests, wrong types), mangled bytes, wrong or missing
signatures, odd headers, repeated delivery ids. The oracle: no answer is a 5xx and none takes
long; every 202 stored exactly those bytes once and enqueued them once; every untouched valid
delivery with a new id and a good signature is accepted (no valid delivery is lost).

``RELAY_FUZZ_EXAMPLES`` sets the number of requests (default 300 in `make test`); the answer
counts are printed (``pytest -s``) and written to ``var/fuzz/webhook-answers.json``.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("RELAY_FUZZ_EXAMPLES", "300"))
#: an answer slower than this counts as a hang
HANG_SECONDS = 10.0

VALID = [  # (event, tests/data/github payload) of the test upstream: each is a valid delivery
    ("pull_request", "pull_request/opened.payload.json"),
    ("pull_request", "pull_request/closed.payload.json"),
    ("pull_request", "pull_request/labeled.payload.json"),
    ("pull_request", "pull_request/synchronize.payload.json"),
    ("push", "push/with-new-branch.payload.json"),
]
EVENTS = [
    "pull_request",
    "push",
    "check_run",
    "check_suite",
    "repository_dispatch",
    "ping",
    "issues",
    "",
    "Pull_Request",
    "x" * 300,
]

weird_text = st.one_of(
    st.text(max_size=20),
    st.just("a" * 5000),
    st.just("nul\x00inside"),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=60, max_size=200),
)
weird_number = st.one_of(
    st.integers(min_value=-(2**100), max_value=2**100),
    st.sampled_from([0, -1, 2**31 - 1, 2**31, 2**63, 2**80, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
)
leaf = st.one_of(st.none(), st.booleans(), weird_number, weird_text)
weird_value = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):
            out += _paths(v, (*prefix, i))
    return out


def _set(payload: Any, path: tuple[Any, ...], value: Any, *, delete: bool = False) -> None:
    target = payload
    for key in path[:-1]:
        target = target[key]
    if delete and isinstance(target, dict):
        del target[path[-1]]
    else:
        target[path[-1]] = value


@st.composite
def requests(draw: st.DrawFn, bases: list[tuple[str, bytes]]) -> dict[str, Any]:
    event, raw = draw(st.sampled_from(bases))
    payload = json.loads(raw)
    mutation = draw(
        st.sampled_from(["none", "delete", "replace", "replace", "nest", "bytes", "dispatch"])
    )
    body: bytes
    if mutation in ("delete", "replace"):
        path = draw(st.sampled_from(_paths(payload)))
        _set(payload, path, draw(weird_value), delete=mutation == "delete")
    elif mutation == "nest":  # a value replaced by a list nested this deep
        payload[draw(st.sampled_from(list(payload)))] = "__nest__"
    elif mutation == "dispatch":  # the same payload as a CRCR repository_dispatch
        event = "repository_dispatch"
        payload = {
            "action": "pull_request",
            "client_payload": {
                "event_type": draw(st.sampled_from(["pull_request", "push", "nightly"])),
                "delivery_id": draw(st.one_of(st.uuids().map(str), weird_text)),
                "payload": payload,
            },
        }
    body = json.dumps(payload).encode()  # NaN and infinities as Python writes them
    if mutation == "nest":
        depth = draw(st.sampled_from([10, 63, 65, 200, 5000]))
        body = body.replace(b'"__nest__"', b"[" * depth + b"1" + b"]" * depth)
    if mutation == "bytes":
        cut = draw(st.integers(min_value=0, max_value=len(body)))
        body = draw(
            st.sampled_from(
                [
                    body[:cut],
                    body[:cut] + b"\xff" + body[cut:],
                    body[:cut] + b"{" * 3000,
                    b"",
                    b"null",
                    b"[]",
                ]
            )
        )
    return {
        "event": draw(st.sampled_from([event] * 6 + EVENTS)),
        "body": body,
        "mutated": mutation != "none",
        "signature": draw(
            st.sampled_from(["good"] * 6 + ["other", "garbled", "missing", "second"])
        ),
        "delivery": draw(st.sampled_from(["new"] * 6 + ["repeat", "empty", "long", "odd"])),
    }


@pytest.fixture
def bases(github_fixtures: Path) -> list[tuple[str, bytes]]:
    return [(event, (github_fixtures / name).read_bytes()) for event, name in VALID]


def test_fuzz_the_webhook(webhook: Any, bases: list[tuple[str, bytes]], repo_root: Path) -> None:
    from wire.github.signature import sign

    answers: Counter[str] = Counter()
    accepted: dict[str, bytes] = {}
    seen_ids: list[str] = []
    slowest = [0.0]

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(requests(bases))
    def one(req: dict[str, Any]) -> None:
        body, event = req["body"], req["event"]
        delivery_id = {
            "new": str(uuid.uuid4()),
            "repeat": seen_ids[-1] if seen_ids else str(uuid.uuid4()),
            "empty": "",
            "long": "d" * 150,
            "odd": "id with spaces\t",
        }[req["delivery"]]
        secret = {
            "good": webhook.secrets[0],
            "second": webhook.secrets[1],
            "other": "not-a-configured-secret",
        }.get(req["signature"])
        headers = webhook.headers(event or "x", body, delivery_id=delivery_id or "x")
        headers["X-GitHub-Event"] = event
        headers["X-GitHub-Delivery"] = delivery_id
        if secret is not None:
            headers["X-Hub-Signature-256"] = sign(secret, body)
        elif req["signature"] == "garbled":
            headers["X-Hub-Signature-256"] = "sha256=zz" + "0" * 62
        else:
            del headers["X-Hub-Signature-256"]
        calls_before = len(webhook.enqueued.calls)
        start = time.perf_counter()
        response = webhook.client.post(webhook.path, content=body, headers=headers)
        took = time.perf_counter() - start
        slowest[0] = max(slowest[0], took)
        answers[str(response.status_code)] += 1
        assert response.status_code < 500, (req, response.text)
        assert took < HANG_SECONDS, (req, took)
        answer = response.json()
        if response.status_code >= 400:
            assert "\n" not in (answer.get("error") or ""), answer  # one line
        if delivery_id:
            seen_ids.append(delivery_id)
        if response.status_code == 202:
            assert delivery_id not in accepted or answer["redelivery"], answer
            row = webhook.stored(delivery_id)
            assert row is not None and row.raw_body == body
            assert webhook.enqueued.calls[calls_before:] == [(row.id, delivery_id)]
            accepted[delivery_id] = body
        else:
            assert len(webhook.enqueued.calls) == calls_before
        valid = (
            not req["mutated"]
            and req["signature"] in ("good", "second")
            and req["delivery"] == "new"
            and event in ("pull_request", "push")
            and event == _event_of(body)
        )
        if valid:  # an untouched valid delivery is never lost
            assert response.status_code == 202, (req, answer)

    def _event_of(body: bytes) -> str:
        return next(e for e, raw in bases if raw == body) if body in {b for _, b in bases} else ""

    one()
    # every accepted delivery is stored once, byte-exact
    for delivery_id, body in accepted.items():
        row = webhook.stored(delivery_id)
        assert row is not None and row.raw_body == body
    assert webhook.count() <= len(set(seen_ids))
    summary = {
        "requests": sum(answers.values()),
        "answers": dict(sorted(answers.items())),
        "accepted_stored_once": len(accepted),
        "stored_rows": webhook.count(),
        "slowest_seconds": round(slowest[0], 3),
    }
    out = repo_root / "var" / "fuzz" / "webhook-answers.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\nwebhook fuzz: {json.dumps(summary)}")
    assert not any(code.startswith("5") for code in answers)
    assert answers["202"] > 0 and answers["400"] > 0 and answers["401"] > 0
