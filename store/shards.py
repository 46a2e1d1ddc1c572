"""Data access for shards whose worker is gone: no shard is left behind.

A running shard's owner renews its lease (``store.jobs.renew_lease``); a worker that died
(SIGKILL, a lost machine) or whose task raised stops renewing it. Once the lease expired, the
sweeper (``workers.sweep``) hands the shard back: to ``pending`` with a new task message (the
tests whose results are stored are not run again), or, after RELAY_SHARD_ATTEMPTS owners took
it and none finished, to ``failed`` with the reason (its unfinished tests stored as ``not_run``
with that reason, so the job concludes as a failure); a shard of a job that was cancelled
(superseded, closed, timed out) is ``cancelled``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, or_, select, update
from sqlalchemy.orm import Session

from store.models import Job, JobStatus, Shard, ShardState, utcnow
from store.outcomes import Outcome, TestOutcome
from store.results import finished_test_ids, store_results


@dataclass(frozen=True)
class LostShard:
    """A running shard whose lease expired: its owner stopped renewing it."""

    shard_pk: int
    job_pk: int
    index: int
    attempts: int  # owners that took it so far
    owner: str | None
    last_error: str | None
    job_cancelled: bool  # its job was superseded or completed meanwhile

    def log_entry(self) -> dict[str, object]:
        return {
            "shard_pk": self.shard_pk,
            "job_pk": self.job_pk,
            "index": self.index,
            "attempts": self.attempts,
            "owner": self.owner,
            "error": self.last_error,
        }


def _expired(now: datetime) -> ColumnElement[bool]:
    return and_(
        Shard.state == ShardState.RUNNING.value,
        or_(Shard.lease_until.is_(None), Shard.lease_until < now),
    )


def lost_shards(session: Session) -> list[LostShard]:
    """Running shards whose lease expired, oldest job first."""
    rows = session.execute(
        select(Shard, Job.superseded_by_pk, Job.status, Job.conclusion)
        .join(Job, Job.id == Shard.job_pk)
        .where(_expired(utcnow()))
        .order_by(Shard.job_pk, Shard.index)
    ).all()
    return [
        LostShard(
            shard_pk=s.id,
            job_pk=s.job_pk,
            index=s.index,
            attempts=s.attempts,
            owner=s.owner,
            last_error=s.last_error,
            job_cancelled=superseded is not None
            or status == JobStatus.COMPLETED.value
            or conclusion is not None,
        )
        for s, superseded, status, conclusion in rows
    ]


def requeue_lost(session: Session, *, shard_pk: int) -> bool:
    """A lost shard back to ``pending`` (enqueued now: the caller sends its task message);
    False when its owner renewed the lease or another sweeper took it meanwhile."""
    now = utcnow()
    result = session.execute(
        update(Shard)
        .where(Shard.id == shard_pk, _expired(now))
        .values(state=ShardState.PENDING.value, lease_until=None, owner=None, enqueued_at=now)
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def end_lost(
    session: Session, *, shard_pk: int, state: ShardState, reason: str, owner: str | None = None
) -> bool:
    """A lost shard (or the one ``owner`` holds) ends as ``state`` (failed or cancelled) with
    ``reason`` as its last error; False when its owner renewed the lease meanwhile. A failed
    shard's tests without a result are stored as ``not_run`` with the reason (a job with a failed
    shard concludes as a failure)."""
    now = utcnow()
    held = (
        _expired(now)
        if owner is None
        else and_(Shard.state == ShardState.RUNNING.value, Shard.owner == owner)
    )
    result = session.execute(
        update(Shard)
        .where(Shard.id == shard_pk, held)
        .values(state=state.value, finished_at=now, lease_until=None, last_error=reason)
        .execution_options(synchronize_session=False)
    )
    session.commit()
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return False
    if state is ShardState.FAILED:
        shard = session.get(Shard, shard_pk)
        assert shard is not None
        done = finished_test_ids(session, job_pk=shard.job_pk)
        unfinished = [
            TestOutcome(t, Outcome.NOT_RUN, message=reason) for t in shard.test_ids if t not in done
        ]
        store_results(session, job_pk=shard.job_pk, shard_pk=shard_pk, outcomes=unfinished)
    return True


def attempts_spent(attempts: int, limit: int, last_error: str | None) -> str:
    """The reason a shard taken ``attempts`` times (RELAY_SHARD_ATTEMPTS: ``limit``) fails."""
    why = f"; last error: {last_error}" if last_error else " (worker killed or its machine lost?)"
    return f"shard lost {attempts} times, RELAY_SHARD_ATTEMPTS ({limit}) reached{why}"[:4000]


def give_up_lease(session: Session, *, shard_pk: int, owner: str, error: str) -> None:
    """The owner's task raised: its lease ends now, with the error, so the sweeper hands the
    shard on at its next pass instead of a lease later."""
    session.execute(
        update(Shard)
        .where(Shard.id == shard_pk, Shard.owner == owner, Shard.state == ShardState.RUNNING.value)
        .values(lease_until=utcnow() - timedelta(seconds=1), last_error=error[:4000])
        .execution_options(synchronize_session=False)
    )
    session.commit()


def failed_shards(session: Session, *, job_pk: int) -> list[str]:
    """The reasons of a job's failed shards (a job with one concludes as a failure)."""
    return [
        reason or "failed"
        for reason in session.scalars(
            select(Shard.last_error).where(
                Shard.job_pk == job_pk, Shard.state == ShardState.FAILED.value
            )
        )
    ]


def stale_pending_shards(session: Session, *, older_than: timedelta) -> list[int]:
    """Pending shards whose task never started (lost by a broker restart, or never enqueued)."""
    cutoff = utcnow() - older_than
    return list(
        session.scalars(
            select(Shard.id).where(
                Shard.state == ShardState.PENDING.value,
                (Shard.enqueued_at.is_(None)) | (Shard.enqueued_at < cutoff),
            )
        )
    )


def finished_keys(session: Session, *, job_pks: list[int]) -> set[tuple[int, int]]:
    """(job pk, shard index) of the shards of ``job_pks`` that are stored: done, cancelled or
    failed (their scratch on any host may go)."""
    ended = [ShardState.DONE.value, ShardState.CANCELLED.value, ShardState.FAILED.value]
    rows = session.execute(
        select(Shard.job_pk, Shard.index).where(Shard.job_pk.in_(job_pks), Shard.state.in_(ended))
    )
    return {(job_pk, index) for job_pk, index in rows}
