"""Data access for deliveries: store once, claim atomically, mark outcomes.

Keyword-only arguments; every function takes an open Session and leaves committing to the caller
unless it says otherwise.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Integer, Select, String, select, text, update
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Session, defer

from store.models import Delivery, DeliveryState, utcnow

#: PostgreSQL channel a new or re-queued delivery is announced on (the outbox publisher listens)
NOTIFY_CHANNEL = "relay_delivery"


def announce(session: Session) -> None:
    """NOTIFY the outbox publisher when the transaction commits (PostgreSQL; SQLite polls)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text(_NOTIFY))


_NOTIFY = f"NOTIFY {NOTIFY_CHANNEL}"


#: query options for pages that list deliveries: their raw body and the payload they forward
#: are left unread
WITHOUT_BODIES = (defer(Delivery.raw_body), defer(Delivery.upstream_payload))


class Stored(enum.StrEnum):
    """What storing a delivery did (not a test's outcome: :class:`store.outcomes.Outcome`)."""

    NEW = "new"
    DUPLICATE = "duplicate"
    REDELIVERY = "redelivery"  # a delivery whose processing failed, sent again: process again


@dataclass(frozen=True)
class DeliveryCreate:
    delivery_id: str
    event: str
    action: str | None
    repo: str | None
    raw_body: bytes
    source: str = "webhook"
    upstream_delivery_id: str | None = None
    hook_id: str | None = None
    head_sha: str | None = None
    base_sha: str | None = None
    pr_number: int | None = None
    normalized: dict[str, Any] | None = None  # the typed upstream event's JSON, validated once
    #: the upstream payload CRCR forwards verbatim, as JSON text (the body's own, not serialized
    #: again, when the payload is the body)
    upstream_payload: str | None = None
    error: str | None = None  # why the payload could not be normalized: stored as REJECTED


MAX_INTEGER = 2**31 - 1  # PostgreSQL's INTEGER


def _bounded_columns() -> tuple[dict[str, int], tuple[str, ...]]:
    """The delivery's string columns with their widths, and its integer columns, as the schema
    (store.models.Delivery) declares them: no table of limits of its own (the values' limits are
    the edge's, wire.github.events.LIMITS; this is the store's last guard)."""
    table = Delivery.__table__
    widths: dict[str, int] = {}
    integers: list[str] = []
    for field in dataclasses.fields(DeliveryCreate):
        column_type = table.c[field.name].type if field.name in table.c else None
        if isinstance(column_type, String) and column_type.length is not None:
            widths[field.name] = column_type.length
        elif isinstance(column_type, Integer):
            integers.append(field.name)
    return widths, tuple(integers)


COLUMN_WIDTHS, INTEGER_COLUMNS = _bounded_columns()


def _fits(value: str, width: int) -> bool:
    """At most ``width`` characters of valid UTF-8 (no lone surrogate) without NUL."""
    if len(value) > width or "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def fit(data: DeliveryCreate) -> DeliveryCreate:
    """``data`` with every value its column cannot hold cleared (a string too long, with a NUL
    or a lone surrogate, a number past INTEGER) and, when something was, the delivery rejected with the
    reason: a hostile payload is stored and explained, never a database error."""
    changes: dict[str, Any] = {}
    problems: list[str] = []
    for name, width in COLUMN_WIDTHS.items():
        value = getattr(data, name)
        if isinstance(value, str) and not _fits(value, width):
            if name in ("delivery_id", "event", "source"):  # the row's identity: the caller's check
                raise ValueError(f"{name} does not fit the store ({width} characters of text)")
            changes[name] = None
            problems.append(
                f"{name} is not a string of at most {width} characters of UTF-8 without NUL"
            )
    for name in INTEGER_COLUMNS:
        number = getattr(data, name)
        if number is not None and not 0 <= number <= MAX_INTEGER:
            changes[name] = None
            problems.append(f"{name} {number} is out of range (0 to {MAX_INTEGER})")
    if not problems:
        return data
    error = data.error or "; ".join(problems)
    return replace(data, **changes, normalized=None, upstream_payload=None, error=error)


