"""Fan-out: webhook latency with 1, 10 and 50 downstreams, this relay (`relay up`: the request
writes the delivery and its outbox; Celery workers send the dispatches) against a baseline that
dispatches inside the request as PyTorch's deployed relay does (a pool of 32 threads). Both
send to the same fake GitHub API over loopback, which takes BENCH_FANOUT_GITHUB_MS (default
250 ms) to accept each repository_dispatch. Load from a second process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.loadgen import run_loadgen
from benchmarks.report import Report
from tests.support.fake_github import FakeGitHub, serve
from tests.support.services import free_port
from tests.support.stack import SECRETS, UPSTREAM, start_stack

COUNT = int(os.environ.get("BENCH_FANOUT_COUNT", "100"))
CONCURRENCY = 8
GITHUB_MS = float(os.environ.get("BENCH_FANOUT_GITHUB_MS", "250"))
DOWNSTREAMS = (1, 10, 50)
DRAIN_SECONDS = 60.0


def _load(url: str, body: Path) -> dict[str, object]:
    return run_loadgen(
        url,
        count=COUNT,
        concurrency=CONCURRENCY,
        max_seconds=300,
        signed=(body, SECRETS[0]),
        timeout=400,
    )


def _baseline(fake: FakeGitHub, repos: int, body: Path) -> dict[str, object]:
    fake.tokens["baseline-token"] = (1, time.time() + 3600)
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.fanout_baseline",
            "--port",
            str(port),
            "--github",
            fake.url,
            "--repos",
            str(repos),
            "--secret",
            SECRETS[0],
            "--token",
            "baseline-token",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        return _load(f"http://127.0.0.1:{port}/github/webhook", body)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _measure(
    backend: str, tmp: Path, database_url: str, broker_url: str, fake: FakeGitHub, table: Any
) -> None:
    fixture = Path(__file__).resolve().parents[1] / "examples/events/pull_request.opened.json"
    payload = json.loads(fixture.read_bytes())
    payload["repository"]["full_name"] = UPSTREAM
    fake.pr_files[(UPSTREAM, payload["number"])] = ["torch/a.py"]
    body = tmp / "body.json"
    body.write_bytes(json.dumps(payload).encode())
    allow = tmp / "allowlist.yml"
    allow.write_text("L2: []\n")
    env = {
        "RELAY_ALLOWLIST_SOURCE": str(allow),
        "RELAY_ALLOWLIST_RELOAD_SECONDS": "0.5",
        "RELAY_GITHUB_API_URL": fake.url,
        "RELAY_GITHUB_APP_ID": fake.app_id,
        "RELAY_GITHUB_APP_PRIVATE_KEY": fake.private_key_pem,
    }
    stack = start_stack(
        tmp=tmp, database_url=database_url, broker_url=broker_url, port=free_port(), extra_env=env
    )
    try:
        for n in DOWNSTREAMS:
            allow.write_text("L2:\n" + "".join(f"  - bench/down{i:02d}\n" for i in range(n)))
            time.sleep(2)  # the registry reloads the allowlist
            before = fake.dispatch_count()
            try:
                relay = _load(stack.webhook, body)
                deadline = time.monotonic() + DRAIN_SECONDS
                while fake.dispatch_count() - before < n * COUNT and time.monotonic() < deadline:
                    time.sleep(0.5)
                sent = fake.dispatch_count() - before
                base = _baseline(fake, n, body)
            except RuntimeError as exc:  # reported in the table, the other rows still run
                table.rows.append([backend, str(n), f"failed: {str(exc)[-200:]}"] + [""] * 5)
                continue
            table.rows.append(
                [
                    backend,
                    str(n),
                    f"{relay['p50_ms']:.1f}",
                    f"{relay['p99_ms']:.1f}",
                    f"{base['p50_ms']:.1f}",
                    f"{base['p99_ms']:.1f}",
                    f"{float(base['p99_ms']) / float(relay['p99_ms']):.1f}x",  # type: ignore[arg-type]
                    f"{sent} of {n * COUNT}",
                ]
            )
    finally:
        stack.stop()


def run(report: Report) -> None:
    table = report.table(
        f"Fan-out: webhook latency by number of downstreams (GitHub answers in {GITHUB_MS:.0f} ms)",
        [
            "relay backend",
            "downstreams",
            "relay p50 ms",
            "relay p99 ms",
            "baseline p50 ms",
            "baseline p99 ms",
            "baseline p99 / relay p99",
            f"relay dispatches sent (within {DRAIN_SECONDS:.0f} s of the last webhook)",
        ],
        note=f"{COUNT} signed pull_request webhooks per row, {CONCURRENCY} connections, load from "
        "a second process. Relay: `relay up` (the request stores the delivery with one outbox "
        "row per downstream; workers send, 16 at a time per delivery). Baseline: dispatches "
        "inside the request on up to 32 threads, as the deployed CRCR relay does.",
    )
    with tempfile.TemporaryDirectory() as d, serve(FakeGitHub()) as fake:
        tmp = Path(d)
        fake.dispatch_delay = GITHUB_MS / 1000
        (tmp / "sqlite").mkdir()
        _measure(
            "SQLite + embedded broker",
            tmp / "sqlite",
            f"sqlite:///{tmp / 'sqlite' / 'relay.sqlite'}",
            f"sqla+sqlite:///{tmp / 'sqlite' / 'broker.sqlite'}",
            fake,
            table,
        )
        if os.environ.get("RELAY_TEST_POSTGRES_URL") and os.environ.get("RELAY_TEST_REDIS_URL"):
            from tests.support.services import fresh_postgres_database, fresh_redis_url

            (tmp / "pg").mkdir()
            with fresh_postgres_database() as url:
                _measure("PostgreSQL + Redis", tmp / "pg", url, fresh_redis_url(), fake, table)
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
