"""A fuzz of the webhook's own columns (issue #31): the project's example deliveries, signed,
with the fields that have their own column (action, head/base SHA, before/after, a check run's
head SHA, a dispatch's delivery id) and a push's file lists replaced by hostile values (lone
surrogates, NUL, huge numbers, wrong element types), sent as JSON or form-encoded. The oracle:
no answer is a 5xx; every 202 and every 422 stored exactly those bytes once (a 422 as
``rejected``); nothing else is stored.

``make test`` sends ``RELAY_HOSTILE_FUZZ_EXAMPLES`` (default 150) deliveries; the ``long`` run
10,000.
"""

from __future__ import annotations

import json
import os
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("RELAY_HOSTILE_FUZZ_EXAMPLES", "150"))
# (event, example, the fields with their own column, or a push's file lists)
TARGETS = [
    (
        "pull_request",
        "pull_request.opened",
        [
            ("action",),
            ("pull_request", "head", "sha"),
            ("pull_request", "base", "sha"),
            ("number",),
            ("pull_request", "head", "ref"),
        ],
    ),
    (
        "pull_request",
        "pull_request.synchronize",
        [("action",), ("pull_request", "head", "sha"), ("pull_request", "labels")],
    ),
    (
        "push",
        "push.main",
        [
            ("before",),
            ("after",),
            ("ref",),
            ("commits", 0, "added"),
            ("commits", 0, "modified"),
            ("commits", 0, "removed"),
            ("commits",),
        ],
    ),
    ("check_run", "check_run.rerequested", [("check_run", "head_sha"), ("action",)]),
    (
        "repository_dispatch",
        "repository_dispatch.pull_request",
        [("client_payload", "delivery_id"), ("client_payload", "event_type")],
    ),
]

hostile_text = st.one_of(
    st.sampled_from(["\ud800", "a\udfffb", "nul\x00", "\x00", "ü" * 70, "a" * 101, ""]),
    st.text(alphabet=st.characters(codec=None, categories=["Cs", "Cc", "L"]), max_size=8),
)
hostile = st.one_of(
    hostile_text,
    st.sampled_from([0, -1, 2**31, 2**63, 2**80, True, None, 1.5]),
    st.lists(st.one_of(hostile_text, st.integers(), st.booleans()), max_size=3),
    st.dictionaries(hostile_text, hostile_text, max_size=2),
)


def _set(payload: Any, path: tuple[Any, ...], value: Any) -> None:
    target = payload
    for key in path[:-1]:
        if isinstance(target, list):
            if not target:
                return
            target = target[key]
        else:
            target = target.setdefault(key, {})
    if isinstance(target, dict) or (isinstance(target, list) and target):
        target[path[-1]] = value


def _fuzz(webhook: Any, example_events: Path, examples: int) -> dict[int, int]:
    from sqlalchemy import func, select

    from store.db import session_scope
    from store.models import Delivery

    bases = []
    for event, name, paths in TARGETS:
        payload = json.loads((example_events / f"{name}.json").read_text())
        inner = payload["client_payload"]["payload"] if event == "repository_dispatch" else payload
        inner["repository"]["full_name"] = webhook.upstream
        bases.append((event, payload, paths))
    answers: dict[int, int] = {}
    kept: dict[str, tuple[int, bytes]] = {}

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        base=st.sampled_from(bases),
        data=st.data(),
        value=hostile,
        form=st.booleans(),
    )
    def one(base: Any, data: Any, value: Any, form: bool) -> None:
        event, payload, paths = base
        payload = json.loads(json.dumps(payload))
        _set(payload, data.draw(st.sampled_from(paths)), value)
        text = json.dumps(payload)  # ensure_ascii: a surrogate as its \ud800 escape
        body = urllib.parse.urlencode({"payload": text}).encode() if form else text.encode()
        delivery_id = str(uuid.uuid4())
        headers = webhook.headers(event, body, delivery_id=delivery_id)
        if form:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        status = webhook.client.post(webhook.path, content=body, headers=headers).status_code
        answers[status] = answers.get(status, 0) + 1
        assert status < 500 and status in (200, 202, 400, 422), status
        if status in (202, 422):
            kept[delivery_id] = (status, body)

    one()
    with session_scope(webhook.settings.database_url) as session:
        rows = {r.delivery_id: r for r in session.scalars(select(Delivery))}
        assert session.scalar(select(func.count()).select_from(Delivery)) == len(kept)
    for delivery_id, (status, body) in kept.items():
        row = rows[delivery_id]
        assert row.raw_body == body
        assert (row.state == "rejected") == (status == 422)
    return answers


def test_hostile_values_in_the_own_columns(webhook: Any, example_events: Path) -> None:
    answers = _fuzz(webhook, example_events, EXAMPLES)
    print(f"answers: {sorted(answers.items())}")
    assert answers.get(202, 0) > 0 and answers.get(422, 0) > 0  # both kinds were exercised


@pytest.mark.long
def test_hostile_values_in_the_own_columns_long(webhook: Any, example_events: Path) -> None:
    answers = _fuzz(webhook, example_events, 10_000)
    print(f"answers: {sorted(answers.items())}")
    assert answers.get(202, 0) > 0 and answers.get(422, 0) > 0
