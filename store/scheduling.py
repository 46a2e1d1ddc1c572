"""Data access for scheduling: jobs in ``planning`` and which shard a free worker runs next.

Planning is leased too: a planner claims its dispatch (:func:`claim_planning`: one attempt
counted, refused while another planner's lease runs) and renews ``lease_until`` while it
works, so a plan whose worker was killed (lease expired) or whose message was lost before it
started (no lease, enqueued long ago, the plan queue empty) is found by :func:`stalled_plans`
and re-queued by the sweeper, or given up after RELAY_PLAN_ATTEMPTS starts.

Events are scheduled by class (pull request > push > nightly, periodic and replay), and within
a class shards of different jobs interleave (the job that has had the fewest shards so far goes
first, then the oldest). A shard task message is a token: whichever shard task a worker takes,
it runs the best claimable shard at that moment, so a pull request's first shard starts as soon
as a worker finishes the shard it runs (at most one shard's duration), however many shards of a
replay were enqueued before it. One token is enqueued per shard, so every shard runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, case, func, or_, select, update
from sqlalchemy.orm import Session, aliased

from store.jobs import (
    LEASE_SECONDS,
    Claim,
    JobKey,
    inserted,
    key_is,
    seconds_between,
    transition,
)
from store.models import (
    Conclusion,
    Dispatch,
    DispatchState,
    Job,
    JobStatus,
    JobTransition,
    Shard,
    ShardState,
    utcnow,
)

#: scheduling classes, most urgent first
PULL_REQUEST, PUSH, BULK = 0, 1, 2
CLASS_NAMES = {PULL_REQUEST: "pull_request", PUSH: "push", BULK: "nightly/periodic/replay"}


def _class_sql() -> Any:
    return case(
        (or_(Job.event_type == "pull_request", Job.pr_number.is_not(None)), PULL_REQUEST),
        (Job.event_type == "push", PUSH),
        else_=BULK,
    )


def claim_next(
    session: Session, *, owner: str, task_id: str, lease: float = LEASE_SECONDS
) -> Claim:
    """The shard a worker runs next, claimed for ``owner`` (PENDING -> RUNNING with a lease).

    A task redelivered after its worker died (``task_id`` in the owner of a RUNNING shard) takes
    its shard back once the dead owner's lease expired (``busy_for`` until then). Otherwise the
    best claimable shard: pending, or running under an expired lease, of a job neither
    superseded nor completed, ordered by class, shards the job already had, job age, index."""
    now = utcnow()
    mine = session.scalar(
        select(Shard).where(
            Shard.state == ShardState.RUNNING.value, Shard.owner.like(f"%:{task_id}")
        )
    )
    if mine is not None:
        left = seconds_between(now, mine.lease_until) or 0.0
        if left > 0:
            return Claim(None, busy_for=max(1.0, left))
        if _take(session, mine.id, owner=owner, lease=lease, now=now):
            return Claim(session.get(Shard, mine.id, populate_existing=True))
    other = aliased(Shard)
    had = (
        select(func.count())
        .select_from(other)
        .where(other.job_pk == Shard.job_pk, other.state != ShardState.PENDING.value)
        .scalar_subquery()
    )
    candidates = list(
        session.scalars(
            select(Shard.id)
            .join(Job, Job.id == Shard.job_pk)
            .where(
                _claimable(now),
                Job.superseded_by_pk.is_(None),
                Job.status.in_([JobStatus.DISPATCHED.value, JobStatus.IN_PROGRESS.value]),
            )
            .order_by(_class_sql(), had, Job.id, Shard.index)
            .limit(8)
        )
    )
    session.rollback()  # end the read; each take is its own conditional update
    for shard_pk in candidates:
        if _take(session, shard_pk, owner=owner, lease=lease, now=utcnow()):
            return Claim(session.get(Shard, shard_pk, populate_existing=True))
    return Claim(None)


def _claimable(now: Any) -> Any:
    return or_(
        Shard.state == ShardState.PENDING.value,
        and_(
            Shard.state == ShardState.RUNNING.value,
            or_(Shard.lease_until.is_(None), Shard.lease_until < now),
        ),
    )


def _take(session: Session, shard_pk: int, *, owner: str, lease: float, now: Any) -> bool:
    result = session.execute(
        update(Shard)
        .where(Shard.id == shard_pk, _claimable(now))
        .values(
            state=ShardState.RUNNING.value,
            attempts=Shard.attempts + 1,
            started_at=now,
            lease_until=now + timedelta(seconds=lease),
            owner=owner,
        )
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def begin_planning(
    session: Session,
    *,
    key: JobKey,
    dispatch_pk: int | None,
    event_type: str,
    workflow_name: str,
    head_sha: str | None,
    pr_number: int | None,
) -> Job:
    """The job for ``key`` in status ``planning`` (its start time in ``planning_started_at``),
    made before its tests are selected so it shows while the planner works; idempotent on the
    key (a job already planned is returned as it is). ``store.jobs.create_job`` completes it."""
    existing = session.scalar(select(Job).where(*key_is(key)))
    if existing is not None:
        return existing
    now = utcnow()
    job = Job(
        **key.columns(),
        dispatch_pk=dispatch_pk,
        event_type=event_type,
        workflow_name=workflow_name,
        url="",
        head_sha=head_sha,
        pr_number=pr_number,
        status=JobStatus.PLANNING.value,
        planning_started_at=now,
        dispatched_at=now,
    )
    if not inserted(session, job):
        return begin_planning(
            session,
            key=key,
            dispatch_pk=dispatch_pk,
            event_type=event_type,
            workflow_name=workflow_name,
            head_sha=head_sha,
            pr_number=pr_number,
        )
    session.add(
        JobTransition(
            job_pk=job.id,
            from_status=None,
            to_status=JobStatus.PLANNING.value,
            at=now,
            source="plan",
        )
    )
    session.commit()
    return job


def fail_planning(
    session: Session, *, job: Job, error: str, source: str = "plan", reason: str | None = None
) -> bool:
    """A job whose planning failed completes as a failure with the error in its history and
    why on the job (``reason``, one line; default: the error's first line)."""
    set_failure(job, reason or f"planning failed: {first_line(error)}", error)
    return transition(
        session,
        job=job,
        to=JobStatus.COMPLETED,
        expect={JobStatus.PLANNING},
        source=source,
        conclusion=Conclusion.FAILURE,
        detail={"error": error[:2000]},
    )


#: what a job keeps of a failure's reason (its column) and of the error's text
REASON_CHARS, ERROR_CHARS = 300, 20_000


def first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "(no message)"


def set_failure(job: Job, reason: str, error: str | None = None) -> None:
    """Why ``job`` failed before it ran tests, or why it ran none (the caller commits): a one-line
    reason and, when there is one, the error's text (its end kept: a traceback's last lines say
    most). A job that had nothing to test concludes ``success`` with its reason here too."""
    line = first_line(reason)
    job.failure_reason = line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 3] + "..."
    job.failure_error = None if not error else error[-ERROR_CHARS:]


