"""GET /metrics: Prometheus text with deliveries, dispatches and their failures and latency per
downstream, callbacks by status code, jobs by conclusion, overdue jobs, queue depth."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_after_a_fan_out_and_callbacks(
    bench: Callable[..., Any], issuer: Any, example_events: Path, github_answers: Any
) -> None:
    b = bench({"L2": ["org/a", "org/b"]})
    b.github.script("org/b", github_answers.server_error(502))
    payload = json.loads((example_events / "pull_request.opened.json").read_text())
    assert b.post("pull_request", payload, delivery_id="m-1").status_code == 202
    b.settle()
    assert b.client.post("/github/callback", content=b"{}").status_code == 401
    (call,) = b.github.dispatches("org/a")
    body = {
        **call.body["client_payload"],
        "workflow": {
            "status": "completed",
            "conclusion": "success",
            "name": "w",
            "url": "u",
            "run_id": "1",
            "run_attempt": "1",
            "job_name": "j",
            "check_run_id": "1-1",
            "completed_at": "2026-12-01T00:00:00Z",
        },
    }
    token = {"Authorization": f"Bearer {issuer.mint('org/a')}"}
    assert b.client.post("/github/callback", json=body, headers=token).status_code == 200
    answer = b.client.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    got = _samples(answer.text)
    assert got[("relay_deliveries", (("state", "received"),))] == 1
    assert got[("relay_dispatches", (("downstream", "org/a"), ("state", "sent")))] == 1
    assert got[("relay_dispatches", (("downstream", "org/b"), ("state", "sent")))] == 1
    assert got[("relay_dispatch_failed_attempts", (("downstream", "org/b"),))] == 1
    assert got[("relay_dispatch_failed_attempts", (("downstream", "org/a"),))] == 0
    assert got[("relay_dispatch_latency_seconds_count", (("downstream", "org/a"),))] == 1
    assert got[("relay_callbacks_total", (("code", "401"),))] == 1
    assert got[("relay_callbacks_total", (("code", "200"),))] == 1
    key = (("conclusion", "success"), ("downstream", "org/a"), ("status", "completed"))
    assert got[("relay_jobs", key)] == 1
    assert got[("relay_jobs_overdue", ())] == 0
