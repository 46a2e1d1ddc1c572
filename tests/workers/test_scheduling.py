"""Scheduling on a real stack (uvicorn, the control, planner and shard Celery worker processes;
SQLite + the embedded broker, and PostgreSQL + Redis): deliveries are processed while a release
replay is being planned, and a pull request's shards overtake a replay's on one shard worker.

The replay is a real release-replay request (``workers.replay`` through the broker, as `relay
replay --run` sends it); its planner stands in with thousands of quick sample tests and holds
the planning until the test opens a gate (``tests.support.planners.replay_or_labelled_planner``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from config.broker import TASK_REPLAY, make_producer
from config.settings import Settings
from store.db import session_scope
from store.models import Job, Shard, TestResult

REPLAY_TESTS = 2000
REPLAY_SHARD = 250


KINDS = ["sqlite+embedded", "postgres+redis"]
#: the overtaking run on PostgreSQL + Redis is `make test-long`'s (about 35 s of shards): `make
#: test` runs it on SQLite + the embedded broker, and the planning test on both
KINDS_LONG_ON_REDIS = ["sqlite+embedded", pytest.param("postgres+redis", marks=pytest.mark.long)]


@pytest.fixture(scope="module")
def stack(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    relay_up: Any,
    sample_runs: Any,
    receiver: Any,
) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("sched-" + request.param.replace("+", "-"))
    (tmp / "gates").mkdir()
    env = {
        **sample_runs.runner_env(tmp, receiver.url),
        "RELAY_PLANNER": sample_runs.REPLAY_OR_LABELLED_PLANNER,
        "RELAY_TEST_PLAN_GATE": str(tmp / "gates"),
        "RELAY_TEST_REPLAY_TESTS": str(REPLAY_TESTS),
        "RELAY_TEST_REPLAY_SHARD": str(REPLAY_SHARD),
        "SAMPLE_MANY_SECONDS": "0.01",
        # the shards' scratch (their event files) is kept: the test counts each test's starts
        "RELAY_RUNS_KEEP_SECONDS": "3600",
    }
    with relay_up.running(request.param, tmp, extra_env=env) as running:
        running.gates = tmp / "gates"
        running.var_dir = tmp
        yield running


def _request_replay(stack: Any, base: str, head: str) -> str:
    producer = make_producer(Settings(broker_url=stack.broker_url, database_url=stack.database_url))
    producer.send_task(TASK_REPLAY, args=[base, head])
    return f"v{head}"  # a replay's job is keyed by the tested revision (CRCR's periodic runs)


def _job(stack: Any, delivery_id: str) -> Job | None:
    return stack.job_for(delivery_id)


def _seconds(a: datetime, b: datetime) -> float:
    if (a.tzinfo is None) != (b.tzinfo is None):
        a, b = a.replace(tzinfo=None), b.replace(tzinfo=None)
    return (b - a).total_seconds()


@pytest.mark.parametrize("stack", KINDS, indirect=True, scope="module")
def test_deliveries_are_processed_while_a_replay_is_planned(stack: Any, sample_runs: Any) -> None:
    replay = _request_replay(stack, "0.1", "0.2")  # its gate stays closed: planning goes on
    planning = stack.wait_for(
        lambda: (j := _job(stack, replay)) is not None and j.status == "planning" and j,
        timeout=60,
        what="the replay job in planning",
    )
    assert planning.planning_started_at is not None
    delivery_id = stack.submit(sample_runs.pr_body("ok"))
    created = stack.wait_for(
        lambda: (j := _job(stack, delivery_id)) is not None and j.status != "planning" and j,
        timeout=30,
        what="the pull request's job planned while the replay is planned",
    )
    assert created.tests_total == 4
    done = stack.wait_job(delivery_id, timeout=120)
    assert done.conclusion == "success"
    still = _job(stack, replay)
    assert still is not None and still.status == "planning" and still.tests_total == 0
    detail = stack.delivery(delivery_id)
    assert detail is not None and detail.state == "processed"

    # a one-shard replay; written aside and renamed, so the planner never reads the gate empty
    (stack.gates / "0.1-0.2.tmp").write_text(str(REPLAY_SHARD))
    (stack.gates / "0.1-0.2.tmp").rename(stack.gates / "0.1-0.2.open")
    finished = stack.wait_job(replay, timeout=600)
    assert finished.conclusion == "success" and finished.tests_total == REPLAY_SHARD
    assert finished.planning_started_at is not None
    assert done.completed_at is not None
    # it was planned from before the pull request arrived until after its job completed
    assert _seconds(finished.planning_started_at, done.dispatched_at) > 0
    assert _seconds(done.completed_at, finished.dispatched_at) > 0


@pytest.mark.parametrize("stack", KINDS_LONG_ON_REDIS, indirect=True, scope="module")
def test_a_pull_request_overtakes_a_running_replay(stack: Any, sample_runs: Any) -> None:
    (stack.gates / "1.0-1.1.open").touch()
    replay = _request_replay(stack, "1.0", "1.1")

    def replay_running() -> Job | None:
        job = _job(stack, replay)
        if job is None or job.status != "in_progress":
            return None
        with session_scope(stack.database_url) as s:
            n = s.scalar(
                select(func.count()).select_from(TestResult).where(TestResult.job_pk == job.id)
            )
        return job if n else None

    replay_job = stack.wait_for(replay_running, timeout=120, what="the replay running")
    delivery_id = stack.submit(sample_runs.pr_body("ok"))
    pr = stack.wait_job(delivery_id, timeout=300)
    assert pr.conclusion == "success"
    finished = stack.wait_job(replay, timeout=900)
    assert finished.conclusion == "success"
    assert pr.completed_at is not None and finished.completed_at is not None
    assert _seconds(pr.completed_at, finished.completed_at) > 0, "the PR completes first"

    with session_scope(stack.database_url) as s:
        replay_shards = list(s.scalars(select(Shard).where(Shard.job_pk == replay_job.id)))
        pr_shards = list(s.scalars(select(Shard).where(Shard.job_pk == pr.id)))
        first_result = s.scalar(
            select(func.min(TestResult.created_at)).where(TestResult.job_pk == pr.id)
        )
        replay_ids = list(
            s.scalars(select(TestResult.test_id).where(TestResult.job_pk == replay_job.id))
        )
    assert len(replay_shards) == REPLAY_TESTS // REPLAY_SHARD
    assert all(sh.state == "done" and sh.attempts == 1 for sh in replay_shards + pr_shards)
    # no replay shard started between the PR's plan and the start of its last shard: the one
    # shard worker went to the PR as soon as the replay shard it was running ended
    last_pr_start = max(sh.started_at for sh in pr_shards if sh.started_at is not None)
    overtaken = [
        sh.index
        for sh in replay_shards
        if sh.started_at is not None
        and _seconds(pr.dispatched_at, sh.started_at) > 0
        and _seconds(sh.started_at, last_pr_start) > 0
    ]
    assert overtaken == []
    assert any(
        sh.started_at is not None and _seconds(last_pr_start, sh.started_at) > 0
        for sh in replay_shards
    ), "the replay was still running when the PR got the worker"
    # its first result within one shard's duration (the longest replay shard) of its plan,
    # plus the broker's hand-off (the embedded broker polls once a second)
    longest = max(
        _seconds(sh.started_at, sh.finished_at)
        for sh in replay_shards
        if sh.started_at is not None and sh.finished_at is not None
    )
    assert first_result is not None
    waited = _seconds(pr.dispatched_at, first_result)
    assert waited <= longest + 5, (waited, longest)
    # the replay finished with nothing lost or run twice
    assert len(replay_ids) == len(set(replay_ids)) == REPLAY_TESTS
    starts: Counter[str] = Counter()
    for events in Path(stack.var_dir, "runs", f"job-{replay_job.id}").glob("*/events-*.jsonl"):
        for line in events.read_text().splitlines():
            event = json.loads(line)
            if event["kind"] == "start":
                starts[event["nodeid"]] += 1
    assert len(starts) == REPLAY_TESTS and set(starts.values()) == {1}