@dataclass(frozen=True)
class StalledPlan:
    """A runner dispatch whose planning stopped: its planner died (``started``) or its plan
    message was lost before any planner took it."""

    dispatch_pk: int
    attempts: int  # plan tasks started for it so far
    started: bool
    job_pk: int | None  # its job in ``planning``, if planning had started
    created_at: datetime


def _unheld_plan(now: Any) -> Any:
    """A dispatch still to plan that no live planner holds (no lease, or its lease expired)."""
    return and_(
        Dispatch.state == DispatchState.PENDING.value,
        or_(Dispatch.lease_until.is_(None), Dispatch.lease_until < now),
    )


def claim_planning(session: Session, *, dispatch_pk: int, lease: float, max_attempts: int) -> bool:
    """A planner takes ``dispatch_pk``: one conditional update counts its attempt and gives it
    the lease. False (nothing counted) when the dispatch is planned or given up, another live
    planner holds it (a redelivered message beside the sweeper's re-queued one), or
    ``max_attempts`` planners started it already (the sweeper gives it up with the reason)."""
    now = utcnow()
    result = session.execute(
        update(Dispatch)
        .where(
            Dispatch.id == dispatch_pk,
            _unheld_plan(now),
            func.coalesce(Dispatch.attempts, 0) < max_attempts,
        )
        .values(
            attempts=func.coalesce(Dispatch.attempts, 0) + 1,
            lease_until=now + timedelta(seconds=lease),
        )
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def renew_planning(session: Session, *, dispatch_pk: int, lease: float) -> None:
    """The planner of ``dispatch_pk`` is alive: its lease runs ``lease`` seconds from now."""
    session.execute(
        update(Dispatch)
        .where(Dispatch.id == dispatch_pk, Dispatch.state == DispatchState.PENDING.value)
        .values(lease_until=utcnow() + timedelta(seconds=lease))
        .execution_options(synchronize_session=False)
    )
    session.commit()


def stalled_plans(
    session: Session, *, unstarted_after: timedelta, plan_queue_empty: bool
) -> list[StalledPlan]:
    """Runner dispatches still ``pending`` whose planner's lease expired, and (only when the
    plan queue holds no message, so none is merely waiting) those never started whose plan was
    enqueued more than ``unstarted_after`` ago."""
    now = utcnow()
    expired = and_(Dispatch.lease_until.is_not(None), Dispatch.lease_until < now)
    lost = and_(
        Dispatch.lease_until.is_(None),
        func.coalesce(Dispatch.enqueued_at, Dispatch.created_at) < now - unstarted_after,
    )
    rows = session.execute(
        select(Dispatch.id, Dispatch.attempts, Dispatch.lease_until, Dispatch.created_at, Job.id)
        .outerjoin(Job, Job.dispatch_pk == Dispatch.id)
        .where(
            Dispatch.target == "runner",
            Dispatch.state == DispatchState.PENDING.value,
            or_(expired, lost) if plan_queue_empty else expired,
        )
        .order_by(Dispatch.id)
    ).all()
    return [
        StalledPlan(
            dispatch_pk=pk,
            attempts=attempts or 0,
            started=lease is not None,
            job_pk=job_pk,
            created_at=created,
        )
        for pk, attempts, lease, created, job_pk in rows
    ]


def requeue_planning(session: Session, *, dispatch_pk: int) -> bool:
    """The sweeper hands a stalled plan back to the plan queue: no lease, enqueued now. False
    when a planner renewed its lease or finished meanwhile (nothing to re-queue)."""
    now = utcnow()
    result = session.execute(
        update(Dispatch)
        .where(
            Dispatch.id == dispatch_pk,
            _unheld_plan(now),
        )
        .values(lease_until=None, enqueued_at=now)
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def give_up_planning(session: Session, *, dispatch_pk: int, reason: str) -> int | None:
    """A plan that stalled too often: its dispatch fails with ``reason`` and its job (if planning
    had started) completes as a failure with it. Returns the job's pk when it was completed."""
    dispatch = session.get(Dispatch, dispatch_pk)
    if dispatch is None or dispatch.state != DispatchState.PENDING.value:
        return None
    dispatch.state, dispatch.last_error, dispatch.lease_until = (
        DispatchState.FAILED.value,
        reason,
        None,
    )
    session.commit()
    job = session.scalar(select(Job).where(Job.dispatch_pk == dispatch_pk))
    if job is not None and fail_planning(session, job=job, error=reason, source="sweeper"):
        return job.id
    return None
