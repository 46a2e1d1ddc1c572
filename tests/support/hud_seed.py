"""Seeded histories for the HUD's tests, screenshots and benchmark, written through the ORM
into a migrated database (SQLite or PostgreSQL).

:func:`seed_runs` writes the runner's commits: pushes to main and pull requests, each with
a plan (funnel, reasons, cut list) and results, one job failing with known failures and
artifacts, one flaky test, and one job still running. All times are relative to ``now``. The
downstreams' health histories: :mod:`tests.support.hud_seed_health`; a live run, a release
replay and a big run: :mod:`tests.support.hud_seed_live`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import insert, select

from store.db import session_scope
from store.models import (
    Delivery,
    Dispatch,
    Downstream,
    Job,
    JobTransition,
    Selection,
    SelectionTest,
    Shard,
    TestResult,
)

RUNNER = "local/spyre"
H = 3600.0


SUITES = ("common", "out", "variants", "gradients", "modules", "errors")
OPS = ("add", "mul", "softmax", "matmul", "nn.functional.gelu", "sum", "mean", "where")


def sha_of(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def test_id(i: int) -> str:
    suite = SUITES[i % len(SUITES)]
    op = OPS[i % len(OPS)].replace(".", "_")
    cls = f"Test{suite.capitalize()}PRIVATEUSE1"
    return f"spyre_stack/conformance/test_{suite}.py::{cls}::test_{suite}_{op}_{i}_spyre_float16"


def add_job(
    session: Any,
    *,
    repo: str,
    key: str,
    attempt: int = 1,
    status: str = "completed",
    conclusion: str | None = "success",
    dispatched: datetime,
    queue_s: float | None,
    e2e_s: float | None,
    event: str = "push",
    head_sha: str | None = None,
    pr: int | None = None,
    dispatch_pk: int | None = None,
    planned: int = 0,
    counts: tuple[int, int, int] = (0, 0, 0),
) -> Job:
    started = dispatched + timedelta(seconds=queue_s) if queue_s is not None else None
    completed = dispatched + timedelta(seconds=e2e_s) if e2e_s is not None else None
    job = Job(
        delivery_id=key,
        repo=repo,
        run_id=key,
        run_attempt=str(attempt),
        job_name="spyre",
        dispatch_pk=dispatch_pk,
        event_type=event,
        workflow_name="spyre-upstream-tests",
        url="",
        head_sha=head_sha,
        pr_number=pr,
        status=status,
        conclusion=conclusion if status == "completed" else None,
        dispatched_at=dispatched,
        started_at=started,
        completed_at=completed if status == "completed" else None,
        tests_passed=counts[0],
        tests_failed=counts[1],
        tests_skipped=counts[2],
        tests_total=planned or sum(counts),
    )
    session.add(job)
    session.flush()
    session.add(
        JobTransition(
            job_pk=job.id, from_status=None, to_status="dispatched", at=dispatched, source="seed"
        )
    )
    if started is not None:
        session.add(
            JobTransition(
                job_pk=job.id,
                from_status="dispatched",
                to_status="in_progress",
                at=started,
                source="seed",
            )
        )
    if status == "completed" and completed is not None:
        session.add(
            JobTransition(
                job_pk=job.id,
                from_status="in_progress",
                to_status="completed",
                conclusion=conclusion,
                at=completed,
                source="seed",
            )
        )
    return job


@dataclass
class SeededRuns:
    commits: list[str]  # newest first
    failing_job: int
    failing_sha: str
    failing_tests: list[str]
    passing_job: int
    live_job: int
    live_shards: list[int]
    flaky_test: str
    history_test: str  # has a result in every completed push job
    funnel: list[tuple[str, int, int]]
    pr_job: int
    pr_number: int
    results_per_job: int
    jobs: list[int] = field(default_factory=list)


FUNNEL = [("changes", 14, 9), ("impact", 9, 420), ("applicability", 420, 300), ("budget", 300, 0)]


def plan_of(n_tests: int, *, runner_root: str, cut: int = 5) -> dict[str, Any]:
    funnel = [
        {
            "stage": s,
            "count_in": a,
            "count_out": (b if s != "budget" else n_tests),
            "unit": "units" if s == "changes" else "variants",
            "seconds": 0.01,
            "notes": [],
        }
        for s, a, b in FUNNEL
    ]
    return {
        "schema_version": 1,
        "backend": "spyre",
        "source_kind": "git",
        "base": "base",
        "head": "head",
        "universe": {"label": "bundled", "kind": "bundled", "variants": 31232},
        "funnel": funnel,
        "fallback": False,
        "fallbacks": [],
        "counts": {"selected": n_tests, "cut": cut, "removed": 0, "shards": [n_tests]},
        "estimated_device_seconds": 0.2 * n_tests,
        "full_device_seconds": 6000.0,
        "budget_seconds": 60.0,
        "runner": {
            "rootdir": runner_root,
            "pytest_args": [
                "-p",
                "spyre_stack.testing.pytest_plugin",
                "-p",
                "testspecs.pytest_plugin",
                "--spec",
                "backends/spyre/specs",
            ],
            "env": {"SPYRE_DEVICE_COUNT": "2"},
            "preload": [],
        },
    }


def selection_rows(job_pk: int, n_tests: int, *, cut: int = 5) -> list[dict[str, Any]]:
    """The per-variant part of the plan, as the planner stores it (SelectionTest rows)."""
    blank = {
        "shard": None,
        "risk": None,
        "seconds": None,
        "seconds_source": None,
        "mode": None,
        "gating": None,
        "flag": None,
        "signals": [],
        "reasons": [],
        "rank": None,
    }
    rows = [
        {
            **blank,
            "job_pk": job_pk,
            "kind": "selected",
            "test_id": test_id(i),
            "rank": i + 1,
            "shard": 0,
            "risk": 1.0 - i / 1e5,
            "seconds": 0.2,
            "seconds_source": "history",
            "mode": "mandatory_success",
            "gating": True,
            "signals": ["operators"],
            "reasons": [f"operators: {OPS[i % len(OPS)]} changed"],
        }
        for i in range(n_tests)
    ]
    rows += [
        {
            **blank,
            "job_pk": job_pk,
            "kind": "cut",
            "test_id": test_id(100_000 + i),
            "rank": n_tests + i + 1,
            "risk": 0.1,
            "seconds": 3.0,
            "reasons": ["over the budget of 60 device-seconds"],
        }
        for i in range(cut)
    ]
    return rows


def add_delivery(
    session: Any,
    *,
    key: str,
    event: str,
    now: datetime,
    head_sha: str,
    pr: int | None,
    downstream_pk: int,
) -> int:
    normalized = {
        "delivery_id": key,
        "event": event,
        "repo": "pytorch/pytorch",
        "head_sha": head_sha,
        "pr_number": pr,
        "actionable": True,
    }
    if event == "push":
        normalized["ref"] = "refs/heads/main"
    else:
        normalized.update(base_ref="main", head_ref=f"feature-{pr}", action="synchronize")
    body = json.dumps({"seeded": key}).encode()
    delivery = Delivery(
        delivery_id=key,
        event=event,
        action=normalized.get("action"),
        repo="pytorch/pytorch",
        head_sha=head_sha,
        pr_number=pr,
        received_at=now,
        raw_body=body,
        body_sha256=hashlib.sha256(body).hexdigest(),
        state="processed",
        attempts=1,
        processed_at=now,
        normalized=normalized,
    )
    session.add(delivery)
    session.flush()
    dispatch = Dispatch(
        delivery_pk=delivery.id,
        downstream_pk=downstream_pk,
        state="sent",
        attempts=1,
        created_at=now,
    )
    session.add(dispatch)
    session.flush()
    return dispatch.id


def seed_runs(
    database_url: str,
    *,
    now: datetime,
    var_dir: Path,
    commits: int = 12,
    results_per_job: int = 60,
    runner_root: str = "/srv/crcr-relay",
    prs: int = 3,
) -> SeededRuns:
    """The runner's history: ``commits`` pushes to main (newest first), ``prs`` pull requests,
    a failing job, a flaky test, a running job."""
    artifacts = var_dir / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    with session_scope(database_url) as session:
        runner = session.scalar(select(Downstream).where(Downstream.repo == RUNNER))
        if runner is None:
            runner = Downstream(repo=RUNNER, level="L2", device="spyre", enabled=True)
            session.add(runner)
        runner.created_at = now - timedelta(days=40)
        session.flush()
        shas = [sha_of(f"commit-{i}") for i in range(commits)]  # shas[0] is the newest
        failing_index = 1
        jobs: list[int] = []
        info: dict[str, Any] = {}
        flaky = test_id(7)
        for i in reversed(range(commits)):
            at = now - timedelta(hours=2 * i + 1)
            sha = shas[i]
            dispatch = add_delivery(
                session,
                key=f"push-{i}",
                event="push",
                now=at,
                head_sha=sha,
                pr=None,
                downstream_pk=runner.id,
            )
            failing = i == failing_index
            fails = [test_id(3), test_id(11)] if failing else []
            job = add_job(
                session,
                repo=RUNNER,
                key=f"push-{i}",
                dispatched=at,
                queue_s=30,
                e2e_s=600,
                head_sha=sha,
                dispatch_pk=dispatch,
                conclusion="failure" if failing else "success",
                planned=results_per_job,
                counts=(results_per_job - len(fails), len(fails), 0),
            )
            jobs.append(job.id)
            shards_and_results(
                session,
                job,
                n=results_per_job,
                fails=fails,
                artifacts=artifacts,
                runner_root=runner_root,
            )
            if failing:
                info.update(failing_job=job.id, failing_sha=sha, failing_tests=fails)
            if i == 2:
                # a re-run on the same commit where the flaky test fails: flaky
                rerun = add_job(
                    session,
                    repo=RUNNER,
                    key=f"push-{i}",
                    attempt=2,
                    dispatched=at + timedelta(minutes=20),
                    queue_s=30,
                    e2e_s=600,
                    head_sha=sha,
                    dispatch_pk=dispatch,
                    conclusion="success",
                    planned=results_per_job,
                    counts=(results_per_job, 0, 0),
                )
                shards_and_results(
                    session,
                    rerun,
                    n=results_per_job,
                    fails=[],
                    artifacts=artifacts,
                    runner_root=runner_root,
                    flaky_fails=flaky,
                )
                jobs.append(rerun.id)
            if i == 0:
                info["passing_job"] = job.id
        pr_job = 0
        for k in range(prs):
            pr = 101 + k
            sha = sha_of(f"pr-{pr}")
            at = now - timedelta(hours=2 * k + 0.5)
            dispatch = add_delivery(
                session,
                key=f"pr-{pr}",
                event="pull_request",
                now=at,
                head_sha=sha,
                pr=pr,
                downstream_pk=runner.id,
            )
            job = add_job(
                session,
                repo=RUNNER,
                key=f"pr-{pr}",
                event="pull_request",
                pr=pr,
                dispatched=at,
                queue_s=20,
                e2e_s=400,
                head_sha=sha,
                dispatch_pk=dispatch,
                planned=20,
                counts=(20, 0, 0),
            )
            shards_and_results(
                session, job, n=20, fails=[], artifacts=artifacts, runner_root=runner_root
            )
            pr_job = pr_job or job.id
            jobs.append(job.id)
        live, live_shards = add_live_job(
            session,
            key="push-live",
            now=now,
            downstream_pk=runner.id,
            tests=40,
            runner_root=runner_root,
        )
        session.commit()
        return SeededRuns(
            commits=shas,
            failing_job=info["failing_job"],
            failing_sha=info["failing_sha"],
            failing_tests=info["failing_tests"],
            passing_job=info["passing_job"],
            live_job=live.id,
            live_shards=live_shards,
            flaky_test=flaky,
            history_test=test_id(5),
            funnel=FUNNEL,
            pr_job=pr_job,
            pr_number=101,
            results_per_job=results_per_job,
            jobs=[*jobs, live.id],
        )


def add_live_job(
    session: Any,
    *,
    key: str,
    now: datetime,
    downstream_pk: int,
    tests: int,
    runner_root: str,
    shards: int = 2,
) -> tuple[Job, list[int]]:
    """A push whose job runs now: planned, its shards started, no result stored yet."""
    sha = sha_of(key)
    dispatch = add_delivery(
        session, key=key, event="push", now=now, head_sha=sha, pr=None, downstream_pk=downstream_pk
    )
    live = add_job(
        session,
        repo=RUNNER,
        key=key,
        status="in_progress",
        dispatched=now - timedelta(minutes=3),
        queue_s=20,
        e2e_s=None,
        head_sha=sha,
        dispatch_pk=dispatch,
        planned=tests,
    )
    session.add(
        Selection(
            job_pk=live.id,
            plan=plan_of(tests, runner_root=runner_root),
            stage_counts={},
            fallbacks=[],
        )
    )
    session.execute(insert(SelectionTest), selection_rows(live.id, tests))
    shard_pks = []
    for s in range(shards):
        shard = Shard(
            job_pk=live.id,
            index=s,
            test_ids=[test_id(i) for i in range(s, tests, shards)],
            state="running",
            attempts=1,
            started_at=now,
        )
        session.add(shard)
        session.flush()
        shard_pks.append(shard.id)
    return live, shard_pks


def shards_and_results(
    session: Any,
    job: Job,
    *,
    n: int,
    fails: list[str],
    artifacts: Path,
    runner_root: str,
    flaky_fails: str | None = None,
) -> None:
    session.add(
        Selection(
            job_pk=job.id, plan=plan_of(n, runner_root=runner_root), stage_counts={}, fallbacks=[]
        )
    )
    session.execute(insert(SelectionTest), selection_rows(job.id, n))
    ids = [test_id(i) for i in range(n)]
    shard = Shard(
        job_pk=job.id,
        index=0,
        test_ids=ids,
        state="done",
        attempts=1,
        started_at=job.started_at,
        finished_at=job.completed_at,
    )
    session.add(shard)
    session.flush()
    rows = []
    for i, tid in enumerate(ids):
        outcome, message, artifact, text = "passed", None, None, None
        if tid in fails or tid == flaky_fails:
            outcome = "failed"
            message = f"AssertionError: Tensor-likes are not close! (seeded failure of {tid})"
            # where the worker wrote it; its text is served from the database (failure_text)
            artifact = str(artifacts / f"{job.id}-{i}.txt")
            text = f"{tid}\n\nTraceback (most recent call last):\n  {message}\n"
        rows.append(
            {
                "job_pk": job.id,
                "shard_pk": shard.id,
                "test_id": tid,
                "outcome": outcome,
                "duration_s": 0.05 + (i % 17) * 0.03,
                "device_time_us": 20.0 + i % 5,
                "message": message,
                "artifact_path": artifact,
                "failure_text": text,
                "spec_mode": "xfail" if i % 10 == 9 else "mandatory_success",
                "tags": ["slow"] if i % 6 == 0 else [],
                "op": OPS[i % len(OPS)],
                "dtype": "float16",
                "created_at": job.started_at or job.dispatched_at,
            }
        )
    if rows:
        session.execute(insert(TestResult), rows)
