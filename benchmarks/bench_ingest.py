"""Webhook ingest against a running `relay up` (uvicorn + worker), load from a second process.

Signed pull_request deliveries vs. GET /healthz at the same concurrency (the HTTP floor of the
same server, measured in the same run). SQLite + embedded broker always; PostgreSQL + Redis when
RELAY_TEST_POSTGRES_URL and RELAY_TEST_REDIS_URL point at servers (`.ci/services.sh` starts them).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.loadgen import run_loadgen
from benchmarks.report import Report
from tests.support.services import free_port
from tests.support.stack import SECRETS, UPSTREAM, start_stack

COUNT = int(os.environ.get("BENCH_INGEST_COUNT", "2000"))
CONCURRENCY = 16
MAX_SECONDS = 60.0
#: how long the paused workers get to process the run's deliveries once resumed
DRAIN_SECONDS = 180.0


def _load(url: str, *, webhook: bool, body: Path) -> dict[str, Any]:
    return run_loadgen(
        url,
        count=COUNT,
        concurrency=CONCURRENCY,
        max_seconds=MAX_SECONDS,
        signed=(body, SECRETS[0]) if webhook else None,
        timeout=MAX_SECONDS + 60,
    )


def _body(tmp: Path) -> Path:
    fixture = (
        Path(__file__).resolve().parents[1] / "examples" / "events" / "pull_request.opened.json"
    )
    payload = json.loads(fixture.read_bytes())
    payload["repository"]["full_name"] = UPSTREAM
    path = tmp / "body.json"
    path.write_bytes(json.dumps(payload).encode())
    return path


def _publish_lag(database_url: str, after_pk: int) -> tuple[float, float, int]:
    """Stored -> handed to the broker by the outbox publisher, over the deliveries after
    ``after_pk``: (p50 ms, p99 ms, how many were still unpublished)."""
    from sqlalchemy import select

    from store.db import session_scope
    from store.models import Delivery

    with session_scope(database_url) as session:
        rows = session.execute(
            select(Delivery.received_at, Delivery.published_at).where(Delivery.id > after_pk)
        ).all()
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


def _children(pid: int) -> list[int]:
    """The processes ``pid`` started (the workers of `relay up`: each leads its own group)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _signal_workers(stack: Any, sig: int) -> None:
    for pid in _children(stack.proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)


def _timed_load(stack: Any, url: str, *, webhook: bool, body: Path) -> dict[str, Any]:
    """A load, with the API process's CPU seconds per request (``server_cpu_ms``)."""
    before = _cpu_seconds(stack.proc.pid)
    result = _load(url, webhook=webhook, body=body)
    result["server_cpu_ms"] = 1000 * (_cpu_seconds(stack.proc.pid) - before) / result["count"]
    result["loadgen_cpu_ms"] = 1000 * result["loadgen_cpu_s"] / result["count"]
    return result


def _states(database_url: str) -> dict[str, int]:
    from sqlalchemy import func, select

    from store.db import session_scope
    from store.models import Delivery

    with session_scope(database_url) as session:
        rows = session.execute(select(Delivery.state, func.count()).group_by(Delivery.state))
        return {state: count for state, count in rows}


def _last_pk(database_url: str) -> int:
    from sqlalchemy import func, select

    from store.db import session_scope
    from store.models import Delivery

    with session_scope(database_url) as session:
        return int(session.scalar(select(func.max(Delivery.id))) or 0)


def _drain(database_url: str, expected: int, timeout: float = DRAIN_SECONDS) -> str:
    """Wait until ``expected`` deliveries are processed (or the timeout): what happened."""
    began = time.monotonic()
    while True:
        states = _states(database_url)
        done = states.get("processed", 0)
        if done >= expected or time.monotonic() - began > timeout:
            waiting = sum(n for state, n in states.items() if state in ("received", "processing"))
            failed = sum(n for state, n in states.items() if state in ("failed", "rejected"))
            return (
                f"{done} of {expected} processed {time.monotonic() - began:.0f} s after resuming"
                + (f", {waiting} still queued" if waiting else "")
                + f", {failed} failed"
            )
        time.sleep(0.5)


