"""100 concurrent identical callbacks over real HTTP (uvicorn on loopback) make exactly one
transition, on SQLite and on PostgreSQL."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from wire.crcr import callback as crcr


@pytest.mark.parametrize(
    "database", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_100_concurrent_duplicates_make_one_transition(
    bench: Callable[..., Any],
    issuer: Any,
    example_events: Path,
    database: str,
    serve_app: Any,
) -> None:
    from sqlalchemy import func, select

    from store.db import session_scope
    from store.models import Job, JobTransition

    b = bench({"L2": ["org/down"]}, database=database, callback_rate_per_minute=1000)
    payload = json.loads((example_events / "pull_request.opened.json").read_text())
    assert b.post("pull_request", payload, delivery_id="race").status_code == 202
    b.settle()
    (call,) = b.github.dispatches("org/down")
    client_payload = call.body["client_payload"]
    now = datetime.now(UTC)

    def body(status: str, conclusion: str | None) -> bytes:
        built = crcr.build(
            event_type="pull_request",
            delivery_id="race",
            payload=client_payload["payload"],
            status=status,
            workflow_name="w",
            url="https://ci/run/1",
            run_id="1",  # type: ignore[arg-type]
            run_attempt="1",
            job_name="j",
            started_at=now,
            completed_at=now,
            conclusion=conclusion,  # type: ignore[arg-type]
        )
        if status == "in_progress":
            built["workflow"].pop("completed_at", None)
        return json.dumps({**built, "crcr_relay": client_payload["crcr_relay"]}).encode()

    headers = {"Authorization": f"Bearer {issuer.mint('org/down')}"}
    with serve_app(b.client.app) as url, httpx.Client(base_url=url, timeout=60) as http:

        def post(content: bytes) -> tuple[int, str]:
            answer = http.post("/github/callback", content=content, headers=headers)
            return answer.status_code, answer.json().get("status", answer.text)

        for status, conclusion in (("in_progress", None), ("completed", "success")):
            content = body(status, conclusion)
            with ThreadPoolExecutor(max_workers=32) as pool:
                answers = Counter(pool.map(post, [content] * 100))
            assert answers == Counter({(200, status): 1, (200, "duplicate"): 99}), answers

    with session_scope(b.settings.database_url) as session:
        assert session.scalar(select(func.count(Job.id))) == 1
        steps = session.execute(select(JobTransition.from_status, JobTransition.to_status)).all()
        assert sorted(steps, key=str) == sorted(
            [(None, "in_progress"), ("in_progress", "completed")], key=str
        )
