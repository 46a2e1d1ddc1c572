"""End to end on `relay up` (uvicorn, real Celery workers, PostgreSQL, a Redis of the test's
own): the broker dies while webhooks arrive; every dispatch still reaches the fake GitHub once
the broker is back (the outbox was written with each delivery; the sweeper sends it)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


def test_a_broker_outage_loses_no_dispatch_end_to_end(
    tmp_path: Path,
    own_redis: Any,
    relay_up: Any,
    postgres_url: str,
    fake_github: Any,
    example_events: Path,
) -> None:
    repos = ["org/a", "org/b", "org/c"]
    allow = tmp_path / "allowlist.yml"
    allow.write_text("L2:\n" + "".join(f"  - {r}\n" for r in repos))
    payload = json.loads((example_events / "pull_request.opened.json").read_text())
    payload["repository"]["full_name"] = relay_up.UPSTREAM
    fake_github.pr_files[(relay_up.UPSTREAM, payload["number"])] = ["torch/a.py"]
    env = {
        "RELAY_ALLOWLIST_SOURCE": str(allow),
        "RELAY_GITHUB_API_URL": fake_github.url,
        "RELAY_GITHUB_APP_ID": fake_github.app_id,
        "RELAY_GITHUB_APP_PRIVATE_KEY": fake_github.private_key_pem,
        "RELAY_DISPATCH_BACKOFF_SECONDS": "0.2",
        "RELAY_SWEEP_AFTER_SECONDS": "4",
    }
    stack = relay_up.start(
        tmp=tmp_path, database_url=postgres_url, broker_url=own_redis.url, extra_env=env
    )
    try:
        body = json.dumps(payload).encode()
        before = [stack.submit(body) for _ in range(2)]
        stack.wait_for(lambda: len(fake_github.dispatches()) == 6, what="the first 6 dispatches")
        own_redis.stop()
        during = [stack.submit(body) for _ in range(3)]  # stored with their outbox: 202
        time.sleep(1)
        own_redis.start()
        stack.wait_for(
            lambda: len(fake_github.dispatches()) >= 15, timeout=180, what="all 15 dispatches"
        )
        time.sleep(3)  # nothing more arrives: each dispatch was sent once
        sent = fake_github.dispatches()
        assert len(sent) == 15
        got = sorted((c.body["client_payload"]["delivery_id"], c.path.split("/")[3]) for c in sent)
        assert got == sorted((d, r.split("/")[1]) for d in before + during for r in repos)
    finally:
        stack.stop()
