"""The loop end to end: signed webhook through uvicorn -> stored delivery -> plan -> shards on a
real Celery worker process -> results in the database -> job reported (and CRCR callbacks to a
recording receiver). Once on SQLite + the embedded broker, once on PostgreSQL + Redis."""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from backends.base import torch_build
from store.db import session_scope
from store.models import Job, Shard, TestResult


@pytest.fixture(scope="module", params=["sqlite+embedded", "postgres+redis"])
def loop(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    relay_up: Any,
    sample_runs: Any,
    receiver: Any,
) -> Iterator[Any]:
    """`relay up` whose runner plans with the labelled planner over the sample suite and calls
    back to ``receiver``; once on SQLite + the embedded broker, once on PostgreSQL + Redis."""
    tmp = tmp_path_factory.mktemp("loop-" + request.param.replace("+", "-"))
    with relay_up.running(
        request.param, tmp, extra_env=sample_runs.runner_env(tmp, receiver.url)
    ) as stack:
        yield stack


def test_signed_webhook_to_reported_job(loop: Any, receiver: Any, sample_runs: Any) -> None:
    body = sample_runs.pr_body("ok")
    delivery_id = loop.submit(body)
    job = loop.wait_job(delivery_id)
    assert (job.status, job.conclusion) == ("completed", "success")
    assert loop.results(job.id) == {
        n: "passed" for n in ("test_passes_one", "test_slow_a", "test_passes_two", "test_slow_b")
    }
    listed = httpx.get(f"{loop.base_url}/api/v1/jobs").json()["items"]
    mine = next(j for j in listed if j["id"] == job.id)
    assert mine["test_results"] == {
        "passed": 4,
        "failed": 0,
        "skipped": 0,
        "xfailed": 0,
        "xpassed": 0,
        "total": 4,
    }
    # the job and its delivery link both ways
    assert mine["delivery_id"] == delivery_id
    delivery = httpx.get(f"{loop.base_url}/api/v1/deliveries/{delivery_id}").json()
    assert delivery["job_ids"] == [job.id]
    assert (mine["status"], mine["conclusion"], mine["planned"]) == ("completed", "success", 4)
    detail = httpx.get(f"{loop.base_url}/api/v1/jobs/{job.id}").json()
    assert [t["to_status"] for t in detail["transitions"]] == [
        "planning",
        "dispatched",
        "in_progress",
        "completed",
    ]
    assert [t["from_status"] for t in detail["transitions"]] == [
        None,
        "planning",
        "dispatched",
        "in_progress",
    ]
    assert detail["planning_started_at"] is not None
    assert detail["planning_started_at"] <= detail["dispatched_at"] <= detail["started_at"]
    assert [s["state"] for s in detail["shards"]] == ["done", "done"]

    calls = loop.wait_for(
        lambda: (
            [
                c
                for c in receiver.calls
                if c.body["delivery_id"] == delivery_id
                and len([x for x in receiver.calls if x.body["delivery_id"] == delivery_id]) >= 2
            ]
            or None
        ),
        what="two callbacks",
    )
    assert [c.body["workflow"]["status"] for c in calls] == ["in_progress", "completed"]
    for c in calls:
        assert c.headers["authorization"] == f"Bearer {sample_runs.TOKEN}"
        assert set(c.body) == {"event_type", "delivery_id", "payload", "workflow"}
        assert c.body["event_type"] == "pull_request"
        assert c.body["payload"] == json.loads(body)  # the upstream webhook body, verbatim
    started, completed = calls[0].body["workflow"], calls[1].body["workflow"]
    common = {
        "schema_version": "1",
        "name": "spyre-upstream-tests",
        "url": f"http://127.0.0.1:8000/api/v1/jobs/{job.id}",
        "run_id": str(job.run_id),
        "run_attempt": "1",
        "job_name": "spyre",
        "check_run_id": f"{job.run_id}-1",
        # what the job tested: the sample suite's plan runs on the worker's own torch
        "summary": f"upstream under test: torch {torch_build()} (the installed torch)",
    }
    assert started == {
        **common,
        "status": "in_progress",
        "conclusion": None,
        "started_at": started["started_at"],
    }
    assert completed == {
        **common,
        "status": "completed",
        "conclusion": "success",
        "completed_at": completed["completed_at"],
        "test_results": {"passed": 4, "failed": 0, "skipped": 0, "total": 4},
    }
    for stamp in (started["started_at"], completed["completed_at"]):
        assert len(stamp) == 20 and stamp.endswith("Z") and stamp[10] == "T"