#: the columns of a new delivery's row, in the order of :func:`row_values`
COLUMNS = (
    "delivery_id",
    "event",
    "action",
    "repo",
    "source",
    "upstream_delivery_id",
    "hook_id",
    "head_sha",
    "base_sha",
    "pr_number",
    "raw_body",
    "body_sha256",
    "normalized",
    "upstream_payload",
    "last_error",
    "state",
    "received_at",
    "processed_at",
    "attempts",
)


def row_values(data: DeliveryCreate) -> tuple[Any, ...]:
    """The delivery's row as stored when new (``data`` already :func:`fit`), in
    :data:`COLUMNS` order."""
    rejected = data.error is not None
    now = utcnow()
    return (
        data.delivery_id,
        data.event,
        data.action,
        data.repo,
        data.source,
        data.upstream_delivery_id,
        data.hook_id,
        data.head_sha,
        data.base_sha,
        data.pr_number,
        data.raw_body,
        hashlib.sha256(data.raw_body).hexdigest(),
        data.normalized,
        data.upstream_payload,
        data.error[:4000] if data.error else None,
        (DeliveryState.REJECTED if rejected else DeliveryState.RECEIVED).value,
        now,
        now if rejected else None,
        0,
    )


class _Insert:
    """The one INSERT of new deliveries, for one dialect: ``ON CONFLICT (delivery_id) DO
    NOTHING RETURNING id, delivery_id``, the values bound as SQLAlchemy binds them (its
    column types' bind processors), run on the DBAPI cursor of the caller's transaction. On
    PostgreSQL the rows go as one array per column (``unnest``: one statement of fixed text
    for any number of rows, prepared once); on SQLite one statement per row (sqlite3 caches
    it; there is no round trip)."""

    def __init__(self, dialect: Dialect) -> None:
        table = Delivery.__table__
        columns = [table.c[name] for name in COLUMNS]
        self.processors = [
            _json_text(dialect)
            if c.name == "upstream_payload"
            else c.type.dialect_impl(dialect).bind_processor(dialect)
            for c in columns
        ]
        names = ", ".join(COLUMNS)
        tail = "ON CONFLICT (delivery_id) DO NOTHING RETURNING id, delivery_id"
        self.arrays = dialect.name == "postgresql"
        if self.arrays:
            # one statement (one round trip): the rows, and the NOTIFY (delivered at commit)
            # when one of the new rows is to be published
            types = [c.type.compile(dialect=dialect) for c in columns]
            unnest = ", ".join(f"%b::{t}[]" for t in types)
            self.sql = (
                f"WITH new AS (INSERT INTO delivery ({names}) SELECT * FROM unnest({unnest}) "
                f"{tail}, state), announced AS (SELECT pg_notify('{NOTIFY_CHANNEL}', '') "
                f"FROM new WHERE state = '{DeliveryState.RECEIVED.value}' LIMIT 1) "
                "SELECT id, delivery_id FROM new WHERE (SELECT count(*) FROM announced) >= 0"
            )
        else:  # SQLite polls: nothing to announce
            marks = ", ".join("?" if dialect.paramstyle == "qmark" else "%s" for _ in columns)
            self.sql = f"INSERT INTO delivery ({names}) VALUES ({marks}) {tail}"

    def bound(self, row: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(
            value if process is None else process(value)
            for value, process in zip(row, self.processors, strict=True)
        )


def _json_text(dialect: Dialect) -> Callable[[str | None], Any] | None:
    """The bind of a JSON column given JSON text: bound as it is (not serialized again)."""
    if dialect.name != "postgresql":
        return None  # SQLite's JSON is the text
    from psycopg.types.json import Json

    def as_is(text: str) -> str:
        return text

    return lambda text: None if text is None else Json(text, dumps=as_is)


_inserts: dict[Dialect, _Insert] = {}


def insert_new(cursor: Any, dialect: Dialect, batch: Sequence[DeliveryCreate]) -> dict[str, int]:
    """Insert the deliveries of ``batch`` (each already :func:`fit`, their ids distinct) whose
    delivery id is not stored yet, on ``cursor`` (a DBAPI cursor of the caller's transaction,
    not committed); returns delivery id -> pk of the rows inserted. When one of them is to be
    processed (not rejected), the outbox publisher is announced to (as :func:`announce` does).

    The one INSERT of a new delivery: :func:`store` (one delivery, in a Session) and
    :mod:`store.group_commit` (a batch, on the writer's own connection) both go through it."""
    if not batch:
        return {}
    insert = _inserts.get(dialect)
    if insert is None:
        insert = _inserts[dialect] = _Insert(dialect)
    rows = [insert.bound(row_values(data)) for data in batch]
    stored: dict[str, int] = {}
    if insert.arrays:
        cursor.execute(insert.sql, [list(column) for column in zip(*rows, strict=True)])
        stored.update((delivery_id, pk) for pk, delivery_id in cursor.fetchall())
    else:
        for row in rows:
            cursor.execute(insert.sql, row)
            for pk, delivery_id in cursor.fetchall():
                stored[delivery_id] = pk
    return stored


def existing(session: Session, *, delivery_id: str) -> tuple[Stored, int]:
    """The answer to a delivery whose id is stored already (commits): a redelivery of a failed
    one is flipped back to RECEIVED atomically (exactly one of several concurrent redeliveries
    re-enqueues it), anything else is a duplicate."""
    pk = session.scalar(select(Delivery.id).where(Delivery.delivery_id == delivery_id))
    if pk is None:  # pragma: no cover - the conflicting row cannot vanish (no deletes)
        raise RuntimeError(f"delivery {delivery_id} conflicted but is not stored")
    result = session.execute(
        update(Delivery)
        .where(Delivery.id == pk, Delivery.state == DeliveryState.FAILED.value)
        .values(state=DeliveryState.RECEIVED.value, received_at=utcnow(), published_at=None)
    )
    if result.rowcount == 1:  # type: ignore[attr-defined]
        announce(session)
    session.commit()
    if result.rowcount == 1:  # type: ignore[attr-defined]
        return Stored.REDELIVERY, pk
    return Stored.DUPLICATE, pk


def store(
    session: Session,
    *,
    data: DeliveryCreate,
    outbox: Callable[[Session, int], object] | None = None,
) -> tuple[Stored, int]:
    """Insert the delivery exactly once (commits). Concurrent duplicates are resolved by the
    unique constraint on delivery_id (:func:`insert_new`); a failed one is flipped back to
    RECEIVED atomically so exactly one of several concurrent redeliveries re-enqueues it
    (:func:`existing`). A delivery with an ``error`` is stored REJECTED (never processed);
    values its columns cannot hold are cleared (:func:`fit`). ``outbox(session, delivery_pk)``
    adds rows in the same transaction as a new delivery (the relay role's dispatches: both are
    stored, or neither)."""
    data = fit(data)
    connection = session.connection()
    cursor = connection.connection.cursor()
    try:
        pk = insert_new(cursor, connection.dialect, [data]).get(data.delivery_id)
    finally:
        cursor.close()
    if pk is None:
        session.rollback()
        return existing(session, delivery_id=data.delivery_id)
    if outbox is not None and data.error is None:
        outbox(session, pk)
    session.commit()
    return Stored.NEW, pk


def pk_of(session: Session, *, delivery_id: str) -> int | None:
    return session.scalar(select(Delivery.id).where(Delivery.delivery_id == delivery_id))


def unpublished(session: Session, *, limit: int = 200) -> list[tuple[int, str]]:
    """The outbox of deliveries: RECEIVED and not yet handed to the broker, oldest first, as
    ``(pk, delivery_id)``. On PostgreSQL the rows are locked (``SKIP LOCKED``) until the
    caller's transaction ends, so two publishers never take the same row."""
    query = (
        select(Delivery.id, Delivery.delivery_id)
        .where(Delivery.state == DeliveryState.RECEIVED.value, Delivery.published_at.is_(None))
        .order_by(Delivery.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return [(pk, delivery_id) for pk, delivery_id in session.execute(query).all()]


def mark_published(session: Session, *, pks: list[int]) -> None:
    """Handed to the broker (not committed: the caller's transaction, the one that locked them)."""
    if pks:
        session.execute(
            update(Delivery)
            .where(Delivery.id.in_(pks), Delivery.published_at.is_(None))
            .values(published_at=utcnow())
        )


def claim(session: Session, *, pk: int) -> bool:
    """Move RECEIVED -> PROCESSING for exactly one caller (commits)."""
    result = session.execute(
        update(Delivery)
        .where(Delivery.id == pk, Delivery.state == DeliveryState.RECEIVED.value)
        .values(state=DeliveryState.PROCESSING.value, attempts=Delivery.attempts + 1)
    )
    session.commit()
    return result.rowcount == 1  # type: ignore[attr-defined]


def mark_processed(session: Session, *, pk: int) -> None:
    """Processed (commits); its stored event is the one ingress wrote, unchanged."""
    session.execute(
        update(Delivery)
        .where(Delivery.id == pk)
        .values(state=DeliveryState.PROCESSED.value, processed_at=utcnow(), last_error=None)
    )
    session.commit()


def mark_failed(session: Session, *, pk: int, error: str) -> None:
    session.execute(
        update(Delivery)
        .where(Delivery.id == pk)
        .values(state=DeliveryState.FAILED.value, last_error=error[:4000])
    )
    session.commit()


def mark_rejected(session: Session, *, pk: int, error: str) -> None:
    """Not the shape of its event: never processed, the reason kept (commits)."""
    session.execute(
        update(Delivery)
        .where(Delivery.id == pk)
        .values(state=DeliveryState.REJECTED.value, last_error=error[:4000], processed_at=utcnow())
    )
    session.commit()


def stale_received(
    session: Session, *, older_than: timedelta, now: datetime | None = None
) -> list[int]:
    """Deliveries handed to the broker but never picked up (a message lost with a broker
    restart), and deliveries whose worker died mid-processing. Rows still to publish are the
    publisher's (:func:`unpublished`), not stale."""
    cutoff = (now or utcnow()) - older_than
    return list(
        session.scalars(
            select(Delivery.id).where(
                (
                    (Delivery.state == DeliveryState.RECEIVED.value)
                    & Delivery.published_at.is_not(None)
                )
                | (Delivery.state == DeliveryState.PROCESSING.value),
                Delivery.received_at < cutoff,
            )
        )
    )


def requeue_stuck(session: Session, *, pk: int) -> bool:
    """Back into the outbox (RECEIVED, to publish again): its message was lost, or its worker
    died while PROCESSING (commits)."""
    result = session.execute(
        update(Delivery)
        .where(
            Delivery.id == pk,
            Delivery.state.in_([DeliveryState.RECEIVED.value, DeliveryState.PROCESSING.value]),
        )
        .values(state=DeliveryState.RECEIVED.value, received_at=utcnow(), published_at=None)
    )
    if result.rowcount == 1:  # type: ignore[attr-defined]
        announce(session)
    session.commit()
    return result.rowcount == 1  # type: ignore[attr-defined]


def deliveries_query(
    *, state: str | None = None, event: str | None = None, pr_number: int | None = None
) -> Select[Any]:
    """Deliveries without their bodies, optionally one state, one event, one upstream PR;
    unordered (the caller pages it)."""
    query = select(Delivery).options(*WITHOUT_BODIES)
    if state is not None:
        query = query.where(Delivery.state == state)
    if event is not None:
        query = query.where(Delivery.event == event)
    if pr_number is not None:
        query = query.where(Delivery.pr_number == pr_number)
    return query


def by_delivery_id(session: Session, *, delivery_id: str) -> Delivery | None:
    """One delivery without its bodies, by its X-GitHub-Delivery id."""
    return session.scalar(
        select(Delivery).options(*WITHOUT_BODIES).where(Delivery.delivery_id == delivery_id)
    )