def _measure(name: str, tmp: Path, database_url: str, broker_url: str, table: Any) -> None:
    stack = start_stack(tmp=tmp, database_url=database_url, broker_url=broker_url, port=free_port())
    try:
        body = _body(tmp)
        _load(f"{stack.base_url}/healthz", webhook=False, body=body)  # warm-up
        # 1. the web tier alone: the workers (on the same 2 cores here, elsewhere in a
        # deployment) are held back (SIGSTOP) during both loads, then resumed: every delivery
        # must then be processed
        _signal_workers(stack, signal.SIGSTOP)
        try:
            floor = _timed_load(stack, f"{stack.base_url}/healthz", webhook=False, body=body)
            ingest = _timed_load(stack, stack.webhook, webhook=True, body=body)
        finally:
            _signal_workers(stack, signal.SIGCONT)
        drained = _drain(database_url, ingest["count"])
        _row(table, name, "API alone (workers paused during the load)", floor, ingest, drained)
        # 2. all in one: `relay up` as it runs, the workers processing during the load
        last_pk = _last_pk(database_url)
        floor = _timed_load(stack, f"{stack.base_url}/healthz", webhook=False, body=body)
        ingest = _timed_load(stack, stack.webhook, webhook=True, body=body)
        time.sleep(5)  # the publisher catches up with the last requests
        lag_p50, lag_p99, unpublished = _publish_lag(database_url, last_pk)
        _row(
            table,
            name,
            "relay up (workers running)",
            floor,
            ingest,
            f"stored -> published p50 {lag_p50:.0f} / p99 {lag_p99:.0f} ms"
            + (f" ({unpublished} left)" if unpublished else ""),
        )
    finally:
        _signal_workers(stack, signal.SIGCONT)
        stack.stop()


def _row(
    table: Any, name: str, mode: str, floor: dict[str, Any], ingest: dict[str, Any], after: str
) -> None:
    bad = {k: v for k, v in ingest["statuses"].items() if k != "202"}
    table.rows.append(
        [
            name,
            mode,
            f"{ingest['count']}",
            f"{ingest['rps']:.0f}",
            f"{floor['rps']:.0f}",
            f"**{ingest['rps'] / floor['rps']:.2f}**",
            f"{ingest['p99_ms']:.1f}",
            f"{floor['p99_ms']:.1f}",
            f"**{ingest['p99_ms'] / floor['p99_ms']:.1f}x**",
            f"{ingest['server_cpu_ms']:.2f} / {floor['server_cpu_ms']:.2f}",
            f"{ingest['loadgen_cpu_ms']:.2f} / {floor['loadgen_cpu_ms']:.2f}",
            after,
            json.dumps(bad) if bad else "all 202",
        ]
    )


def run(report: Report) -> None:
    table = report.table(
        f"Webhook ingest (relay up, loopback, {CONCURRENCY} concurrent connections)",
        [
            "backend",
            "mode",
            "requests",
            "ingest req/s",
            "healthz req/s (baseline)",
            "ingest / baseline",
            "ingest p99 ms",
            "healthz p99 ms",
            "p99 / healthz p99",
            "API CPU ms per request: ingest / healthz",
            "load generator CPU ms per request: ingest / healthz",
            "after the load",
            "non-202",
        ],
        note="Load from a second process (keep-alive connections); each request is a signed "
        "pull_request delivery with a new delivery id (verify, parse, store: one transaction; "
        "the outbox publisher of the control worker hands it to the broker). Baseline: GET "
        "/healthz on the same server, measured just before the ingest, same mode. 'API alone': "
        "the Celery workers (which share these 2 cores here and run elsewhere in a deployment) "
        "are stopped with SIGSTOP during both loads and resumed after; every delivery must "
        "then be processed. 'relay up': the workers run during the load.",
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
                ]
                + [""] * 11
            )
