"""Data access for a dispatch's check-run updates (L3/L4): the callbacks' outbox.

A job transition that a check run shows (a callback's in_progress or completed, the sweeper's
timed_out) calls :func:`want` in the transaction that makes it: the dispatch's
``check_update_seq`` counts the transition and the update is PENDING. The outbox publisher
(workers.publish) hands each due, unpublished update to the broker (``check_update_enqueued_at``);
a worker claims it (UPDATING, one sender at a time), sends the job's state as it stands then, and
finishes: DONE when no transition came meanwhile, else PENDING again, so the newest state is
always the last one sent and an older one never overwrites it. Failures wait at
``check_update_next_attempt_at`` (backoff, ``Retry-After``) until the attempts are spent: DEAD.
A duplicate callback makes no transition, so no update.

Keyword-only arguments; functions that commit say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, case, exists, or_, select, text, true, update
from sqlalchemy.orm import Session

from store.deliveries import NOTIFY_CHANNEL
from store.models import CheckState, CheckUpdateState, Dispatch, Job, utcnow

PENDING, UPDATING = CheckUpdateState.PENDING.value, CheckUpdateState.UPDATING.value
DONE, DEAD = CheckUpdateState.DONE.value, CheckUpdateState.DEAD.value


def want(session: Session, *, dispatch_pk: int, job_pk: int) -> bool:
    """The dispatch's check run must show job ``job_pk`` as it stands (not committed: the
    transition's own transaction). Only a dispatch that has or will have a check run
    (``check_state`` set, not suppressed). A retry already waiting keeps its time and attempts; an
    update being sent keeps its sender, who sees the new number when it finishes."""
    now = utcnow()
    state = Dispatch.check_update_state
    idle = or_(state.is_(None), state.in_([DONE, DEAD]))
    result = session.execute(
        update(Dispatch)
        .where(
            Dispatch.id == dispatch_pk,
            Dispatch.check_state.is_not(None),
            Dispatch.check_state != CheckState.SUPPRESSED.value,
        )
        .values(
            check_update_seq=Dispatch.check_update_seq + 1,
            check_update_job_pk=job_pk,
            check_update_state=case((state == UPDATING, UPDATING), else_=PENDING),
            check_update_attempts=case((idle, 0), else_=Dispatch.check_update_attempts),
            check_update_next_attempt_at=case(
                (idle, now), else_=Dispatch.check_update_next_attempt_at
            ),
            check_update_enqueued_at=case((idle, None), else_=Dispatch.check_update_enqueued_at),
            check_update_error=case((idle, None), else_=Dispatch.check_update_error),
        )
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return False
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text(f"NOTIFY {NOTIFY_CHANNEL}"))  # wakes the publisher on commit
    return True


def want_latest(session: Session, *, dispatch_pk: int) -> bool:
    """The check run was just wanted (its dispatch sent): a job that reported before then is
    shown too (commits)."""
    job_pk = session.scalar(
        select(Job.id).where(Job.dispatch_pk == dispatch_pk).order_by(Job.id.desc()).limit(1)
    )
    wanted = job_pk is not None and want(session, dispatch_pk=dispatch_pk, job_pk=job_pk)
    session.commit()
    return wanted


def _sendable(now: datetime) -> Any:
    """Due, and the check run exists to update."""
    return and_(
        Dispatch.check_run_id.is_not(None),
        Dispatch.check_update_state == PENDING,
        Dispatch.check_update_next_attempt_at <= now,
    )


def unpublished(session: Session, *, now: datetime | None = None, limit: int = 200) -> list[int]:
    """Due updates no message was published for (the publisher's query)."""
    now = now or utcnow()
    query = (
        select(Dispatch.id)
        .where(_sendable(now), Dispatch.check_update_enqueued_at.is_(None))
        .order_by(Dispatch.id)
        .limit(limit)
    )
    if session.get_bind().dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True)  # several publishers: each row once
    return list(session.scalars(query))


def mark_published(session: Session, *, pks: list[int]) -> None:
    """(commits)"""
    if pks:
        session.execute(
            update(Dispatch)
            .where(Dispatch.id.in_(pks))
            .values(check_update_enqueued_at=utcnow())
            .execution_options(synchronize_session=False)
        )
    session.commit()


