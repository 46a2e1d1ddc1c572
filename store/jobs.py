"""Data access for the runner: jobs, their shards and their lifecycle (results and the per-test
history: :mod:`store.results`).

Every write is idempotent so a task that runs twice writes once: a result is unique per
(job, test id), state changes are conditional updates, counts are derived from result rows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from store.models import (
    Conclusion,
    Delivery,
    Dispatch,
    Job,
    JobStatus,
    JobTransition,
    Selection,
    SelectionTest,
    Shard,
    ShardState,
    utcnow,
)
from store.results import gating_failures, ran_count
from store.selections import nothing_to_test


@dataclass(frozen=True)
class JobKey:
    delivery_id: str
    repo: str
    run_id: str
    run_attempt: str
    job_name: str

    def columns(self) -> dict[str, str]:
        """The job row's columns this key fills (its unique key)."""
        return asdict(self)


def transition(
    session: Session,
    *,
    job: Job,
    to: JobStatus,
    expect: set[JobStatus],
    source: str,
    conclusion: Conclusion | None = None,
    detail: dict[str, Any] | None = None,
) -> bool:
    """Atomically move ``job`` to ``to`` if it is in one of ``expect``; record the history with
    the status the row really came from (one conditional UPDATE per expected status, so the
    recorded ``from_status`` is the one the database matched, not a possibly stale read)."""
    now = utcnow()
    values: dict[str, Any] = {"status": to.value}
    if to is JobStatus.DISPATCHED:
        values["dispatched_at"] = now
    if to is JobStatus.IN_PROGRESS:
        values["started_at"] = now
    if to is JobStatus.COMPLETED:
        values["completed_at"] = now
        values["conclusion"] = conclusion.value if conclusion else None
    came_from: JobStatus | None = None
    for status in sorted(expect, key=lambda s: s.value):
        result = session.execute(
            update(Job)
            .where(Job.id == job.id, Job.status == status.value)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        if result.rowcount == 1:  # type: ignore[attr-defined]
            came_from = status
            break
    if came_from is None:
        session.rollback()
        return False
    session.add(
        JobTransition(
            job_pk=job.id,
            from_status=came_from.value,
            to_status=to.value,
            conclusion=conclusion.value if conclusion else None,
            at=now,
            source=source,
            detail=detail,
        )
    )
    session.commit()
    session.refresh(job)
    return True


def jobs_of_deliveries(session: Session, delivery_pks: list[int]) -> dict[int, list[int]]:
    """The jobs each delivery started (through its dispatches), oldest first."""
    out: dict[int, list[int]] = {}
    if delivery_pks:
        rows = session.execute(
            select(Dispatch.delivery_pk, Job.id)
            .join(Job, Job.dispatch_pk == Dispatch.id)
            .where(Dispatch.delivery_pk.in_(delivery_pks))
            .order_by(Job.id)
        )
        for delivery_pk, job_pk in rows:
            out.setdefault(delivery_pk, []).append(job_pk)
    return out


def deliveries_of_jobs(session: Session, job_pks: list[int]) -> dict[int, str]:
    """The delivery id (``X-GitHub-Delivery``, as ``/api/v1/deliveries`` serves it) of the
    delivery each job was planned for; jobs without one are left out."""
    out: dict[int, str] = {}
    if job_pks:
        rows = session.execute(
            select(Job.id, Delivery.delivery_id)
            .join(Dispatch, Job.dispatch_pk == Dispatch.id)
            .join(Delivery, Dispatch.delivery_pk == Delivery.id)
            .where(Job.id.in_(job_pks))
        )
        out = {job_pk: delivery_id for job_pk, delivery_id in rows}
    return out


def inserted(session: Session, row: Any) -> bool:
    """Add ``row`` and flush it; False (the session rolled back) when a concurrent writer
    inserted the same unique key first: the caller then reads that writer's row instead."""
    session.add(row)
    try:
        session.flush()
    except IntegrityError:
        session.rollback()
        return False
    return True


def create_job(
    session: Session,
    *,
    key: JobKey,
    dispatch_pk: int | None,
    event_type: str,
    workflow_name: str,
    url: str,
    head_sha: str | None,
    pr_number: int | None,
    shards: list[list[str]],
    selection: dict[str, Any],
    shard_seconds: list[float] | None = None,
) -> tuple[Job, bool]:
    """The job for ``key`` with its selection and shards; (job, created). Idempotent on the key.
    A job :func:`begin_planning` made is moved from ``planning`` to ``dispatched`` (created).

    ``selection``: the Selection row's columns, and under ``"variants"`` its SelectionTest rows
    (``planner.RunPlan.stored()``); ``shard_seconds``: each shard's estimated runner-seconds."""
    existing = session.scalar(select(Job).where(*key_is(key)))
    if existing is not None and existing.status != JobStatus.PLANNING.value:
        return existing, False
    if existing is not None:  # planned: the planning job gets its selection and shards
        return _planned(session, existing, shards, shard_seconds, selection), True
    job = Job(
        **key.columns(),
        dispatch_pk=dispatch_pk,
        event_type=event_type,
        workflow_name=workflow_name,
        url=url,
        head_sha=head_sha,
        pr_number=pr_number,
        status=JobStatus.DISPATCHED.value,
        tests_total=sum(len(s) for s in shards),
    )
    if not inserted(session, job):
        return create_job(
            session,
            key=key,
            dispatch_pk=dispatch_pk,
            event_type=event_type,
            workflow_name=workflow_name,
            url=url,
            head_sha=head_sha,
            pr_number=pr_number,
            shards=shards,
            selection=selection,
            shard_seconds=shard_seconds,
        )
    session.add(
        JobTransition(
            job_pk=job.id, from_status=None, to_status=JobStatus.DISPATCHED.value, source="plan"
        )
    )
    _add_plan(session, job, shards, shard_seconds, selection)
    session.commit()
    return job, True


def _add_plan(
    session: Session,
    job: Job,
    shards: list[list[str]],
    shard_seconds: list[float] | None,
    selection: dict[str, Any],
) -> None:
    columns = dict(selection)
    variants = columns.pop("variants", [])
    session.add(Selection(job_pk=job.id, **columns))
    if variants:  # one multi-row INSERT, in rank order (so the row id orders a page)
        blank = dict.fromkeys(SelectionTest.variant_columns())  # one key set for every row
        session.execute(insert(SelectionTest), [{**blank, **v, "job_pk": job.id} for v in variants])
    # a job superseded while it was planned never runs: its shards are cancelled at once
    state = ShardState.CANCELLED if job.superseded_by_pk is not None else ShardState.PENDING
    for index, ids in enumerate(shards):
        session.add(
            Shard(
                job_pk=job.id,
                index=index,
                test_ids=list(ids),
                state=state.value,
                estimated_seconds=shard_seconds[index] if shard_seconds else None,
                finished_at=utcnow() if state is ShardState.CANCELLED else None,
            )
        )


def key_is(key: JobKey) -> list[Any]:
    return [getattr(Job, name) == value for name, value in key.columns().items()]


def _planned(
    session: Session,
    job: Job,
    shards: list[list[str]],
    shard_seconds: list[float] | None,
    selection: dict[str, Any],
) -> Job:
    """A planning job gets its plan and moves to ``dispatched`` (dispatched_at: now)."""
    job.tests_total = sum(len(s) for s in shards)
    _add_plan(session, job, shards, shard_seconds, selection)
    session.flush()
    if not transition(
        session, job=job, to=JobStatus.DISPATCHED, expect={JobStatus.PLANNING}, source="plan"
    ):  # another plan task got there first: its plan stands
        return session.get(Job, job.id) or job
    return job


LEASE_SECONDS = 30


@dataclass(frozen=True)
class Claim:
    shard: Shard | None
    busy_for: float = 0.0  # seconds until another owner's lease expires (a duplicate delivery)


def renew_lease(
    session: Session, *, shard_pk: int, owner: str, lease: float = LEASE_SECONDS
) -> None:
    session.execute(
        update(Shard)
        .where(Shard.id == shard_pk, Shard.owner == owner, Shard.state == ShardState.RUNNING.value)
        .values(lease_until=utcnow() + timedelta(seconds=lease))
    )
    session.commit()


def finish_shard(
    session: Session, *, shard_pk: int, state: ShardState, error: str | None = None
) -> None:
    session.execute(
        update(Shard)
        .where(Shard.id == shard_pk, Shard.state == ShardState.RUNNING.value)
        .values(state=state.value, finished_at=utcnow(), last_error=error)
    )
    session.commit()


def shards_open(session: Session, *, job_pk: int) -> int:
    return int(
        session.scalar(
            select(func.count())
            .select_from(Shard)
            .where(
                Shard.job_pk == job_pk,
                Shard.state.in_([ShardState.PENDING.value, ShardState.RUNNING.value]),
            )
        )
        or 0
    )


def conclude(session: Session, *, job: Job) -> Conclusion:
    """success: tests ran with no failed shard and no gating failure, or there was nothing to
    test (:func:`store.selections.nothing_to_test`: comments changed only, or every change unit
    reaches no variant of this backend)."""
    if job.superseded_by_pk is not None or job.conclusion == Conclusion.CANCELLED.value:
        return Conclusion.CANCELLED
    if (job.upstream_under_test or {}).get("kind") == "none":
        return Conclusion.NEUTRAL  # nothing could test the change: never success, never red
    failed = select(Shard.id).where(Shard.job_pk == job.id, Shard.state == ShardState.FAILED.value)
    if session.scalar(failed.limit(1)) is not None:  # a shard was lost too often (store.shards)
        return Conclusion.FAILURE
    if ran_count(session, job_pk=job.id) == 0:  # nothing ran: red unless nothing was to be run
        return Conclusion.SUCCESS if nothing_to_test(session, job=job) else Conclusion.FAILURE
    return Conclusion.FAILURE if gating_failures(session, job_pk=job.id) else Conclusion.SUCCESS


def cancel_job_shards(session: Session, *, job_pk: int) -> int:
    """Cancel a job's pending shards and its running ones whose owner is gone (lease expired);
    a live owner sees its job cancelled within a second, stops and cancels its own."""
    now = utcnow()
    result = session.execute(
        update(Shard)
        .where(
            Shard.job_pk == job_pk,
            (Shard.state == ShardState.PENDING.value)
            | ((Shard.state == ShardState.RUNNING.value) & (Shard.lease_until < now)),
        )
        .values(state=ShardState.CANCELLED.value, finished_at=now)
    )
    session.commit()
    return int(result.rowcount)  # type: ignore[attr-defined]


def superseded_jobs(
    session: Session, *, repo: str, pr_number: int, newer_than_pk: int | None
) -> list[Job]:
    query = select(Job).where(
        Job.repo == repo,
        Job.pr_number == pr_number,
        Job.status != JobStatus.COMPLETED.value,
        Job.superseded_by_pk.is_(None),
    )
    if newer_than_pk is not None:
        query = query.where(Job.id != newer_than_pk)
    return list(session.scalars(query))


def seconds_between(a: datetime | None, b: datetime | None) -> float | None:
    if a is None or b is None:
        return None
    if (a.tzinfo is None) != (b.tzinfo is None):
        a, b = a.replace(tzinfo=None), b.replace(tzinfo=None)
    return (b - a).total_seconds()


def pending_shards(session: Session, *, job_pk: int) -> list[int]:
    """The ids of a job's shards still waiting for a worker."""
    return list(
        session.scalars(
            select(Shard.id).where(Shard.job_pk == job_pk, Shard.state == ShardState.PENDING.value)
        )
    )


def mark_enqueued(session: Session, *, shard_pks: list[int]) -> None:
    if shard_pks:
        session.execute(update(Shard).where(Shard.id.in_(shard_pks)).values(enqueued_at=utcnow()))
        session.commit()


def _runner_job() -> Any:
    """Jobs of the in-process runner: not those a downstream reports by callback (the relay
    role's, whose dispatch went to GitHub; their sweeper is fanout's)."""
    relayed = select(Dispatch.id).where(Dispatch.target != "runner").scalar_subquery()
    return or_(Job.dispatch_pk.is_(None), Job.dispatch_pk.not_in(relayed))


def overdue_jobs(session: Session, *, older_than: timedelta) -> list[Job]:
    cutoff = utcnow() - older_than
    return list(
        session.scalars(
            select(Job).where(
                Job.status.in_([JobStatus.DISPATCHED.value, JobStatus.IN_PROGRESS.value]),
                Job.dispatched_at < cutoff,
                _runner_job(),
            )
        )
    )


def orphaned_jobs(session: Session) -> list[int]:
    """Jobs not completed whose shards are all finished (their report task was lost)."""
    open_jobs = session.scalars(
        select(Job.id).where(
            Job.status.notin_([JobStatus.COMPLETED.value, JobStatus.PLANNING.value]),
            _runner_job(),
        )
    )
    return [pk for pk in open_jobs if shards_open(session, job_pk=pk) == 0]


def jobs_query(
    *, status: str | None = None, conclusion: str | None = None, pr_number: int | None = None
) -> Select[Any]:
    """Jobs, optionally one status, one conclusion, one upstream PR; unordered (the caller pages
    it)."""
    query = select(Job)
    if status is not None:
        query = query.where(Job.status == status)
    if conclusion is not None:
        query = query.where(Job.conclusion == conclusion)
    if pr_number is not None:
        query = query.where(Job.pr_number == pr_number)
    return query


def job_count(session: Session) -> int:
    return int(session.scalar(select(func.count()).select_from(Job)) or 0)


def shards_of(session: Session, *, job_pk: int) -> list[Shard]:
    """The job's shards in index order."""
    return list(session.scalars(select(Shard).where(Shard.job_pk == job_pk).order_by(Shard.index)))


def shard_indexes(session: Session, *, job_pk: int) -> dict[int, int]:
    """Each shard's index by its id, for the job's shards."""
    rows = session.execute(select(Shard.id, Shard.index).where(Shard.job_pk == job_pk)).all()
    return {shard_pk: index for shard_pk, index in rows}


def transitions_of(session: Session, *, job_pk: int) -> list[JobTransition]:
    """The job's status changes, oldest first."""
    return list(
        session.scalars(
            select(JobTransition).where(JobTransition.job_pk == job_pk).order_by(JobTransition.id)
        )
    )


def jobs_of_event_type(session: Session, *, event_type: str, limit: int = 50) -> list[Job]:
    """The newest jobs of one event type (``periodic``: the release replays)."""
    return list(
        session.scalars(
            select(Job).where(Job.event_type == event_type).order_by(Job.id.desc()).limit(limit)
        )
    )
