"""The runner's tasks: plan a dispatch, run its shards, report the job (CRCR-shaped).

    process_delivery ─▶ fan-out: one dispatch for the in-process runner ─▶ workers.plan
    workers.plan ─▶ job + selection + shards ─▶ workers.run_shard x N ─▶ workers.report

Every effect is idempotent (see workers.jobs); a shard is leased so a redelivered task after a
killed worker resumes it, skipping the tests whose results are already stored.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from typing import Any

from celery import Task
from sqlalchemy import select

from relay.crcr import callback as crcr_callback
from relay.crcr.client import CallbackError, send
from relay.db import session_scope
from relay.github.events import UpstreamEvent, parse_body, unwrap_dispatch
from relay.logs import bind
from relay.models import (
    Conclusion,
    Delivery,
    Dispatch,
    DispatchState,
    Downstream,
    Job,
    JobStatus,
    Level,
    Selection,
    Shard,
    ShardState,
    utcnow,
)
from relay.queue import (
    SHARD_QUEUE,
    TASK_NIGHTLY,
    TASK_REPLAY,
    TASK_RUN_SHARD,
    TASK_SWEEP_JOBS,
    queue_depth,
)
from relay.settings import Settings, get_settings
from workers import jobs
from workers.celery_app import app
from workers.harness.launchers import FreshProcessLauncher, Launcher, WarmPool
from workers.harness.runner import TestOutcome, run_shard
from workers.planning import PlannedRun, load_planner

log = logging.getLogger("workers.pipeline")

TASK_PLAN = "workers.plan"
NIGHTLY_EVENTS = ("nightly", "periodic")
TASK_REPORT = "workers.report"


# ----------------------------------------------------------------------------- fan-out


def runner_downstream(session: Any, settings: Settings) -> Downstream:
    row = session.scalar(select(Downstream).where(Downstream.repo == settings.runner_repo))
    if row is None:
        row = Downstream(
            repo=settings.runner_repo, level=Level.L2.value, device=settings.runner_backend,
            policy={"cancel_superseded": settings.cancel_superseded}, enabled=True,
        )  # fmt: skip
        session.add(row)
        session.flush()
    return row


def fan_out(event: UpstreamEvent, delivery_pk: int, settings: Settings) -> list[int]:
    """Dispatches to create for this event (idempotent); returns the ones to plan."""
    if not settings.runner_enabled:
        return []
    with session_scope(settings.database_url) as session:
        downstream = runner_downstream(session, settings)
        if not downstream.enabled:
            return []
        existing = session.scalar(
            select(Dispatch).where(
                Dispatch.delivery_pk == delivery_pk, Dispatch.downstream_pk == downstream.id
            )
        )
        if existing is None:
            existing = Dispatch(delivery_pk=delivery_pk, downstream_pk=downstream.id)
            session.add(existing)
            session.flush()
        if existing.state != DispatchState.PENDING.value:
            return []
        return [existing.id]


# ----------------------------------------------------------------------------- helpers


def _upstream_payload(delivery: Delivery) -> tuple[str, str, dict[str, Any]]:
    """(event_type, CRCR delivery id, upstream payload) as a downstream sees them."""
    payload = parse_body(delivery.raw_body)
    if delivery.event in NIGHTLY_EVENTS:  # delivery_id is the tested upstream SHA
        return delivery.event, str(payload.get("head_sha")), payload
    if delivery.source == "repository_dispatch":
        unwrapped = unwrap_dispatch(payload)
        if unwrapped is not None:
            return unwrapped
    return delivery.event, delivery.delivery_id, payload


def _callback(settings: Settings, job: Job, delivery: Delivery | None, status: str) -> None:
    if not settings.callback_url:
        return
    if job.event_type in NIGHTLY_EVENTS and status != "completed":
        return  # CRCR takes only `completed` for nightly / periodic self-reports
    payload: dict[str, Any]
    if delivery is None:
        event_type, delivery_id, payload = job.event_type or "nightly", job.delivery_id, {}
    else:
        event_type, delivery_id, payload = _upstream_payload(delivery)
    body = crcr_callback.build(
        event_type=event_type,
        delivery_id=delivery_id,
        payload=payload,
        status=status,  # type: ignore[arg-type]
        workflow_name=job.workflow_name or settings.runner_workflow,
        url=job.url or "",
        run_id=job.run_id,
        run_attempt=job.run_attempt,
        job_name=job.job_name,
        check_run_id=job.check_run_id,
        started_at=job.started_at if status == "in_progress" else None,
        completed_at=job.completed_at if status == "completed" else None,
        conclusion=job.conclusion if status == "completed" else None,  # type: ignore[arg-type]
        test_results=crcr_callback.TestCounts(
            passed=job.tests_passed,
            failed=job.tests_failed,
            skipped=job.tests_skipped,
            total=job.tests_passed + job.tests_failed + job.tests_skipped,
        )
        if status == "completed"
        else None,
    )
    token = settings.callback_token.get_secret_value() if settings.callback_token else None
    try:
        send(settings.callback_url, body, token=token)
        log.info("callback sent", extra={"status": status, "job_pk": job.id})
    except CallbackError:
        log.exception("callback failed", extra={"status": status, "job_pk": job.id})


def _delivery_for(session: Any, job: Job) -> Delivery | None:
    if job.dispatch_pk is None:
        return None
    dispatch = session.get(Dispatch, job.dispatch_pk)
    return dispatch.delivery if dispatch is not None else None


# ----------------------------------------------------------------------------- plan


@app.task(name=TASK_PLAN, bind=True, acks_late=True, max_retries=3, retry_backoff=True)
def plan(self: Task, dispatch_pk: int) -> int | None:
    """Select the tests for one dispatch, create the job, its selection and shards, enqueue them."""
    settings = get_settings()
    with session_scope(settings.database_url) as session:
        dispatch = session.get(Dispatch, dispatch_pk)
        if dispatch is None:
            return None
        delivery = dispatch.delivery
        event = UpstreamEvent.model_validate(delivery.normalized or {})
        dispatch.attempts += 1
    with bind(delivery_id=event.delivery_id, dispatch_pk=dispatch_pk):
        if event.event == "pull_request" and event.action == "closed" and not event.merged:
            _cancel_pr(settings, event, newer_job_pk=None)
            _set_dispatch(
                settings, dispatch_pk, DispatchState.SKIPPED, "pull request closed without merge"
            )
            return None
        try:
            planned: PlannedRun = load_planner(settings.planner)(event, settings)
        except Exception as exc:
            log.exception("planning failed")
            _set_dispatch(
                settings, dispatch_pk, DispatchState.FAILED, f"{type(exc).__name__}: {exc}"
            )
            raise
        key = jobs.JobKey(
            delivery_id=event.upstream_delivery_id or event.delivery_id,
            repo=settings.runner_repo,
            run_id=str(dispatch_pk),
            run_attempt="1",
            job_name=settings.runner_job_name,
        )
        with session_scope(settings.database_url) as session:
            job, created = jobs.create_job(
                session,
                key=key,
                dispatch_pk=dispatch_pk,
                event_type=event.event,
                workflow_name=settings.runner_workflow,
                url="",
                head_sha=event.head_sha or event.after_sha,
                pr_number=event.pr_number,
                shards=planned.shards,
                selection=_selection_row(planned),
            )
            if created:
                job.url = f"{settings.public_url.rstrip('/')}/api/v1/jobs/{job.id}"
                session.commit()
            job_pk = job.id
        _set_dispatch(settings, dispatch_pk, DispatchState.SENT, None)
        if (
            event.event == "pull_request"
            and event.pr_number is not None
            and settings.cancel_superseded
        ):
            _cancel_pr(settings, event, newer_job_pk=job_pk)
        if created:
            _enqueue_job(settings, job_pk)
        log.info(
            "planned",
            extra={"job_pk": job_pk, "tests": planned.total, "shards": len(planned.shards)},
        )
        return job_pk


def _selection_row(planned: PlannedRun) -> dict[str, Any]:
    return {
        "base_rev": planned.base_rev,
        "head_rev": planned.head_rev,
        "stage_counts": planned.stage_counts,
        "fallbacks": planned.fallbacks,
        "estimated_device_seconds": planned.estimated_device_seconds,
        "plan": {
            **planned.plan,
            "runner": {
                "rootdir": planned.rootdir,
                "pytest_args": planned.pytest_args,
                "env": planned.env,
                "preload": planned.preload,
            },
        },
    }


def _enqueue_job(settings: Settings, job_pk: int) -> None:
    with session_scope(settings.database_url) as session:
        ids = list(
            session.scalars(
                select(Shard.id).where(
                    Shard.job_pk == job_pk, Shard.state == ShardState.PENDING.value
                )
            )
        )
        jobs.mark_enqueued(session, shard_pks=ids)
    if not ids:
        report.apply_async(args=[job_pk])
    for shard_pk in ids:
        run_shard_task.apply_async(args=[shard_pk])


def _set_dispatch(
    settings: Settings, dispatch_pk: int, state: DispatchState, error: str | None
) -> None:
    with session_scope(settings.database_url) as session:
        dispatch = session.get(Dispatch, dispatch_pk)
        if dispatch is not None:
            dispatch.state, dispatch.last_error = state.value, error


def _cancel_pr(settings: Settings, event: UpstreamEvent, *, newer_job_pk: int | None) -> None:
    """A newer push to the PR (or its closing) supersedes the runs still going for it."""
    if event.pr_number is None:
        return
    to_report: list[int] = []
    with session_scope(settings.database_url) as session:
        for old in jobs.superseded_jobs(
            session,
            repo=settings.runner_repo,
            pr_number=event.pr_number,
            newer_than_pk=newer_job_pk,
        ):
            if newer_job_pk is not None and old.id > newer_job_pk:
                continue  # a newer job than this one exists: it is not superseded by us
            old.superseded_by_pk = newer_job_pk if newer_job_pk is not None else old.id
            old.conclusion = Conclusion.CANCELLED.value
            session.commit()
            cancelled = jobs.cancel_job_shards(session, job_pk=old.id)
            log.info(
                "superseded job cancelled", extra={"job_pk": old.id, "shards_cancelled": cancelled}
            )
            if jobs.shards_open(session, job_pk=old.id) == 0:
                to_report.append(old.id)
    for job_pk in to_report:
        report.apply_async(args=[job_pk])


# ----------------------------------------------------------------------------- run_shard

_pools: dict[str, Launcher] = {}


def _launcher(settings: Settings, runner: dict[str, Any]) -> Launcher:
    env = {**os.environ, **runner.get("env", {}), "OMP_NUM_THREADS": "1"}
    cwd = Path(runner["rootdir"])
    if not settings.warm_pool:
        return FreshProcessLauncher(cwd=cwd, env=env)
    key = repr(
        (runner["rootdir"], sorted(runner.get("env", {}).items()), runner.get("preload", []))
    )
    pool = _pools.get(key)
    if pool is None:
        pool = _pools[key] = WarmPool(cwd=cwd, env=env, preload=list(runner.get("preload", [])))
    return pool


def close_pools() -> None:
    for pool in _pools.values():
        pool.close()
    _pools.clear()


@app.task(
    name=TASK_RUN_SHARD,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=None,
)
def run_shard_task(self: Task, shard_pk: int) -> str:
    """Run one shard's tests; resumable after a worker died (its results are kept)."""
    settings = get_settings()
    owner = f"{socket.gethostname()}:{os.getpid()}:{self.request.id}"
    with session_scope(settings.database_url) as session:
        claim = jobs.claim_shard(
            session, shard_pk=shard_pk, owner=owner, lease=settings.shard_lease_seconds
        )
        if claim.shard is None:
            if claim.busy_for:
                raise self.retry(countdown=claim.busy_for)
            return "nothing to do"
        shard = claim.shard
        job = session.get(Job, shard.job_pk)
        assert job is not None
        selection = session.scalar(select(Selection).where(Selection.job_pk == job.id))
        runner = (selection.plan if selection else {}).get("runner") or {}
        delivery = _delivery_for(session, job)
        delivery_id = job.delivery_id
        if job.status == JobStatus.COMPLETED.value or job.superseded_by_pk is not None:
            jobs.finish_shard(session, shard_pk=shard_pk, state=ShardState.CANCELLED)
            open_left = jobs.shards_open(session, job_pk=job.id)
            if open_left == 0:
                report.apply_async(args=[job.id])
            return "cancelled"
        started = jobs.transition(
            session,
            job=job,
            to=JobStatus.IN_PROGRESS,
            expect={JobStatus.DISPATCHED},
            source="worker",
        )
        if started:
            _callback(settings, job, delivery, "in_progress")
        done = jobs.finished_test_ids(session, job_pk=job.id)
        todo = [t for t in shard.test_ids if t not in done]
        job_pk, index, attempt = job.id, shard.index, shard.attempts
    with bind(delivery_id=delivery_id, job_pk=job_pk, shard=index):
        log.info(
            "shard starting",
            extra={"tests": len(todo), "already_done": len(shard.test_ids) - len(todo)},
        )
        workdir = settings.var_dir / "runs" / f"job-{job_pk}" / f"shard-{index}-attempt-{attempt}"

        def store(outcome: TestOutcome) -> None:
            with session_scope(settings.database_url) as s:
                jobs.store_result(s, job_pk=job_pk, shard_pk=shard_pk, outcome=outcome)

        def heartbeat() -> None:
            with session_scope(settings.database_url) as s:
                jobs.renew_lease(
                    s, shard_pk=shard_pk, owner=owner, lease=settings.shard_lease_seconds
                )

        def cancelled() -> bool:
            with session_scope(settings.database_url) as s:
                j = s.get(Job, job_pk)
                return (
                    j is None
                    or j.superseded_by_pk is not None
                    or j.status == JobStatus.COMPLETED.value
                )

        run = run_shard(
            todo,
            launcher=_launcher(settings, runner),
            pytest_args=list(runner.get("pytest_args", [])),
            per_test_timeout=settings.per_test_timeout,
            workdir=workdir,
            on_result=store,
            heartbeat=heartbeat,
            should_stop=cancelled,
        )
        with session_scope(settings.database_url) as session:
            state = ShardState.CANCELLED if cancelled() else ShardState.DONE
            jobs.finish_shard(session, shard_pk=shard_pk, state=state)
            open_left = jobs.shards_open(session, job_pk=job_pk)
        log.info(
            "shard finished",
            extra={
                "tests": len(run.results),
                "children": run.children,
                "seconds": round(run.seconds, 2),
            },
        )
        if open_left == 0:
            report.apply_async(args=[job_pk])
        return state.value


