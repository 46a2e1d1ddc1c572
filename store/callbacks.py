"""The CRCR job state machine, atomic in the database: DISPATCHED -> IN_PROGRESS -> COMPLETED
per job key ``(delivery_id, repo, run_id, run_attempt, job_name)``.

A transition is one statement that only one caller can win (an INSERT on the job's unique key,
or an UPDATE guarded by the status it leaves), committed with its JobTransition row: of any
number of concurrent identical callbacks exactly one transitions, the others are duplicates.
A transition of a dispatched job also marks its dispatch's check run for an update, in the same
transaction (:mod:`store.check_updates`). Also: a dispatch token's nonce bound to its first run,
and the per-repository rate counter.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from store import check_updates
from store.jobs import JobKey
from store.models import (
    CallbackNonce,
    CallbackRate,
    Delivery,
    Dispatch,
    DispatchState,
    Downstream,
    Job,
    JobStatus,
    JobTransition,
    utcnow,
)


class CallbackEffect(enum.StrEnum):
    """What a callback did to its job (not a test's outcome: :class:`store.outcomes.Outcome`)."""

    IN_PROGRESS = "in_progress"  # the job started (this call made the transition)
    COMPLETED = "completed"  # the job finished (this call made the transition)
    DUPLICATE = "duplicate"  # the same transition was already made
    CONFLICT = "conflict"  # the job is already somewhere this call cannot lead to
    STALE = "stale"  # an in_progress arriving after the job completed: nothing to do


@dataclass(frozen=True)
class Report:
    status: str  # in_progress | completed
    conclusion: str | None
    at: datetime
    event_type: str
    workflow_name: str
    url: str
    check_run_id: str
    head_sha: str | None
    pr_number: int | None
    dispatch_pk: int | None
    counts: dict[str, int] | None = None
    artifact_url: str | None = None
    summary: str | None = None  # what the run tested (the downstream's upstream under test)
    detail: dict[str, Any] | None = None
    failure_reason: str | None = None  # the callback's summary: why it failed before its tests


def _where(key: JobKey) -> Any:
    return (
        (Job.delivery_id == key.delivery_id)
        & (Job.repo == key.repo)
        & (Job.run_id == key.run_id)
        & (Job.run_attempt == key.run_attempt)
        & (Job.job_name == key.job_name)
    )


def _completion(report: Report) -> dict[str, Any]:
    values: dict[str, Any] = {
        "status": JobStatus.COMPLETED.value,
        "conclusion": report.conclusion,
        "completed_at": report.at,
    }
    if report.counts is not None:
        values.update(
            tests_passed=report.counts.get("passed", 0),
            tests_failed=report.counts.get("failed", 0),
            tests_skipped=report.counts.get("skipped", 0),
            tests_total=report.counts.get("total", 0),
        )
    if report.artifact_url is not None:
        values["artifact_url"] = report.artifact_url[:500]
    if report.summary:
        values["upstream_under_test"] = {"summary": report.summary[:2000]}
    if report.failure_reason:
        values["failure_reason"] = report.failure_reason[:300]
    return values


def _insert(session: Session, key: JobKey, report: Report) -> Job | None:
    """The job created in ``report.status``, or None when another caller created it first."""
    job = Job(
        delivery_id=key.delivery_id,
        repo=key.repo,
        run_id=key.run_id,
        run_attempt=key.run_attempt,
        job_name=key.job_name,
        dispatch_pk=report.dispatch_pk,
        event_type=report.event_type,
        workflow_name=report.workflow_name[:200],
        url=report.url[:500],
        check_run_id=report.check_run_id[:100],
        head_sha=report.head_sha,
        pr_number=report.pr_number,
        status=JobStatus.IN_PROGRESS.value,
        started_at=report.at,
    )
    if report.status == JobStatus.COMPLETED.value:
        job.started_at = None
        for name, value in _completion(report).items():
            setattr(job, name, value)
    session.add(job)
    try:
        session.flush()
    except IntegrityError:
        session.rollback()
        return None
    session.add(
        JobTransition(
            job_pk=job.id,
            from_status=None,
            to_status=report.status,
            conclusion=report.conclusion,
            source="callback",
            detail=report.detail,
        )
    )
    if job.dispatch_pk is not None:  # its check run shows it (the same transaction)
        check_updates.want(session, dispatch_pk=job.dispatch_pk, job_pk=job.id)
    session.commit()
    return job


def apply(session: Session, *, key: JobKey, report: Report) -> tuple[CallbackEffect, int]:
    """Make the transition ``report`` asks for, or say why not (commits). Returns the job pk."""
    for _ in range(3):  # a lost race on insert re-reads the row the winner made
        job = session.scalar(select(Job).where(_where(key)))
        if job is None:
            created = _insert(session, key, report)
            if created is not None:
                return CallbackEffect(report.status), created.id
            continue
        if report.status == JobStatus.IN_PROGRESS.value:
            if job.status == JobStatus.COMPLETED.value:
                return CallbackEffect.STALE, job.id
            return CallbackEffect.DUPLICATE, job.id
        if job.status == JobStatus.COMPLETED.value:
            same = job.conclusion == report.conclusion
            return (CallbackEffect.DUPLICATE if same else CallbackEffect.CONFLICT), job.id
        leaving = job.status
        result = session.execute(
            update(Job).where(_where(key), Job.status == leaving).values(**_completion(report))
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            session.rollback()
            continue
        session.add(
            JobTransition(
                job_pk=job.id,
                from_status=leaving,
                to_status=JobStatus.COMPLETED.value,
                conclusion=report.conclusion,
                source="callback",
                detail=report.detail,
            )
        )
        if job.dispatch_pk is not None:
            check_updates.want(session, dispatch_pk=job.dispatch_pk, job_pk=job.id)
        session.commit()
        return CallbackEffect.COMPLETED, job.id
    raise RuntimeError(f"job {key} changed under three attempts in a row")


def bind_nonce(session: Session, *, nonce: str, repo: str, run_id: str) -> bool:
    """Bind a dispatch token's nonce to its first run; False when another run used it (commits)."""
    existing = session.get(CallbackNonce, nonce)
    if existing is None:
        session.add(CallbackNonce(nonce=nonce, repo=repo, run_id=run_id))
        try:
            session.commit()
            return True
        except IntegrityError:
            session.rollback()
            existing = session.get(CallbackNonce, nonce)
            assert existing is not None
    return existing.repo == repo and existing.run_id == run_id


def count_call(session: Session, *, repo: str, now: datetime | None = None) -> int:
    """Count one callback of ``repo`` in the current minute; returns the minute's count (commits)."""
    minute = int((now or utcnow()).timestamp()) // 60
    for _ in range(3):
        result = session.execute(
            update(CallbackRate)
            .where(CallbackRate.repo == repo, CallbackRate.minute == minute)
            .values(count=CallbackRate.count + 1)
        )
        if result.rowcount == 1:  # type: ignore[attr-defined]
            session.commit()
            break
        session.add(CallbackRate(repo=repo, minute=minute, count=1))
        try:
            session.commit()
            break
        except IntegrityError:
            session.rollback()
    count = session.scalar(
        select(CallbackRate.count).where(CallbackRate.repo == repo, CallbackRate.minute == minute)
    )
    return int(count or 0)


@dataclass(frozen=True)
class Overdue:
    dispatch_pk: int
    delivery_id: str
    repo: str
    policy: dict[str, Any]
    job_pk: int | None  # None: dispatched, never started
    since: datetime  # sent_at, or the job's started_at


def overdue_candidates(session: Session) -> list[Overdue]:
    """Relayed dispatches sent and not started, and their jobs in progress (the caller applies
    each downstream's start and run timeouts)."""
    started = select(Job.dispatch_pk).where(Job.dispatch_pk.is_not(None)).scalar_subquery()
    out: list[Overdue] = []
    unstarted = session.execute(
        select(
            Dispatch.id,
            Delivery.delivery_id,
            Delivery.upstream_delivery_id,
            Downstream.repo,
            Downstream.policy,
            Dispatch.sent_at,
        )
        .join(Delivery, Delivery.id == Dispatch.delivery_pk)
        .join(Downstream, Downstream.id == Dispatch.downstream_pk)
        .where(
            Dispatch.state == DispatchState.SENT.value,
            Dispatch.target != "runner",
            Dispatch.id.not_in(started),
        )
    ).all()
    for pk, delivery_id, upstream_id, repo, policy, sent_at in unstarted:
        if sent_at is not None:
            out.append(Overdue(pk, upstream_id or delivery_id, repo, policy or {}, None, sent_at))
    running = session.execute(
        select(
            Job.id,
            Job.dispatch_pk,
            Job.delivery_id,
            Job.repo,
            Downstream.policy,
            Job.started_at,
            Job.dispatched_at,
        )
        .join(Dispatch, Dispatch.id == Job.dispatch_pk)
        .join(Downstream, Downstream.id == Dispatch.downstream_pk)
        .where(Job.status == JobStatus.IN_PROGRESS.value, Dispatch.target != "runner")
    ).all()
    for job_pk, dispatch_pk, delivery_id, repo, policy, started_at, dispatched_at in running:
        since = started_at or dispatched_at
        out.append(Overdue(dispatch_pk, delivery_id, repo, policy or {}, job_pk, since))
    return out


def time_out(session: Session, *, overdue: Overdue, now: datetime) -> int | None:
    """Complete the job as ``timed_out`` (a never-started dispatch gets a job row saying so);
    returns the job pk, or None when a callback got there first (commits)."""
    if overdue.job_pk is None:
        key = JobKey(overdue.delivery_id, overdue.repo, "", "0", "(never started)")
        report = Report(
            status=JobStatus.COMPLETED.value,
            conclusion="timed_out",
            at=now,
            event_type="",
            workflow_name="",
            url="",
            check_run_id="",
            head_sha=None,
            pr_number=None,
            dispatch_pk=overdue.dispatch_pk,
            detail={"reason": "dispatched, never started within the start timeout"},
        )
        outcome, pk = apply(session, key=key, report=report)
        return pk if outcome is CallbackEffect.COMPLETED else None
    result = session.execute(
        update(Job)
        .where(Job.id == overdue.job_pk, Job.status == JobStatus.IN_PROGRESS.value)
        .values(status=JobStatus.COMPLETED.value, conclusion="timed_out", completed_at=now)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        session.rollback()
        return None
    session.add(
        JobTransition(
            job_pk=overdue.job_pk,
            from_status=JobStatus.IN_PROGRESS.value,
            to_status=JobStatus.COMPLETED.value,
            conclusion="timed_out",
            source="sweeper",
            detail={"reason": "in progress past the run timeout"},
        )
    )
    check_updates.want(session, dispatch_pk=overdue.dispatch_pk, job_pk=overdue.job_pk)
    session.commit()
    return overdue.job_pk
