"""`relay replay --events` against a running `relay up` (SQLite + embedded broker, runner off).

The replay posts in order, one event at a time, so the baseline is the same server under one
connection in the same run: benchmarks.loadgen posting signed deliveries (new ids) sequentially,
and GET /healthz (the HTTP floor). The replay rows are what its own totals report. Every row
times requests on a connection opened before its timer (the replay checks /healthz first, the
loadgen opens its connection the same way).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.loadgen import run_loadgen
from benchmarks.report import Report
from tests.support.services import free_port
from tests.support.stack import SECRETS, UPSTREAM, start_stack

COUNT = int(os.environ.get("BENCH_REPLAY_COUNT", "500"))
RATE = "50/s"
ROOT = Path(__file__).resolve().parents[1]


def _events(tmp: Path) -> tuple[Path, Path]:
    """COUNT distinct pull_request.opened events (JSON Lines) and one body for the loadgen."""
    fixture = ROOT / "examples" / "events" / "pull_request.opened.json"
    base = json.loads(fixture.read_bytes())
    base["repository"]["full_name"] = UPSTREAM
    path = tmp / "events.jsonl"
    with path.open("w") as fh:
        for i in range(COUNT):
            payload = copy.deepcopy(base)
            payload["number"] = payload["pull_request"]["number"] = 10_000 + i
            payload["pull_request"]["head"]["sha"] = f"{i:040x}"
            fh.write(json.dumps({"event": "pull_request", "payload": payload}) + "\n")
    body = tmp / "body.json"
    body.write_bytes(json.dumps(base).encode())
    return path, body


def _loadgen(url: str, body: Path | None) -> dict[str, Any]:
    signed = (body, SECRETS[0]) if body is not None else None
    return run_loadgen(url, count=COUNT, concurrency=1, max_seconds=120, signed=signed, timeout=300)


def _replay(url: str, events: Path, *extra: str) -> dict[str, Any]:
    env = {**os.environ, "RELAY_WEBHOOK_SECRETS": json.dumps(SECRETS)}
    cmd = [
        sys.executable,
        "-m",
        "cli",
        "replay",
        "--events",
        str(events),
        "--url",
        url,
        "--wait",
        "0",
        "--json",
        *extra,
    ]
    out = subprocess.run(
        cmd, capture_output=True, text=True, check=True, timeout=600, env=env, cwd=ROOT
    )
    return dict(json.loads(out.stdout)["totals"])


def run(report: Report) -> None:
    table = report.table(
        f"relay replay --events: {COUNT} recorded pull_request events in order (relay up, "
        "SQLite + embedded broker, loopback)",
        ["run", "events", "events/s", "p50 ms", "p99 ms", "answers", "events/s vs baseline"],
        note="Baseline: the same server in the same run, signed deliveries posted one at a time "
        "by benchmarks.loadgen (one connection, new ids); GET /healthz the same way is the "
        "HTTP floor. The runner is off: this measures ingest, not planning.",
    )
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        events, body = _events(tmp)
        stack = start_stack(
            tmp=tmp,
            database_url=f"sqlite:///{tmp / 'relay.sqlite'}",
            broker_url=f"sqla+sqlite:///{tmp / 'broker.sqlite'}",
            port=free_port(),
            extra_env={"RELAY_EVENT_HANDLERS": "[]"},
        )
        try:
            _loadgen(f"{stack.base_url}/healthz", None)  # warm-up
            floor = _loadgen(f"{stack.base_url}/healthz", None)
            base = _loadgen(stack.webhook, body)
            fresh = _replay(stack.base_url, events)
            again = _replay(stack.base_url, events)
            paced = _replay(stack.base_url, events, "--rate", RATE)
        finally:
            stack.stop()
    rps = float(base["rps"])

    def loadgen_row(name: str, r: dict[str, Any]) -> list[str]:
        answers = ", ".join(f"{v} x {k}" for k, v in sorted(r["statuses"].items()))
        return [
            name,
            str(r["count"]),
            f"{r['rps']:.0f}",
            f"{r['p50_ms']:.1f}",
            f"{r['p99_ms']:.1f}",
            answers,
            f"{r['rps'] / rps:.2f}",
        ]

    def replay_row(name: str, t: dict[str, Any]) -> list[str]:
        answers = ", ".join(
            f"{t[k]} {k}" for k in ("accepted", "duplicate", "ignored", "rejected") if t[k]
        )
        return [
            name,
            str(t["events"]),
            f"{t['events_per_second']:.0f}",
            f"{t['accept_ms_p50']:.1f}",
            f"{t['accept_ms_p99']:.1f}",
            answers,
            f"{t['events_per_second'] / rps:.2f}",
        ]

    table.rows += [
        loadgen_row("loadgen GET /healthz (HTTP floor)", floor),
        loadgen_row("loadgen signed webhook, new ids (baseline)", base),
        replay_row("relay replay --events (new)", fresh),
        replay_row("relay replay --events, again (duplicates)", again),
        replay_row(f"relay replay --events --rate {RATE} (duplicates)", paced),
    ]