# ----------------------------------------------------------------------------- report


@app.task(name=TASK_REPORT, bind=True, acks_late=True, max_retries=5, retry_backoff=True)
def report(self: Task, job_pk: int) -> str | None:
    """Finalize a job once all its shards are done: conclusion, counts, history, callback."""
    settings = get_settings()
    with session_scope(settings.database_url) as session:
        job = session.get(Job, job_pk)
        if job is None or job.status == JobStatus.COMPLETED.value:
            return None
        if jobs.shards_open(session, job_pk=job_pk):
            return None
        delivery = _delivery_for(session, job)
        with bind(delivery_id=job.delivery_id, job_pk=job_pk):
            jobs.store_counts(session, job=job)
            if job.status == JobStatus.DISPATCHED.value and jobs.transition(
                session,
                job=job,
                to=JobStatus.IN_PROGRESS,
                expect={JobStatus.DISPATCHED},
                source="report",
            ):
                _callback(settings, job, delivery, "in_progress")
            conclusion = jobs.conclude(session, job=job)
            if not jobs.transition(
                session,
                job=job,
                to=JobStatus.COMPLETED,
                expect={JobStatus.IN_PROGRESS},
                source="report",
                conclusion=conclusion,
            ):
                return None  # another report finished it
            jobs.update_stats(session, job=job)
            log.info("job reported", extra={"conclusion": conclusion.value})
            _callback(settings, job, delivery, "completed")
            return conclusion.value


