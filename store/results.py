"""Data access for test results and the per-test history they feed.

A result is unique per (job, test id): a task that runs twice writes once. Counts are derived
from the result rows; the history (``TestStat``) folds a finished job's results once.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from store.models import Job, SelectionKind, SelectionTest, Shard, TestResult, TestStat, utcnow
from store.outcomes import FAILED, NON_GATING_MODES, Outcome, TestOutcome, tally, tally_apart


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


def store_counts(session: Session, *, job: Job) -> dict[str, int]:
    c = counts(session, job_pk=job.id)
    job.tests_passed, job.tests_failed, job.tests_skipped = c["passed"], c["failed"], c["skipped"]
    job.tests_total = max(job.tests_total, c["total"])
    session.commit()
    return c


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


def history_rows(session: Session, *, repo: str) -> list[dict[str, Any]]:
    """The per-test history of one downstream, one dict per test as the planner's
    ``history_for`` reads it (runs, failures, flips, mean wall and device time)."""
    rows = session.scalars(select(TestStat).where(TestStat.downstream_repo == repo))
    return [
        {
            "test_id": r.test_id,
            "runs": r.runs,
            "failures": r.failures,
            "flips": r.flips,
            "mean_duration_s": r.mean_duration_s,
            "mean_device_time_us": r.mean_device_time_us,
        }
        for r in rows
    ]


def results_per_shard(session: Session, *, job_pk: int) -> dict[int | None, int]:
    """How many results each shard of the job stored (by shard id)."""
    rows = session.execute(
        select(TestResult.shard_pk, func.count())
        .where(TestResult.job_pk == job_pk)
        .group_by(TestResult.shard_pk)
    ).all()
    return {shard_pk: count for shard_pk, count in rows}


def device_time_us(session: Session, *, job_pk: int) -> float | None:
    """The simulated device time of the job's results, summed (None when none recorded it)."""
    return session.scalar(
        select(func.sum(TestResult.device_time_us)).where(TestResult.job_pk == job_pk)
    )


def results_query(
    *, job_pk: int, outcome: str | None = None, shard_index: int | None = None
) -> Select[Any]:
    """The job's results, optionally one outcome and one shard (by its index); unordered."""
    query = select(TestResult).where(TestResult.job_pk == job_pk)
    if outcome is not None:
        query = query.where(TestResult.outcome == outcome)
    if shard_index is not None:
        query = query.where(
            TestResult.shard_pk.in_(
                select(Shard.id).where(Shard.job_pk == job_pk, Shard.index == shard_index)
            )
        )
    return query


def latest_of_test(session: Session, *, test_id: str) -> TestResult | None:
    """The newest stored result of one test id."""
    return session.scalar(
        select(TestResult).where(TestResult.test_id == test_id).order_by(TestResult.id.desc())
    )


def latest_job_results(session: Session) -> tuple[int | None, list[Any]]:
    """The newest job with results, and its results as (test id, outcome, op, dtype) rows."""
    job_pk = session.scalar(select(func.max(TestResult.job_pk)))
    if job_pk is None:
        return None, []
    rows = session.execute(
        select(TestResult.test_id, TestResult.outcome, TestResult.op, TestResult.dtype).where(
            TestResult.job_pk == job_pk
        )
    ).all()
    return job_pk, list(rows)