def test_failing_test_fails_the_job(loop: Any, sample_runs: Any) -> None:
    job = loop.wait_job(loop.submit(sample_runs.pr_body("fail")))
    assert job.conclusion == "failure"
    assert loop.results(job.id) == {"test_passes_one": "passed", "test_fails": "failed"}
    with session_scope(loop.database_url) as s:
        message = s.scalar(
            select(TestResult.message).where(
                TestResult.job_pk == job.id, TestResult.outcome == "failed"
            )
        )
        failed = s.scalar(
            select(TestResult).where(TestResult.job_pk == job.id, TestResult.outcome == "failed")
        )
        assert failed is not None
        result_id, text = failed.id, failed.failure_text
    assert "arithmetic is broken" in (message or "")
    # the full failure text is in the database, served from there; the worker's scratch is gone
    assert text and text.startswith(f"{sample_runs.SAMPLE}::test_fails")
    assert "arithmetic is broken" in text
    served = httpx.get(f"{loop.base_url}/runs/{job.id}/artifacts/{result_id}", timeout=10)
    assert served.status_code == 200 and served.text == text
    assert not (Path(loop.env["RELAY_VAR_DIR"]) / "runs" / f"job-{job.id}").exists()


def test_a_module_that_fails_to_import_gates_the_job_red(loop: Any, sample_runs: Any) -> None:
    job = loop.wait_job(loop.submit(sample_runs.pr_body("broken_import")))
    assert job.conclusion == "failure"
    assert loop.results(job.id) == {"test_passes_one": "passed", "test_uses_the_helper": "error"}
    errors = httpx.get(
        f"{loop.base_url}/api/v1/jobs/{job.id}/results", params={"outcome": "error"}, timeout=30
    ).json()["items"]
    assert [r["test_id"].rsplit("::", 1)[1] for r in errors] == ["test_uses_the_helper"]
    assert errors[0]["message"].startswith(
        "collection failed: ImportError: cannot import name 'renamed_helper' from"
    ), errors[0]["message"]


def test_no_test_ran_is_not_success(loop: Any, receiver: Any, sample_runs: Any) -> None:
    delivery_id = loop.submit(sample_runs.pr_body("empty"))
    job = loop.wait_job(delivery_id)
    assert job.conclusion == "failure"
    assert loop.results(job.id) == {"test_skipped": "skipped"}
    done = loop.wait_for(
        lambda: [
            c
            for c in receiver.calls
            if c.body["delivery_id"] == delivery_id and c.body["workflow"]["status"] == "completed"
        ],
        what="completed callback",
    )
    assert done[0].body["workflow"]["test_results"] == {
        "passed": 0,
        "failed": 0,
        "skipped": 1,
        "total": 1,
    }


# Fault tests run on the embedded stack (the broker restart has its own Redis test).
embedded_only = pytest.mark.parametrize("loop", ["sqlite+embedded"], indirect=True)


@pytest.fixture
def sqlite_only(loop: Any) -> Any:
    return loop


@embedded_only
def test_segfault_and_hang_are_recorded_and_the_shard_continues(
    sqlite_only: Any, sample_runs: Any
) -> None:
    job = sqlite_only.wait_job(sqlite_only.submit(sample_runs.pr_body("faults")))
    assert sqlite_only.results(job.id) == {
        "test_passes_one": "passed",
        "test_segfaults": "crashed",
        "test_passes_two": "passed",
        "test_hangs": "timeout",
        "test_slow_a": "passed",
    }
    assert job.conclusion == "failure"


def _running_owner(stack: Any, delivery_id: str) -> str | None:
    """The owner of the job's running shard once one of its results is stored."""
    job = stack.job_for(delivery_id)
    if job is None:
        return None
    with session_scope(stack.database_url) as s:
        shard = s.scalar(select(Shard).where(Shard.job_pk == job.id))
        n = s.scalar(
            select(func.count()).select_from(TestResult).where(TestResult.job_pk == job.id)
        )
    if shard is not None and shard.state == "running" and n and n >= 1 and shard.owner:
        return str(shard.owner)
    return None


@embedded_only
def test_worker_killed_mid_shard_resumes_without_loss_or_duplicates(
    sqlite_only: Any, sample_runs: Any
) -> None:
    stack = sqlite_only
    delivery_id = stack.submit(sample_runs.pr_body("long"))

    owner = stack.wait_for(
        lambda: _running_owner(stack, delivery_id),
        what="the shard to be running with a result stored",
    )
    pid = int(owner.split(":")[1])
    os.kill(pid, signal.SIGKILL)  # the Celery pool process running the shard
    job = stack.wait_job(delivery_id, timeout=180)
    assert job.conclusion == "success"
    assert stack.results(job.id) == {
        n: "passed"
        for n in ("test_slow_a", "test_slow_b", "test_slow_c", "test_slow_d", "test_passes_one")
    }
    with session_scope(stack.database_url) as s:
        shard = s.scalar(select(Shard).where(Shard.job_pk == job.id))
        total = s.scalar(
            select(func.count()).select_from(TestResult).where(TestResult.job_pk == job.id)
        )
    assert shard is not None and shard.attempts == 2
    assert total == 5
    assert any(
        line.get("event") == "shard starting" and line.get("already_done", 0) >= 1
        for line in stack.log_lines()
    )