# ----------------------------------------------------------------------------- sweeper


@app.task(name=TASK_SWEEP_JOBS)
def sweep_jobs() -> dict[str, int]:
    """The periodic sweeper: re-enqueue deliveries and shards whose messages were lost, report
    jobs whose report was lost, and time out jobs running past RELAY_JOB_TIMEOUT_SECONDS (CRCR's
    zombie sweeper, plus the jobs that were dispatched but never started)."""
    from datetime import timedelta

    from workers.tasks import sweep_deliveries

    deliveries_requeued = sweep_deliveries()
    settings = get_settings()
    waiting = queue_depth(app, SHARD_QUEUE)
    with session_scope(settings.database_url) as session:
        stale = (
            jobs.stale_pending_shards(
                session, older_than=timedelta(seconds=settings.sweep_after_seconds)
            )
            if waiting == 0
            else []
        )
        jobs.mark_enqueued(session, shard_pks=stale)
        overdue = jobs.overdue_jobs(
            session, older_than=timedelta(seconds=settings.job_timeout_seconds)
        )
        timed_out = []
        for job in overdue:
            jobs.cancel_job_shards(session, job_pk=job.id)
            if job.status == JobStatus.DISPATCHED.value:
                jobs.transition(
                    session,
                    job=job,
                    to=JobStatus.IN_PROGRESS,
                    expect={JobStatus.DISPATCHED},
                    source="sweeper",
                )
            jobs.store_counts(session, job=job)
            if jobs.transition(
                session, job=job, to=JobStatus.COMPLETED, expect={JobStatus.IN_PROGRESS},
                source="sweeper", conclusion=Conclusion.TIMED_OUT,
            ):  # fmt: skip
                timed_out.append(job)
                _callback(settings, job, _delivery_for(session, job), "completed")
        orphans = jobs.orphaned_jobs(session)
    for shard_pk in stale:
        run_shard_task.apply_async(args=[shard_pk])
    for job_pk in orphans:
        report.apply_async(args=[job_pk])
    counts = {
        "deliveries_requeued": deliveries_requeued,
        "shards_requeued": len(stale),
        "jobs_timed_out": len(timed_out),
        "jobs_reported": len(orphans),
    }
    if any(counts.values()):
        log.info("sweep", extra=counts)
    return counts


