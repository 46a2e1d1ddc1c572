"""store.group_commit against SQLite and PostgreSQL: concurrent requests' deliveries share
transactions, yet each is answered as if stored alone (new once, duplicate after, a failed one
redelivered), a rejected one is stored and never announced, and one delivery whose write fails
fails only its own request."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from store import deliveries
from store.db import session_scope
from store.deliveries import DeliveryCreate, Stored
from store.group_commit import GroupCommit
from store.models import Delivery, DeliveryState


def _data(delivery_id: str, **overrides: Any) -> DeliveryCreate:
    base: dict[str, Any] = {
        "delivery_id": delivery_id,
        "event": "pull_request",
        "action": "opened",
        "repo": "pytorch/pytorch",
        "raw_body": b"{}",
        "pr_number": 7,
        "normalized": {"event": "pull_request"},
    }
    return DeliveryCreate(**{**base, **overrides})


async def _store_all(
    writer: GroupCommit, items: list[tuple[DeliveryCreate, Callable[[], Any] | None]]
) -> list[Any]:
    return await asyncio.gather(
        *(writer.store(data, outbox) for data, outbox in items), return_exceptions=True
    )


def test_concurrent_deliveries_share_transactions_and_keep_their_answers(database_url: str) -> None:
    with session_scope(database_url) as session:  # stored earlier, its processing failed
        _, failed_pk = deliveries.store(session, data=_data("failed-once"))
        deliveries.mark_failed(session, pk=failed_pk, error="boom")
    writer = GroupCommit(database_url)
    try:
        items = [(_data(f"d-{i}"), None) for i in range(40)]
        items += [(_data("d-3"), None), (_data("d-3"), None)]  # duplicates in the same burst
        items.append((_data("failed-once"), None))  # a redelivery of the failed one
        items.append((_data("bad", pr_number=2**40), None))  # stored, rejected
        results = asyncio.run(_store_all(writer, items))
    finally:
        writer.close()
    outcomes = [outcome for outcome, _ in results]
    assert outcomes[:40] == [Stored.NEW] * 40
    assert outcomes[40:42] == [Stored.DUPLICATE] * 2
    assert results[40][1] == results[3][1]  # the duplicate names the stored row
    assert results[42] == (Stored.REDELIVERY, failed_pk)
    assert outcomes[43] is Stored.NEW
    assert writer.batches < len(items)  # transactions were shared
    with session_scope(database_url) as session:
        assert session.scalar(select(func.count()).select_from(Delivery)) == 42
        states = dict(session.execute(select(Delivery.delivery_id, Delivery.state)).all())
    assert states["bad"] == DeliveryState.REJECTED.value
    assert states["failed-once"] == DeliveryState.RECEIVED.value
    assert {states[f"d-{i}"] for i in range(40)} == {DeliveryState.RECEIVED.value}


def test_a_failing_write_fails_only_its_own_delivery(database_url: str) -> None:
    def broken() -> Callable[[Session, int], None]:
        def write(session: Session, pk: int) -> None:
            raise RuntimeError("outbox write failed")

        return write

    writer = GroupCommit(database_url)
    try:
        items: list[tuple[DeliveryCreate, Callable[[], Any] | None]] = [
            (_data(f"ok-{i}"), None) for i in range(20)
        ]
        items.insert(7, (_data("broken"), broken))
        results = asyncio.run(_store_all(writer, items))
    finally:
        writer.close()
    assert isinstance(results[7], RuntimeError)
    assert [r[0] for i, r in enumerate(results) if i != 7] == [Stored.NEW] * 20
    with session_scope(database_url) as session:
        stored = set(session.scalars(select(Delivery.delivery_id)))
    assert stored == {f"ok-{i}" for i in range(20)}  # the broken one left nothing behind


def test_one_at_a_time_is_one_transaction_each(database_url: str) -> None:
    writer = GroupCommit(database_url)

    async def one_by_one() -> list[Any]:
        return [await writer.store(_data(f"s-{i}")) for i in range(5)]

    try:
        results = asyncio.run(one_by_one())
    finally:
        writer.close()
    assert [r[0] for r in results] == [Stored.NEW] * 5
    assert writer.batches == 5


def test_postgres_announces_a_batch_only_when_it_stored_a_delivery_to_publish(
    postgres_url: str,
) -> None:
    """The batch's one statement NOTIFYs the outbox publisher (at commit) when one of its new
    rows is to be published: not for rejected rows, nor for ids stored already."""
    import psycopg
    from sqlalchemy.engine import make_url

    from store import migrate

    migrate.upgrade(postgres_url)
    dsn = make_url(postgres_url).set(drivername="postgresql").render_as_string(False)
    listener = psycopg.connect(dsn, autocommit=True)
    listener.execute(f"LISTEN {deliveries.NOTIFY_CHANNEL}")
    writer = GroupCommit(postgres_url)

    def notified(items: list[tuple[DeliveryCreate, Callable[[], Any] | None]]) -> int:
        asyncio.run(_store_all(writer, items))
        return len(list(listener.notifies(timeout=0.5)))

    try:
        assert notified([(_data("new-1"), None), (_data("new-2"), None)]) == 1
        assert notified([(_data("bad", pr_number=2**40), None)]) == 0  # rejected only
        assert notified([(_data("new-1"), None), (_data("bad"), None)]) == 0  # stored already
        assert notified([(_data("bad-2", pr_number=-1), None), (_data("new-3"), None)]) == 1
    finally:
        writer.close()
        listener.close()
