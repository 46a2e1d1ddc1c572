"""The operations counts `GET /metrics` reads at scrape time: deliveries, dispatches and jobs
grouped by state, dispatch latencies, the sweeper's timeouts."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from store.models import Delivery, Dispatch, Downstream, Job, JobTransition


def deliveries_by_state(session: Session) -> list[tuple[str, int]]:
    rows = session.execute(select(Delivery.state, func.count()).group_by(Delivery.state))
    return [(state, count) for state, count in rows]


def dispatches_by_downstream(session: Session) -> list[tuple[str, str, int, int | None]]:
    """(downstream repo, dispatch state, dispatches, send attempts) per repo and state."""
    rows = session.execute(
        select(Downstream.repo, Dispatch.state, func.count(), func.sum(Dispatch.attempts))
        .join(Downstream, Downstream.id == Dispatch.downstream_pk)
        .group_by(Downstream.repo, Dispatch.state)
    )
    return [(repo, state, count, attempts) for repo, state, count, attempts in rows]


def sent_dispatch_times(
    session: Session, *, since: datetime, limit: int = 100_000
) -> list[tuple[str, datetime | None, datetime | None]]:
    """(downstream repo, created, sent) of the dispatches sent and created since ``since``."""
    rows = session.execute(
        select(Downstream.repo, Dispatch.created_at, Dispatch.sent_at)
        .join(Downstream, Downstream.id == Dispatch.downstream_pk)
        .where(Dispatch.sent_at.is_not(None), Dispatch.created_at >= since)
        .limit(limit)
    )
    return [(repo, created, sent) for repo, created, sent in rows]


def jobs_by_status(session: Session) -> list[tuple[str, str, str | None, int]]:
    """(downstream repo, status, conclusion, jobs) per repo, status and conclusion."""
    rows = session.execute(
        select(Job.repo, Job.status, Job.conclusion, func.count()).group_by(
            Job.repo, Job.status, Job.conclusion
        )
    )
    return [(repo, status, conclusion, count) for repo, status, conclusion, count in rows]


def sweeper_timeouts(session: Session) -> int:
    """Jobs the sweepers completed as timed out (their transitions by the sweeper)."""
    count = session.scalar(
        select(func.count()).select_from(JobTransition).where(JobTransition.source == "sweeper")
    )
    return int(count or 0)