# ----------------------------------------------------------------------------- nightly


def installed_upstream_sha() -> str:
    """The upstream commit the installed torch was built from (what a nightly run tests)."""
    import importlib.metadata

    try:
        from torch.version import git_version

        return str(git_version)
    except ImportError:
        return "torch-" + importlib.metadata.version("torch")


def _self_report(
    *, delivery_id: str, event: str, source: str, payload: dict[str, Any]
) -> int | None:
    """Store a delivery the relay makes itself (nightly, release replay) and process it like a
    received one; None when it was already stored (one run per key)."""
    import json as _json

    from relay.deliveries import DeliveryCreate, StoreOutcome, store
    from workers.tasks import process_delivery

    settings = get_settings()
    body = _json.dumps({"repository": {"full_name": settings.upstream_repo}, **payload}).encode()
    with session_scope(settings.database_url) as session:
        outcome, pk = store(
            session,
            data=DeliveryCreate(
                delivery_id=delivery_id,
                event=event,
                action=None,
                repo=settings.upstream_repo,
                raw_body=body,
                source=source,
                head_sha=str(payload["head_sha"]),
            ),
        )
    if outcome is StoreOutcome.DUPLICATE:
        return None
    process_delivery.apply_async(args=[pk], headers={"delivery_id": delivery_id})
    log.info("%s run requested", source, extra={"delivery_pk": pk, **payload})
    return pk


@app.task(name=TASK_NIGHTLY)
def nightly(head_sha: str | None = None, day: str | None = None) -> int | None:
    """One nightly run per day (idempotent on the day and SHA): a CRCR-shaped nightly delivery
    planned and run like any other event, reported with event_type "nightly"."""
    import hashlib

    sha = head_sha or installed_upstream_sha()
    day = day or utcnow().strftime("%Y-%m-%d")
    return _self_report(
        delivery_id=f"nightly-{day}-{hashlib.sha1(sha.encode()).hexdigest()[:12]}",
        event="nightly",
        source="nightly",
        payload={"head_sha": sha},
    )


@app.task(name=TASK_REPLAY)
def replay(base_version: str, head_version: str) -> int | None:
    """A release replay (e.g. 2.13 -> 2.14) run as a CRCR "periodic" event: planned by the
    selector on the released wheels and run like any other. Once per version pair."""
    return _self_report(
        delivery_id=f"replay-{base_version}-{head_version}",
        event="periodic",
        source="replay",
        payload={
            "head_sha": f"v{head_version}",
            "base_version": base_version,
            "head_version": head_version,
        },
    )
