"""A downstream's health, as CRCR grades it: the timings of its jobs in a window (queue time,
end-to-end time, jobs over three hours, time-outs, pass rate) and its jobs per day.

Read only; a downstream's window is served by the ``(repo, dispatched_at)`` index of migration
0003.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from store.jobs import seconds_between
from store.models import Downstream, Job, JobStatus


@dataclass(frozen=True)
class JobTiming:
    key: tuple[str, str, str]  # (delivery id, run id, job name): the attempts of one job
    attempt: int
    status: str
    conclusion: str | None
    dispatched_at: datetime
    started_at: datetime | None
    completed_at: datetime | None


@dataclass
class WindowMetrics:
    """CRCR's health numbers of one downstream over ``days`` (jobs dispatched in the window)."""

    days: int
    jobs: int = 0
    completed: int = 0
    avg_queue_s: float | None = None  # dispatched -> started, over jobs that started
    p50_e2e_s: float | None = None  # dispatched -> completed, over completed jobs
    over_3h: int = 0  # completed after more than 3 h, or still open after 3 h
    over_3h_share: float | None = None
    timed_out: int = 0
    timeout_rate: float | None = None
    graded: int = 0  # latest attempts that concluded success or failure (or timed out)
    passed: int = 0
    pass_rate: float | None = None


THREE_HOURS = 3 * 3600.0


def window_metrics(timings: Sequence[JobTiming], *, days: int, now: datetime) -> WindowMetrics:
    """The numbers from the jobs: average queue time, end-to-end P50, share over 3 h, timeout
    rate, and the job pass rate over the latest attempt of each job (cancelled ones left out)."""
    m = WindowMetrics(days=days, jobs=len(timings))
    queues = [
        q for t in timings if (q := seconds_between(t.dispatched_at, t.started_at)) is not None
    ]
    done = [t for t in timings if t.status == JobStatus.COMPLETED.value]
    m.completed = len(done)
    e2e = [s for t in done if (s := seconds_between(t.dispatched_at, t.completed_at)) is not None]
    if queues:
        m.avg_queue_s = sum(queues) / len(queues)
    if e2e:
        m.p50_e2e_s = float(statistics.median(e2e))
    m.over_3h = sum(1 for s in e2e if s > THREE_HOURS) + sum(
        1
        for t in timings
        if t.status != JobStatus.COMPLETED.value
        and (seconds_between(t.dispatched_at, now) or 0) > THREE_HOURS
    )
    open_old = m.over_3h - sum(1 for s in e2e if s > THREE_HOURS)
    if m.completed + open_old:
        m.over_3h_share = m.over_3h / (m.completed + open_old)
    m.timed_out = sum(1 for t in done if t.conclusion == "timed_out")
    if m.completed:
        m.timeout_rate = m.timed_out / m.completed
    latest: dict[tuple[str, str, str], JobTiming] = {}
    for t in done:
        if t.key not in latest or t.attempt > latest[t.key].attempt:
            latest[t.key] = t
    graded = [t for t in latest.values() if t.conclusion in ("success", "failure", "timed_out")]
    m.graded = len(graded)
    m.passed = sum(1 for t in graded if t.conclusion == "success")
    if graded:
        m.pass_rate = m.passed / len(graded)
    return m


@dataclass
class DownstreamTimings:
    repo: str
    level: str | None
    device: str | None
    listed_since: datetime | None  # the downstream row's creation (else its first job)
    timings: list[JobTiming]


def downstream_timings(
    session: Session, *, now: datetime, days: int, repos: Iterable[str] | None = None
) -> list[DownstreamTimings]:
    """Each downstream (listed, or with jobs in the window) with its jobs of the last ``days``."""
    since = now - timedelta(days=days)
    listed = {d.repo: d for d in session.scalars(select(Downstream))}
    query = select(
        Job.repo,
        Job.delivery_id,
        Job.run_id,
        Job.job_name,
        Job.run_attempt,
        Job.status,
        Job.conclusion,
        Job.dispatched_at,
        Job.started_at,
        Job.completed_at,
    ).where(Job.dispatched_at >= since, Job.dispatched_at <= now)
    wanted = set(repos) if repos is not None else None
    if wanted is not None:
        query = query.where(Job.repo.in_(sorted(wanted)))
    by_repo: dict[str, list[JobTiming]] = {}
    for r in session.execute(query):
        attempt = int(r.run_attempt) if str(r.run_attempt).isdigit() else 1
        by_repo.setdefault(r.repo, []).append(
            JobTiming(
                (r.delivery_id, r.run_id, r.job_name),
                attempt,
                r.status,
                r.conclusion,
                r.dispatched_at,
                r.started_at,
                r.completed_at,
            )
        )
    names = set(by_repo) | {n for n, d in listed.items() if d.enabled}
    if wanted is not None:
        names &= wanted
    first_jobs = dict(
        session.execute(
            select(Job.repo, func.min(Job.dispatched_at))
            .where(Job.repo.in_(sorted(names)))
            .group_by(Job.repo)
        ).all()
    )
    out = []
    for name in sorted(names):
        row = listed.get(name)
        since_at = row.created_at if row is not None else first_jobs.get(name)
        out.append(
            DownstreamTimings(
                repo=name,
                level=row.level if row is not None else None,
                device=row.device if row is not None else None,
                listed_since=since_at,
                timings=by_repo.get(name, []),
            )
        )
    return out


def daily_series(session: Session, *, repo: str, now: datetime, days: int) -> list[dict[str, Any]]:
    """Per UTC day of the window: jobs, pass rate over graded jobs, average queue seconds."""
    since = now - timedelta(days=days)
    rows = session.execute(
        select(Job.dispatched_at, Job.started_at, Job.conclusion).where(
            Job.repo == repo, Job.dispatched_at >= since, Job.dispatched_at <= now
        )
    ).all()
    by_day: dict[str, list[Any]] = {}
    for dispatched, started, conclusion in rows:
        by_day.setdefault(dispatched.date().isoformat(), []).append(
            (dispatched, started, conclusion)
        )
    out = []
    for offset in range(days, -1, -1):
        day = (now - timedelta(days=offset)).date().isoformat()
        items = by_day.get(day, [])
        graded = [c for _, _, c in items if c in ("success", "failure", "timed_out")]
        queues = [q for d, s, _ in items if (q := seconds_between(d, s)) is not None]
        out.append(
            {
                "day": day,
                "jobs": len(items),
                "pass_rate": (graded.count("success") / len(graded)) if graded else None,
                "avg_queue_s": (sum(queues) / len(queues)) if queues else None,
            }
        )
    return out
