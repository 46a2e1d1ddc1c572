"""Callback handling rate: POST /github/callback on `relay up` (OIDC token verified against a
local issuer's JWKS, rate counter, dispatch lookup, the state machine's transition), against
GET /healthz on the same server in the same run. Each callback moves a new job (distinct
run ids of one dispatched delivery): in_progress, then completed.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from benchmarks.report import Report
from tests.support.fake_github import FakeGitHub, serve
from tests.support.oidc_issuer import serve_issuer
from tests.support.services import free_port
from tests.support.stack import UPSTREAM, start_stack

RUNS = int(os.environ.get("BENCH_CALLBACK_RUNS", "200"))
CONCURRENCY = 8


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def _callbacks(url: str, token: str, client_payload: dict[str, Any]) -> dict[str, Any]:
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(RUNS):
        queue.put_nowait(i)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def body(run: int, status: str) -> bytes:
        workflow = {
            "schema_version": "1",
            "status": status,
            "name": "bench",
            "url": "https://ci/run",
            "run_id": f"run-{run}",
            "run_attempt": "1",
            "job_name": "test",
            "check_run_id": f"run-{run}-1",
            "conclusion": "success" if status == "completed" else None,
            f"{'completed' if status == 'completed' else 'started'}_at": "2026-12-01T00:00:00Z",
        }
        echoed = {k: v for k, v in client_payload.items() if k != "crcr_relay"}
        return json.dumps({**echoed, "workflow": workflow}).encode()

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            run = queue.get_nowait()
            for status in ("in_progress", "completed"):
                start = time.perf_counter()
                answer = await client.post(
                    "/github/callback", content=body(run, status), headers=headers
                )
                latencies.append(time.perf_counter() - start)
                statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1

    limits = httpx.Limits(max_connections=CONCURRENCY)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        await asyncio.gather(*(client.get("/healthz") for _ in range(CONCURRENCY)))
        began = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(CONCURRENCY)))
        elapsed = time.perf_counter() - began
    return {
        "count": len(latencies),
        "rps": len(latencies) / elapsed,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * _percentile(latencies, 0.99),
        "statuses": statuses,
    }


def _healthz(url: str) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.loadgen",
        "--url",
        f"{url}/healthz",
        "--count",
        str(2 * RUNS),
        "--concurrency",
        str(CONCURRENCY),
        "--max-seconds",
        "120",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=200)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _measure(backend: str, tmp: Path, database_url: str, broker_url: str, table: Any) -> None:
    with serve(FakeGitHub()) as fake, serve_issuer() as issuer:
        allow = tmp / "allowlist.yml"
        allow.write_text("L2:\n  - bench/down\n")
        env = {
            "RELAY_ALLOWLIST_SOURCE": str(allow),
            "RELAY_GITHUB_API_URL": fake.url,
            "RELAY_GITHUB_APP_ID": fake.app_id,
            "RELAY_GITHUB_APP_PRIVATE_KEY": fake.private_key_pem,
            "RELAY_OIDC_ISSUERS": json.dumps({issuer.url: issuer.jwks_url}),
            "RELAY_CALLBACK_RATE_PER_MINUTE": "100000",
        }
        stack = start_stack(
            tmp=tmp,
            database_url=database_url,
            broker_url=broker_url,
            port=free_port(),
            extra_env=env,
        )
        try:
            fixture = (
                Path(__file__).resolve().parents[1] / "examples/events/pull_request.opened.json"
            )
            payload = json.loads(fixture.read_bytes())
            payload["repository"]["full_name"] = UPSTREAM
            fake.pr_files[(UPSTREAM, payload["number"])] = ["torch/a.py"]
            stack.post("pull_request", json.dumps(payload).encode(), delivery_id=str(uuid.uuid4()))
            stack.wait_for(lambda: fake.dispatch_count() == 1, timeout=120, what="the dispatch")
            (call,) = fake.dispatches()
            floor = _healthz(stack.base_url)
            rate = asyncio.run(
                _callbacks(stack.base_url, issuer.mint("bench/down"), call.body["client_payload"])
            )
        finally:
            stack.stop()
    table.rows.append(
        [
            backend,
            str(rate["count"]),
            f"{rate['rps']:.0f}",
            f"{rate['p50_ms']:.1f}",
            f"{rate['p99_ms']:.1f}",
            f"{floor['rps']:.0f}",
            f"{rate['rps'] / floor['rps']:.2f}",
            json.dumps(rate["statuses"]),
        ]
    )


def run(report: Report) -> None:
    table = report.table(
        "Callback handling rate (relay up, loopback, 8 concurrent connections)",
        [
            "backend",
            "callbacks",
            "callbacks/s",
            "p50 ms",
            "p99 ms",
            "healthz req/s (baseline)",
            "callbacks / baseline",
            "answers",
        ],
        note=f"{RUNS} jobs, each an in_progress then a completed callback with an RS256 OIDC "
        "token (JWKS of a local issuer, cached), no dispatch token (L2: matched by delivery). "
        "Baseline: GET /healthz on the same server, same run, same concurrency.",
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
