"""Data access for the relay role's outbox: dispatches to downstream repositories, written in the
delivery's own transaction, claimed by one sender at a time, retried at ``next_attempt_at``,
dead-lettered when exhausted.

Keyword-only arguments; functions that commit say so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, func, insert, or_, select, update
from sqlalchemy.orm import Session

from store import check_updates
from store.models import CheckState, Delivery, Dispatch, DispatchState, Downstream, Job, utcnow


@dataclass(frozen=True)
class DownstreamRow:
    repo: str
    level: str
    device: str | None
    oncalls: tuple[str, ...]
    policy: dict[str, Any]


@dataclass(frozen=True)
class OutboxItem:
    downstream_pk: int
    target: str
    nonce: str


def sync_downstreams(session: Session, *, rows: Iterable[DownstreamRow]) -> dict[str, int]:
    """Upsert the relay role's downstreams; returns repo -> pk (commits). Rows not given are
    left alone (the in-process runner's row, and rows an allowlist sync disabled)."""
    by_repo = {d.repo: d for d in session.scalars(select(Downstream))}
    out: dict[str, int] = {}
    for row in rows:
        existing = by_repo.get(row.repo)
        if existing is None:
            existing = Downstream(repo=row.repo, enabled=True)
            session.add(existing)
        existing.level, existing.device = row.level, row.device
        existing.oncalls, existing.policy, existing.enabled = list(row.oncalls), row.policy, True
        session.flush()
        out[row.repo] = existing.id
    session.commit()
    return out


def add(session: Session, *, delivery_pk: int, items: Iterable[OutboxItem]) -> int:
    """Dispatch rows for one delivery, due now (not committed: the delivery's transaction), in
    one executemany INSERT."""
    now = utcnow()
    rows = [
        {
            "delivery_pk": delivery_pk,
            "downstream_pk": item.downstream_pk,
            "target": item.target,
            "nonce": item.nonce,
            "state": DispatchState.PENDING.value,
            "attempts": 0,
            "check_attempts": 0,
            "next_attempt_at": now,
            "created_at": now,
            "updated_at": now,
        }
        for item in items
    ]
    if rows:
        session.execute(insert(Dispatch.__table__), rows)  # type: ignore[arg-type]
    return len(rows)


def pending_of(session: Session, *, delivery_pk: int) -> list[int]:
    return list(
        session.scalars(
            select(Dispatch.id).where(
                Dispatch.delivery_pk == delivery_pk,
                Dispatch.state == DispatchState.PENDING.value,
                Dispatch.target != "runner",
            )
        )
    )


def mark_enqueued(session: Session, *, pks: list[int]) -> None:
    if pks:
        session.execute(update(Dispatch).where(Dispatch.id.in_(pks)).values(enqueued_at=utcnow()))
        session.commit()


def claim(session: Session, *, pk: int, lease_seconds: float, now: datetime | None = None) -> bool:
    """PENDING and due -> SENDING for exactly one sender (commits)."""
    now = now or utcnow()
    result = session.execute(
        update(Dispatch)
        .where(
            Dispatch.id == pk,
            Dispatch.state == DispatchState.PENDING.value,
            Dispatch.target != "runner",  # the in-process runner's rows are planned, not sent
            or_(Dispatch.next_attempt_at.is_(None), Dispatch.next_attempt_at <= now),
        )
        .values(
            state=DispatchState.SENDING.value,
            lease_until=now + timedelta(seconds=lease_seconds),
            attempts=Dispatch.attempts + 1,
        )
    )
    session.commit()
    return result.rowcount == 1  # type: ignore[attr-defined]


def finish(
    session: Session,
    *,
    pk: int,
    state: DispatchState,
    error: str | None = None,
    http_status: int | None = None,
    next_attempt_at: datetime | None = None,
    refund_attempt: bool = False,
) -> None:
    """Leave SENDING for ``state`` (commits). ``refund_attempt``: the try did not count (the
    downstream had too many jobs in flight)."""
    values: dict[str, Any] = {
        "state": state.value,
        "last_error": error[:4000] if error else None,
        "http_status": http_status,
        "lease_until": None,
        "next_attempt_at": next_attempt_at,
    }
    if state is DispatchState.SENT:
        values["sent_at"] = utcnow()
    if refund_attempt:
        values["attempts"] = Dispatch.attempts - 1
    session.execute(
        update(Dispatch)
        .where(Dispatch.id == pk, Dispatch.state == DispatchState.SENDING.value)
        .values(**values)
    )
    session.commit()


def due(session: Session, *, now: datetime | None = None, limit: int = 500) -> list[int]:
    """Outbox rows whose time has come (never sent, a retry due, or a sender that died)."""
    now = now or utcnow()
    return list(
        session.scalars(
            select(Dispatch.id)
            .where(
                Dispatch.target != "runner",
                or_(
                    (Dispatch.state == DispatchState.PENDING.value)
                    & or_(Dispatch.next_attempt_at.is_(None), Dispatch.next_attempt_at <= now),
                    (Dispatch.state == DispatchState.SENDING.value) & (Dispatch.lease_until < now),
                ),
            )
            .order_by(Dispatch.id)
            .limit(limit)
        )
    )


def release_expired(session: Session, *, now: datetime | None = None) -> int:
    """SENDING past its lease: its sender died; back to PENDING (commits)."""
    now = now or utcnow()
    result = session.execute(
        update(Dispatch)
        .where(Dispatch.state == DispatchState.SENDING.value, Dispatch.lease_until < now)
        .values(state=DispatchState.PENDING.value, lease_until=None, next_attempt_at=now)
    )
    session.commit()
    return int(result.rowcount)  # type: ignore[attr-defined]


def retry_dead(session: Session, *, pk: int) -> bool:
    """A dead letter back into the outbox with its attempts reset (commits): a dead dispatch,
    or a sent dispatch whose check run could not be created or updated."""
    result = session.execute(
        update(Dispatch)
        .where(Dispatch.id == pk, Dispatch.state == DispatchState.DEAD.value)
        .values(state=DispatchState.PENDING.value, attempts=0, next_attempt_at=utcnow())
    )
    checks = session.execute(
        update(Dispatch)
        .where(Dispatch.id == pk, Dispatch.check_state == CheckState.DEAD.value)
        .values(
            check_state=CheckState.PENDING.value, check_attempts=0, check_next_attempt_at=utcnow()
        )
    )
    updates = check_updates.retry_dead(session, pk=pk)
    session.commit()
    return result.rowcount == 1 or checks.rowcount == 1 or updates  # type: ignore[attr-defined]


# --- a dispatch's check run: created once the dispatch is sent, retried like it


def want_check(session: Session, *, pk: int) -> None:
    """The dispatch needs its check run, now (commits); a job that reported before this moment
    (a fast downstream) gets its update once the check run exists."""
    session.execute(
        update(Dispatch)
        .where(Dispatch.id == pk, Dispatch.check_state.is_(None))
        .values(check_state=CheckState.PENDING.value, check_next_attempt_at=utcnow())
    )
    session.commit()
    check_updates.want_latest(session, dispatch_pk=pk)


def claim_check(
    session: Session, *, pk: int, lease_seconds: float, now: datetime | None = None
) -> bool:
    """PENDING and due (or CREATING past its lease: its sender died) -> CREATING (commits)."""
    now = now or utcnow()
    result = session.execute(
        update(Dispatch)
        .where(
            Dispatch.id == pk,
            Dispatch.check_state.in_([CheckState.PENDING.value, CheckState.CREATING.value]),
            Dispatch.check_next_attempt_at <= now,
        )
        .values(
            check_state=CheckState.CREATING.value,
            check_next_attempt_at=now + timedelta(seconds=lease_seconds),
            check_attempts=Dispatch.check_attempts + 1,
        )
    )
    session.commit()
    return result.rowcount == 1  # type: ignore[attr-defined]


def finish_check(
    session: Session,
    *,
    pk: int,
    state: CheckState,
    error: str | None = None,
    next_attempt_at: datetime | None = None,
    check_run_id: int | None = None,
) -> None:
    """Leave CREATING for ``state`` (commits)."""
    values: dict[str, Any] = {
        "check_state": state.value,
        "check_error": error[:4000] if error else None,
        "check_next_attempt_at": next_attempt_at,
    }
    if check_run_id is not None:
        values["check_run_id"] = check_run_id
    session.execute(
        update(Dispatch)
        .where(Dispatch.id == pk, Dispatch.check_state == CheckState.CREATING.value)
        .values(**values)
    )
    session.commit()


def checks_due(session: Session, *, now: datetime | None = None, limit: int = 500) -> list[int]:
    """Dispatches whose check run is to create now (a retry due, or a sender that died)."""
    now = now or utcnow()
    return list(
        session.scalars(
            select(Dispatch.id)
            .where(
                Dispatch.check_state.in_([CheckState.PENDING.value, CheckState.CREATING.value]),
                Dispatch.check_next_attempt_at <= now,
            )
            .order_by(Dispatch.id)
            .limit(limit)
        )
    )


def downstreams_at(session: Session, *, level: str) -> list[Downstream]:
    return list(
        session.scalars(
            select(Downstream).where(Downstream.level == level, Downstream.enabled.is_(True))
        )
    )


def set_demoted(session: Session, *, pk: int, demoted: bool) -> bool:
    """Record whether the downstream's demotion PR is open (commits); True when it changed."""
    row = session.get(Downstream, pk)
    if row is None or (row.demoted_since is not None) == demoted:
        return False
    row.demoted_since = utcnow() if demoted else None
    session.commit()
    return True


def in_flight(session: Session, *, downstream_pk: int, since: datetime) -> int:
    """Dispatches sent to this downstream since ``since`` whose job has not completed."""
    completed = (
        select(Job.dispatch_pk)
        .where(Job.dispatch_pk.is_not(None), Job.status == "completed")
        .scalar_subquery()
    )
    return int(
        session.scalar(
            select(func.count(Dispatch.id)).where(
                Dispatch.downstream_pk == downstream_pk,
                Dispatch.state == DispatchState.SENT.value,
                Dispatch.sent_at >= since,
                Dispatch.id.not_in(completed),
            )
        )
        or 0
    )


def load(session: Session, *, pk: int) -> tuple[Dispatch, Delivery, Downstream] | None:
    row = session.get(Dispatch, pk)
    if row is None:
        return None
    return row, row.delivery, row.downstream


def listing(
    session: Session, *, state: str | None = None, repo: str | None = None, limit: int = 100
) -> list[tuple[Dispatch, str, str]]:
    """Dispatches newest first with their downstream repo and delivery id."""
    query = (
        select(Dispatch, Downstream.repo, Delivery.delivery_id)
        .join(Downstream, Downstream.id == Dispatch.downstream_pk)
        .join(Delivery, Delivery.id == Dispatch.delivery_pk)
        .order_by(Dispatch.id.desc())
        .limit(limit)
    )
    if state is not None:
        query = query.where(Dispatch.state == state)
    if repo is not None:
        query = query.where(Downstream.repo == repo)
    return [(d, r, i) for d, r, i in session.execute(query).all()]


def by_nonce(session: Session, *, nonce: str) -> Dispatch | None:
    return session.scalar(select(Dispatch).where(Dispatch.nonce == nonce))


def sent_for(session: Session, *, delivery_id: str, repo: str) -> Dispatch | None:
    """The dispatch of upstream delivery ``delivery_id`` to ``repo`` (any state), if any."""
    return session.scalar(
        select(Dispatch)
        .join(Delivery, Delivery.id == Dispatch.delivery_pk)
        .join(Downstream, Downstream.id == Dispatch.downstream_pk)
        .where(Delivery.delivery_id == delivery_id, Downstream.repo == repo)
    )


def dispatches_query(*, state: str | None = None, repo: str | None = None) -> Select[Any]:
    """Dispatches, optionally one state and one downstream repo; unordered (the caller pages
    it)."""
    query = select(Dispatch)
    if state is not None:
        query = query.where(Dispatch.state == state)
    if repo is not None:
        query = query.where(
            Dispatch.downstream_pk.in_(select(Downstream.id).where(Downstream.repo == repo))
        )
    return query


def names_of(session: Session, *, pks: list[int]) -> dict[int, tuple[str, str]]:
    """Each dispatch's downstream repo and delivery id, by the dispatch's id (one query)."""
    found = session.execute(
        select(Dispatch.id, Downstream.repo, Delivery.delivery_id)
        .join(Downstream, Downstream.id == Dispatch.downstream_pk)
        .join(Delivery, Delivery.id == Dispatch.delivery_pk)
        .where(Dispatch.id.in_(pks))
    )
    return {pk: (repo, delivery_id) for pk, repo, delivery_id in found}


def dispatches_of_deliveries(
    session: Session, *, delivery_pks: list[int]
) -> dict[int, list[tuple[str, str, str | None, int | None]]]:
    """Each delivery's dispatches as (downstream repo, state, last error, job id), by the
    delivery's id."""
    out: dict[int, list[tuple[str, str, str | None, int | None]]] = {}
    if not delivery_pks:
        return out
    found = session.execute(
        select(Dispatch.delivery_pk, Downstream.repo, Dispatch.state, Dispatch.last_error, Job.id)
        .join(Downstream, Downstream.id == Dispatch.downstream_pk)
        .outerjoin(Job, Job.dispatch_pk == Dispatch.id)
        .where(Dispatch.delivery_pk.in_(delivery_pks))
    ).all()
    for pk, repo, state, error, job_id in found:
        out.setdefault(pk, []).append((repo, state, error, job_id))
    return out


def all_downstreams(session: Session) -> list[Downstream]:
    """Every registered downstream, by repo."""
    return list(session.scalars(select(Downstream).order_by(Downstream.repo)))
