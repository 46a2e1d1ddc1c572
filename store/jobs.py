"""Data access for the runner: jobs, shards, results and per-test history.

Every write is idempotent so a task that runs twice writes once: a result is unique per
(job, test id), state changes are conditional updates, counts are derived from result rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, insert, or_, select, update
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
    SelectionKind,
    SelectionTest,
    Shard,
    ShardState,
    TestResult,
    TestStat,
    utcnow,
)
from store.outcomes import FAILED, NON_GATING_MODES, Outcome, TestOutcome, tally, tally_apart
from store.selections import nothing_to_test


@dataclass(frozen=True)
class JobKey:
    delivery_id: str
    repo: str
    run_id: str
    run_attempt: str
    job_name: str


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
        delivery_id=key.delivery_id,
        repo=key.repo,
        run_id=key.run_id,
        run_attempt=key.run_attempt,
        job_name=key.job_name,
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
            session, key=key, dispatch_pk=dispatch_pk, event_type=event_type,
            workflow_name=workflow_name, url=url, head_sha=head_sha, pr_number=pr_number,
            shards=shards, selection=selection, shard_seconds=shard_seconds,
        )  # fmt: skip
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
        session.execute(insert(SelectionTest), [{**v, "job_pk": job.id} for v in variants])
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
    return [
        Job.delivery_id == key.delivery_id,
        Job.repo == key.repo,
        Job.run_id == key.run_id,
        Job.run_attempt == key.run_attempt,
        Job.job_name == key.job_name,
    ]


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


def finished_test_ids(session: Session, *, job_pk: int) -> set[str]:
    return set(session.scalars(select(TestResult.test_id).where(TestResult.job_pk == job_pk)))


def store_result(
    session: Session, *, job_pk: int, shard_pk: int | None, outcome: TestOutcome
) -> bool:
    """Insert one result; False if it was already stored (a re-run writes nothing)."""
    session.add(_result_row(job_pk, shard_pk, outcome))
    try:
        session.commit()
        return True
    except IntegrityError:
        session.rollback()
        return False


def store_results(
    session: Session, *, job_pk: int, shard_pk: int | None, outcomes: list[TestOutcome]
) -> int:
    """Insert several results in one transaction (one commit, not one per test); when one of
    them was already stored, each is inserted alone. The number inserted."""
    if not outcomes:
        return 0
    session.add_all([_result_row(job_pk, shard_pk, o) for o in outcomes])
    try:
        session.commit()
        return len(outcomes)
    except IntegrityError:
        session.rollback()
    return sum(store_result(session, job_pk=job_pk, shard_pk=shard_pk, outcome=o) for o in outcomes)


def _result_row(job_pk: int, shard_pk: int | None, outcome: TestOutcome) -> TestResult:
    return TestResult(
        job_pk=job_pk,
        shard_pk=shard_pk,
        test_id=outcome.test_id,
        outcome=outcome.outcome.value,
        duration_s=outcome.duration_s,
        device_time_us=outcome.device_time_us,
        message=outcome.message,
        artifact_path=outcome.artifact_path,
        failure_text=outcome.failure_text,
        spec_mode=outcome.spec_mode,
        tags=outcome.tags,
        op=outcome.properties.get("spec_op") or None,  # the HUD's op filter
        dtype=outcome.properties.get("spec_dtype") or None,
    )


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


def counts(session: Session, *, job_pk: int) -> dict[str, int]:
    """CRCR's test_results {passed, failed, skipped, total} from the stored results."""
    return live_counts(session, [job_pk])[job_pk]


def live_counts(
    session: Session, job_pks: list[int], *, apart: bool = False
) -> dict[int, dict[str, int]]:
    """:func:`counts` of several jobs in one query (jobs without results count zero);
    ``apart``: with xfailed and xpassed counted apart (:func:`store.outcomes.tally_apart`)."""
    by_job: dict[int, list[tuple[str, int]]] = {pk: [] for pk in job_pks}
    if job_pks:
        rows = session.execute(
            select(TestResult.job_pk, TestResult.outcome, func.count())
            .where(TestResult.job_pk.in_(job_pks))
            .group_by(TestResult.job_pk, TestResult.outcome)
        ).all()
        for pk, outcome, n in rows:
            by_job[pk].append((outcome, int(n)))
    fold = tally_apart if apart else tally
    return {pk: fold(pairs) for pk, pairs in by_job.items()}


