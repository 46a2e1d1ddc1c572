"""The relay role's sweeper (called by the beat's sweep): a dispatch that never started within
its downstream's start timeout, and a job in progress past its run timeout (6 h by default),
complete as ``timed_out``: job row, transition, and the check run. CRCR tracked neither the
first (invisible) nor made the second visible to health; both are counted here."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from config.settings import Settings
from store import callbacks as machine
from store.db import session_scope
from store.models import utcnow

log = logging.getLogger("fanout.sweep")

DEFAULT_START_TIMEOUT = 3600
DEFAULT_RUN_TIMEOUT = 6 * 3600


def is_overdue(item: machine.Overdue, now: datetime) -> bool:
    """Past its downstream's start timeout (never started) or run timeout (in progress)."""
    started = item.job_pk is not None
    limit = item.policy.get("run_timeout" if started else "start_timeout")
    default = DEFAULT_RUN_TIMEOUT if started else DEFAULT_START_TIMEOUT
    since = item.since if item.since.tzinfo else item.since.replace(tzinfo=now.tzinfo)
    return since <= now - timedelta(seconds=int(limit or default))


def count_overdue(settings: Settings, *, now: datetime | None = None) -> int:
    now = now or utcnow()
    with session_scope(settings.database_url) as session:
        return sum(is_overdue(i, now) for i in machine.overdue_candidates(session))


def sweep_timeouts(
    settings: Settings, *, now: datetime | None = None
) -> tuple[dict[str, int], list[int]]:
    """Counts of what timed out, and the jobs whose check runs need an update."""
    now = now or utcnow()
    counts = {"never_started_timed_out": 0, "running_timed_out": 0}
    jobs: list[int] = []
    with session_scope(settings.database_url) as session:
        for item in machine.overdue_candidates(session):
            if not is_overdue(item, now):
                continue
            job_pk = machine.time_out(session, overdue=item, now=now)
            if job_pk is not None:
                started = item.job_pk is not None
                counts["running_timed_out" if started else "never_started_timed_out"] += 1
                jobs.append(job_pk)
    if jobs:
        log.info("relayed jobs timed out", extra=counts)
    return counts, jobs