def test_shard_host_lost_mid_shard_is_handed_back_by_the_sweeper(
    loop: Any, sample_runs: Any
) -> None:
    """The shard worker's whole process group (main process, pool, test processes) SIGKILLed
    mid-shard, as a lost machine: no message comes back (the embedded broker deleted it, Redis
    would hold it an hour), so the sweeper hands the shard back once its lease expired; `relay
    up` restarts the worker, which resumes it. Every result stored once."""
    stack = loop
    delivery_id = stack.submit(sample_runs.pr_body("long"))
    owner = stack.wait_for(
        lambda: _running_owner(stack, delivery_id),
        what="the shard to be running with a result stored",
    )
    group = os.getpgid(int(owner.split(":")[1]))
    assert group not in (os.getpgid(0), stack.proc.pid)  # the shard worker's own session
    os.killpg(group, signal.SIGKILL)
    job = stack.wait_job(delivery_id, timeout=240)
    assert job.conclusion == "success", stack.log_tail()
    assert stack.results(job.id) == {
        n: "passed"
        for n in ("test_slow_a", "test_slow_b", "test_slow_c", "test_slow_d", "test_passes_one")
    }
    with session_scope(stack.database_url) as s:
        shard = s.scalar(select(Shard).where(Shard.job_pk == job.id))
        total = s.scalar(
            select(func.count()).select_from(TestResult).where(TestResult.job_pk == job.id)
        )
    assert shard is not None and shard.attempts == 2 and total == 5
    requeued = [
        line
        for line in stack.log_lines()
        if line.get("event") == "re-queued shards whose worker was lost"
    ]
    assert any(
        entry["shard_pk"] == shard.id and entry["owner"] == owner
        for line in requeued
        for entry in line["shards"]
    ), stack.log_tail()


@embedded_only
def test_newer_push_cancels_the_superseded_job(sqlite_only: Any, sample_runs: Any) -> None:
    stack = sqlite_only
    number = uuid.uuid4().int % 10**6 + 2_000_000
    first = stack.submit(sample_runs.pr_body("three", number=number))
    stack.wait_for(
        lambda: (j := stack.job_for(first)) is not None and j.status == "in_progress",
        what="first job running",
    )
    second = stack.submit(sample_runs.pr_body("ok", number=number, action="synchronize"))
    old = stack.wait_job(first)
    new = stack.wait_job(second)
    assert old.conclusion == "cancelled" and old.superseded_by_pk == new.id
    assert new.conclusion == "success"
    with session_scope(stack.database_url) as s:
        states = sorted(s.scalars(select(Shard.state).where(Shard.job_pk == old.id)))
    assert states.count("cancelled") >= 1
    # the long shard was stopped: its unfinished tests are recorded as not run, never as passed
    old_results = stack.results(old.id)
    assert "not_run" in old_results.values()


@embedded_only
def test_closed_pr_cancels_its_running_job(sqlite_only: Any, sample_runs: Any) -> None:
    stack = sqlite_only
    number = uuid.uuid4().int % 10**6 + 3_000_000
    first = stack.submit(sample_runs.pr_body("three", number=number))
    stack.wait_for(
        lambda: (j := stack.job_for(first)) is not None and j.status == "in_progress",
        what="job running",
    )
    closed = json.loads(sample_runs.pr_body("three", number=number, action="closed"))
    closed["pull_request"]["merged"] = False
    stack.submit(json.dumps(closed).encode())
    assert stack.wait_job(first).conclusion == "cancelled"


def test_nightly_self_report(loop: Any, receiver: Any, relay_up: Any) -> None:
    from config.broker import TASK_NIGHTLY, make_producer
    from config.settings import Settings

    sha = uuid.uuid4().hex + "00000000"
    producer = make_producer(Settings(broker_url=loop.broker_url, database_url=loop.database_url))
    for _ in range(2):  # idempotent: one run per day and SHA
        producer.send_task(TASK_NIGHTLY, kwargs={"head_sha": sha, "day": "2026-11-29"})
    job = loop.wait_job(sha)
    assert (job.event_type, job.conclusion) == ("nightly", "success")
    calls = loop.wait_for(
        lambda: [c for c in receiver.calls if c.body["delivery_id"] == sha], what="nightly callback"
    )
    with session_scope(loop.database_url) as s:
        assert s.scalar(select(func.count()).select_from(Job).where(Job.delivery_id == sha)) == 1
    assert len(calls) == 1  # CRCR takes only `completed` for nightly
    body = calls[0].body
    assert body["event_type"] == "nightly"
    assert body["payload"] == {"repository": {"full_name": relay_up.UPSTREAM}, "head_sha": sha}
    assert body["workflow"]["status"] == "completed"
    assert body["workflow"]["test_results"] == {"passed": 1, "failed": 0, "skipped": 0, "total": 1}