def gating_failures(session: Session, *, job_pk: int) -> int:
    """Failed tests whose spec mode gates: the mode the test reported, or, when it reported none
    (its module failed to collect, so no spec plugin saw it), the mode its plan gave it. A test
    with neither gates."""
    plan = SelectionTest
    mode = func.coalesce(TestResult.spec_mode, plan.mode)
    planned = (plan.job_pk == job_pk) & (plan.kind == SelectionKind.SELECTED.value)
    query = (
        select(func.count())
        .select_from(TestResult)
        .outerjoin(plan, planned & (plan.test_id == TestResult.test_id))
        .where(
            TestResult.job_pk == job_pk,
            TestResult.outcome.in_(sorted(o.value for o in FAILED)),
            mode.is_(None) | mode.not_in(sorted(NON_GATING_MODES)),
        )
    )
    return int(session.scalar(query) or 0)


def ran_count(session: Session, *, job_pk: int) -> int:
    """Tests that actually executed (not skipped, not left unrun)."""
    return int(
        session.scalar(
            select(func.count())
            .select_from(TestResult)
            .where(
                TestResult.job_pk == job_pk,
                TestResult.outcome.in_(sorted(o.value for o in Outcome if o.ran)),
            )
        )
        or 0
    )


def conclude(session: Session, *, job: Job) -> Conclusion:
    """success: tests ran with no failed shard and no gating failure, or comments changed only."""
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


def store_counts(session: Session, *, job: Job) -> dict[str, int]:
    c = counts(session, job_pk=job.id)
    job.tests_passed, job.tests_failed, job.tests_skipped = c["passed"], c["failed"], c["skipped"]
    job.tests_total = max(job.tests_total, c["total"])
    session.commit()
    return c


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


def update_stats(session: Session, *, job: Job) -> None:
    """Fold this job's results into the per-test history (once per job, guarded by the caller)."""
    results = list(session.scalars(select(TestResult).where(TestResult.job_pk == job.id)))
    if not results:
        return
    existing = {
        s.test_id: s
        for s in session.scalars(
            select(TestStat).where(
                TestStat.downstream_repo == job.repo,
                TestStat.test_id.in_([r.test_id for r in results]),
            )
        )
    }
    for r in results:
        outcome = Outcome(r.outcome)
        if not outcome.ran:
            continue
        stat = existing.get(r.test_id)
        if stat is None:
            stat = TestStat(
                downstream_repo=job.repo, test_id=r.test_id, runs=0, passes=0, failures=0, flips=0
            )
            session.add(stat)
        good = outcome.as_expected
        if stat.last_outcome is not None and Outcome(stat.last_outcome).as_expected != good:
            stat.flips += 1
        stat.runs += 1
        stat.passes += int(good)
        stat.failures += int(not good)
        stat.last_outcome = r.outcome
        if r.duration_s is not None:
            prev = stat.mean_duration_s
            stat.mean_duration_s = (
                r.duration_s if prev is None else prev + (r.duration_s - prev) / stat.runs
            )
        if r.device_time_us is not None:
            prev = stat.mean_device_time_us
            stat.mean_device_time_us = (
                r.device_time_us if prev is None else prev + (r.device_time_us - prev) / stat.runs
            )
        stat.updated_at = utcnow()
    session.commit()


def test_history(session: Session, *, repo: str) -> dict[str, dict[str, Any]]:
    """The per-test history of one downstream, as the selector's budget stage reads it:
    ``{test id: {seconds, runs, failures, flaky}}`` (seconds: mean simulated device time when
    recorded, else mean wall time)."""
    rows = session.scalars(select(TestStat).where(TestStat.downstream_repo == repo))
    return {
        r.test_id: {
            "seconds": (r.mean_device_time_us / 1e6)
            if r.mean_device_time_us
            else r.mean_duration_s,
            "runs": r.runs,
            "failures": r.failures,
            "flaky": r.flips > 0,
        }
        for r in rows
    }


def seconds_between(a: datetime | None, b: datetime | None) -> float | None:
    if a is None or b is None:
        return None
    if (a.tzinfo is None) != (b.tzinfo is None):
        a, b = a.replace(tzinfo=None), b.replace(tzinfo=None)
    return (b - a).total_seconds()


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
