"""Webhook ingest against a running `relay up` (uvicorn + worker), load from a second process.

Signed pull_request deliveries vs. GET /healthz at the same concurrency (the HTTP floor of the
same server, measured in the same run). SQLite + embedded broker always; PostgreSQL + Redis when
RELAY_TEST_POSTGRES_URL and RELAY_TEST_REDIS_URL point at servers (`.ci/services.sh` starts them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.report import Report
from tests.support.services import free_port
from tests.support.stack import SECRETS, UPSTREAM, start_stack

COUNT = int(os.environ.get("BENCH_INGEST_COUNT", "2000"))
CONCURRENCY = 16
MAX_SECONDS = 60.0


def _load(url: str, *, webhook: bool, body: Path) -> dict[str, float]:
    cmd = [
        sys.executable, "-m", "benchmarks.loadgen", "--url", url, "--count", str(COUNT),
        "--concurrency", str(CONCURRENCY), "--max-seconds", str(MAX_SECONDS),
    ]  # fmt: skip
    if webhook:
        cmd += ["--webhook", "--body", str(body), "--secret", SECRETS[0]]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=MAX_SECONDS + 60)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _body(tmp: Path) -> Path:
    fixture = (
        Path(__file__).resolve().parents[1] / "examples" / "events" / "pull_request.opened.json"
    )
    payload = json.loads(fixture.read_bytes())
    payload["repository"]["full_name"] = UPSTREAM
    path = tmp / "body.json"
    path.write_bytes(json.dumps(payload).encode())
    return path


def _publish_lag(database_url: str) -> tuple[float, float, int]:
    """Stored -> handed to the broker by the outbox publisher, over the deliveries of the run:
    (p50 ms, p99 ms, how many were still unpublished)."""
    from sqlalchemy import select

    from store.db import session_scope
    from store.models import Delivery

    with session_scope(database_url) as session:
        rows = session.execute(select(Delivery.received_at, Delivery.published_at)).all()
    lags = sorted(
        (published - received).total_seconds() * 1000
        for received, published in rows
        if published is not None
    )
    if not lags:
        return float("nan"), float("nan"), len(rows)
    return (
        lags[len(lags) // 2],
        lags[min(len(lags) - 1, int(len(lags) * 0.99))],
        len(rows) - len(lags),
    )


def _measure(name: str, tmp: Path, database_url: str, broker_url: str, table: object) -> None:
    import time

    stack = start_stack(tmp=tmp, database_url=database_url, broker_url=broker_url, port=free_port())
    try:
        body = _body(tmp)
        _load(f"{stack.base_url}/healthz", webhook=False, body=body)  # warm-up
        floor = _load(f"{stack.base_url}/healthz", webhook=False, body=body)
        ingest = _load(stack.webhook, webhook=True, body=body)
        time.sleep(5)  # the publisher catches up with the last requests
        lag_p50, lag_p99, unpublished = _publish_lag(database_url)
    finally:
        stack.stop()
    bad = {k: v for k, v in ingest["statuses"].items() if k != "202"}
    table.rows.append(  # type: ignore[attr-defined]
        [
            name,
            f"{ingest['count']}",
            f"{ingest['rps']:.0f}",
            f"{ingest['p50_ms']:.1f}",
            f"{ingest['p99_ms']:.1f}",
            f"{floor['rps']:.0f}",
            f"{ingest['rps'] / floor['rps']:.2f}",
            f"{floor['p99_ms']:.1f}",
            f"{ingest['p99_ms'] / floor['p99_ms']:.1f}x",
            f"{lag_p50:.0f} / {lag_p99:.0f}" + (f" ({unpublished} left)" if unpublished else ""),
            json.dumps(bad) if bad else "all 202",
        ]
    )


def run(report: Report) -> None:
    table = report.table(
        "Webhook ingest (relay up, loopback, 16 concurrent connections)",
        [
            "backend",
            "requests",
            "req/s",
            "p50 ms",
            "p99 ms",
            "healthz req/s (baseline)",
            "ingest / baseline",
            "healthz p99 ms",
            "p99 / healthz p99",
            "stored -> published p50 / p99 ms",
            "non-202",
        ],
        note="Load from a second process; each request is a signed pull_request delivery with a "
        "new delivery id (verify, store: one transaction; the outbox publisher of the control "
        "worker hands it to the broker). Baseline: GET /healthz on the same server, same run.",
    )
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "sqlite").mkdir()
        _measure(
            "SQLite + embedded broker",
            tmp / "sqlite",
            f"sqlite:///{tmp / 'sqlite' / 'relay.sqlite'}",
            f"sqla+sqlite:///{tmp / 'sqlite' / 'broker.sqlite'}",
            table,
        )
        if os.environ.get("RELAY_TEST_POSTGRES_URL") and os.environ.get("RELAY_TEST_REDIS_URL"):
            from tests.support.services import fresh_postgres_database, fresh_redis_url

            (tmp / "pg").mkdir()
            with fresh_postgres_database() as url:
                _measure("PostgreSQL + Redis", tmp / "pg", url, fresh_redis_url(), table)
        else:
            table.rows.append(
                [
                    "PostgreSQL + Redis",
                    "not run: set RELAY_TEST_POSTGRES_URL and RELAY_TEST_REDIS_URL",
                    "",
                    "",
                    "",
                    "",
                    "",
                    "",
                ]
            )