def release_lost(session: Session, *, older_than: datetime) -> int:
    """Updates whose message was published before ``older_than`` and never taken, or whose sender
    died (its lease ran out before then): back to the publisher (commits)."""
    result = session.execute(
        update(Dispatch)
        .where(
            or_(
                and_(
                    Dispatch.check_update_state == PENDING,
                    Dispatch.check_update_enqueued_at < older_than,
                    Dispatch.check_update_next_attempt_at < older_than,
                ),
                and_(
                    Dispatch.check_update_state == UPDATING,
                    Dispatch.check_update_next_attempt_at < older_than,
                ),
            )
        )
        .values(
            check_update_state=PENDING,
            check_update_enqueued_at=None,
            check_update_next_attempt_at=utcnow(),
        )
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return int(result.rowcount)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Claimed:
    seq: int
    job_pk: int | None
    attempts: int
    check_run_id: int


def claim(
    session: Session, *, pk: int, lease_seconds: float, now: datetime | None = None
) -> Claimed | None:
    """PENDING and due (or UPDATING past its lease: its sender died) -> UPDATING for exactly one
    sender (commits); None when it is not this caller's to send."""
    now = now or utcnow()
    result = session.execute(
        update(Dispatch)
        .where(
            Dispatch.id == pk,
            Dispatch.check_run_id.is_not(None),
            Dispatch.check_update_state.in_([PENDING, UPDATING]),
            Dispatch.check_update_next_attempt_at <= now,
        )
        .values(
            check_update_state=UPDATING,
            check_update_next_attempt_at=now + timedelta(seconds=lease_seconds),
            check_update_attempts=Dispatch.check_update_attempts + 1,
            check_update_enqueued_at=None,
        )
        .execution_options(synchronize_session=False)
    )
    session.commit()
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return None
    row = session.execute(
        select(
            Dispatch.check_update_seq,
            Dispatch.check_update_job_pk,
            Dispatch.check_update_attempts,
            Dispatch.check_run_id,
        ).where(Dispatch.id == pk)
    ).one()
    seq, job_pk, attempts, check_run_id = row
    assert check_run_id is not None  # claimed only with a check run
    return Claimed(seq=seq, job_pk=job_pk, attempts=attempts, check_run_id=int(check_run_id))


def finish(
    session: Session,
    *,
    pk: int,
    seq: int,
    state: CheckUpdateState,
    error: str | None = None,
    next_attempt_at: datetime | None = None,
) -> str:
    """Leave UPDATING (commits); returns the state the row is in. DONE or DEAD only when no
    transition came since the claim (``seq``): else PENDING now, with fresh attempts, so the
    newer state is sent next."""
    leaving = and_(Dispatch.id == pk, Dispatch.check_update_state == UPDATING)
    values: dict[str, Any] = {
        "check_update_state": state.value,
        "check_update_error": error[:4000] if error else None,
        "check_update_next_attempt_at": next_attempt_at,
    }
    # a retry (PENDING) waits whatever came meanwhile; DONE and DEAD are for this number only
    unchanged = true() if state is CheckUpdateState.PENDING else Dispatch.check_update_seq == seq
    result = session.execute(
        update(Dispatch)
        .where(leaving, unchanged)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount == 1:  # type: ignore[attr-defined]
        session.commit()
        return state.value
    newer = session.execute(
        update(Dispatch)
        .where(leaving)
        .values(
            check_update_state=PENDING,
            check_update_attempts=0,
            check_update_error=None,
            check_update_next_attempt_at=utcnow(),
        )
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return PENDING if newer.rowcount == 1 else "not-due"  # type: ignore[attr-defined]


def retry_dead(session: Session, *, pk: int) -> bool:
    """A dead update back into the outbox with its attempts reset (not committed)."""
    result = session.execute(
        update(Dispatch)
        .where(Dispatch.id == pk, Dispatch.check_update_state == DEAD)
        .values(
            check_update_state=PENDING,
            check_update_attempts=0,
            check_update_next_attempt_at=utcnow(),
            check_update_enqueued_at=None,
        )
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


def due(session: Session, *, now: datetime | None = None, limit: int = 500) -> list[int]:
    """Updates to send now, published or not (tests, and a sender's own loop)."""
    now = now or utcnow()
    return list(
        session.scalars(
            select(Dispatch.id).where(_sendable(now)).order_by(Dispatch.id).limit(limit)
        )
    )


def waiting(session: Session) -> bool:
    """Whether an update of an existing check run is still to be sent."""
    return bool(
        session.scalar(
            select(
                exists().where(
                    Dispatch.check_run_id.is_not(None),
                    Dispatch.check_update_state.in_([PENDING, UPDATING]),
                )
            )
        )
    )
