"""The broker (Redis, no persistence, as .ci/run runs it) restarts while tasks are queued and
while a delivery arrives: nothing is lost. The database is the source of truth; the sweeper
re-enqueues what the broker forgot."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx


def test_broker_restart_loses_nothing(
    tmp_path: Path,
    own_redis: Any,
    relay_up: Any,
    sample_runs: Any,
    receiver: Any,
    postgres_url: str,
) -> None:
    env = sample_runs.runner_env(tmp_path, receiver.url)
    stack = relay_up.start(
        tmp=tmp_path, database_url=postgres_url, broker_url=own_redis.url, extra_env=env
    )
    try:
        long_run = stack.submit(sample_runs.pr_body("long"))
        stack.wait_for(
            lambda: (j := stack.job_for(long_run)) is not None and j.status == "in_progress",
            what="the long job running",
        )
        # Two more runs: planned at once by the planner worker, their shards queued behind
        # the long one on the single shard worker.
        queued = [stack.submit(sample_runs.pr_body("ok")), stack.submit(sample_runs.pr_body("fail"))]
        stack.wait_for(
            lambda: all(
                (j := stack.job_for(d)) is not None and j.status != "planning" for d in queued
            ),
            what="queued jobs planned",
        )
        own_redis.stop()
        # A delivery arriving while the broker is down is stored (202) all the same.
        during = stack.submit(sample_runs.pr_body("ok"))
        assert stack.delivery(during) is not None
        time.sleep(1)
        own_redis.start()
        assert stack.wait_job(long_run, timeout=180).conclusion == "success"
        assert stack.wait_job(queued[0], timeout=180).conclusion == "success"
        assert stack.wait_job(queued[1], timeout=180).conclusion == "failure"
        assert stack.wait_job(during, timeout=180).conclusion == "success"
        for delivery_id, expected in (
            (queued[0], {"test_passes_one", "test_slow_a", "test_passes_two", "test_slow_b"}),
            (during, {"test_passes_one", "test_slow_a", "test_passes_two", "test_slow_b"}),
            (queued[1], {"test_passes_one", "test_fails"}),
        ):
            job = stack.job_for(delivery_id)
            assert job is not None
            assert set(stack.results(job.id)) == expected
        assert httpx.get(f"{stack.base_url}/readyz").json()["broker"]["ok"] is True
    finally:
        stack.stop()
