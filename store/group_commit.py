"""Group commit for the webhook: the deliveries of concurrent requests stored in shared
transactions by one writer thread.

A request still answers only once its own delivery (and its outbox rows) is committed: nothing is
acknowledged that is not durable. What is shared is the cost around the write: one transaction,
one commit (SQLite's WAL append, PostgreSQL's round trip and flush), one connection checkout for
every request that arrived while the previous batch was committing, and no thread-pool hop per
request (the writer hands each result back to the request's event loop). Under no concurrency a
batch is one delivery, as before.

A new delivery is one ``INSERT ... ON CONFLICT (delivery_id) DO NOTHING RETURNING id``; a
delivery id already stored (a duplicate, or a redelivery of a failed delivery) returns no row and
takes :func:`store.deliveries.store`'s path after the batch, which answers it exactly as before.
When a batch's transaction fails, each of its deliveries is stored again alone, so one bad
delivery fails only its own request.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from store import deliveries
from store.db import session_scope
from store.deliveries import DeliveryCreate, StoreOutcome
from store.models import Delivery

log = logging.getLogger("store.group_commit")

#: the most deliveries one transaction stores
MAX_BATCH = 64

#: what ``outbox()`` gives: rows to write with a new delivery, in its transaction
OutboxWrite = Callable[[Session, int], object]

_TABLE = Delivery.__table__


def _insert_new(dialect: str) -> Any:
    module = postgresql if dialect == "postgresql" else sqlite
    return (
        module.insert(_TABLE)
        .on_conflict_do_nothing(index_elements=["delivery_id"])
        .returning(_TABLE.c.id, _TABLE.c.delivery_id)
    )


_INSERTS = {name: _insert_new(name) for name in ("postgresql", "sqlite")}


@dataclass
class _Item:
    data: DeliveryCreate
    outbox: Callable[[], OutboxWrite | None] | None
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[tuple[StoreOutcome, int]]


class GroupCommit:
    """One writer thread per database URL and process (started on first use)."""

    def __init__(self, url: str, *, max_batch: int = MAX_BATCH) -> None:
        self.url = url
        self.max_batch = max_batch
        self.batches = 0  # transactions committed, for tests and logs
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    async def store(
        self, data: DeliveryCreate, outbox: Callable[[], OutboxWrite | None] | None = None
    ) -> tuple[StoreOutcome, int]:
        """Store ``data`` (and what ``outbox()``, called in the writer, gives) like
        :func:`store.deliveries.store`; returns once it is committed."""
        loop = asyncio.get_running_loop()
        item = _Item(data, outbox, loop, loop.create_future())
        self._start()
        self._queue.put(item)
        return await item.future

    def close(self) -> None:
        with self._lock:
            if self._thread is not None:
                self._queue.put(None)
                self._thread.join(timeout=10)
                self._thread = None

    def _start(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="ingest-group-commit", daemon=True
                    )
                    self._thread.start()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # stop after this batch
                    break
                batch.append(item)
            for item, result in zip(batch, self._write(batch), strict=True):
                item.loop.call_soon_threadsafe(_settle, item.future, result)

    def _write(self, batch: list[_Item]) -> list[tuple[StoreOutcome, int] | BaseException]:
        try:
            # the relay role's outbox is computed first: it may sync the downstream rows in a
            # transaction of its own, which must not wait behind this batch's write lock
            writes = [item.outbox() if item.outbox else None for item in batch]
            pks = self._insert(batch, writes)
            self.batches += 1
        except Exception:
            if len(batch) > 1:
                log.warning("batch of %d deliveries failed; storing each alone", len(batch))
                return [r for item in batch for r in self._write([item])]
            return [_exception()]
        results: list[tuple[StoreOutcome, int] | BaseException] = []
        for item, pk in zip(batch, pks, strict=True):
            if pk is not None:
                results.append((StoreOutcome.NEW, pk))
                continue
            try:  # already stored: duplicate or redelivery, as deliveries.store decides
                with session_scope(self.url) as session:
                    results.append(deliveries.store(session, data=item.data))
            except Exception:
                results.append(_exception())
        return results

    def _insert(self, batch: list[_Item], writes: list[OutboxWrite | None]) -> list[int | None]:
        """The batch's new deliveries in one multi-row INSERT (and their outbox rows), one
        transaction: each item's pk, None for a delivery id stored already (or earlier in the
        batch)."""
        fitted = [deliveries.fit(item.data) for item in batch]
        first: dict[str, int] = {}
        for index, data in enumerate(fitted):
            first.setdefault(data.delivery_id, index)
        rows = [deliveries.row_values(d) for i, d in enumerate(fitted) if first[d.delivery_id] == i]
        with session_scope(self.url) as session:
            dialect = session.get_bind().dialect.name
            statement = _INSERTS.get(dialect)
            if statement is None:  # pragma: no cover - the project runs on these two
                raise RuntimeError(f"no group-commit INSERT for {dialect}")
            stored = dict(
                (delivery_id, pk)
                for pk, delivery_id in session.connection().execute(statement, rows)
            )
            pks: list[int | None] = [
                stored.get(d.delivery_id) if first[d.delivery_id] == i else None
                for i, d in enumerate(fitted)
            ]
            announce = False
            for data, pk, write in zip(fitted, pks, writes, strict=True):
                if pk is not None and data.error is None:
                    announce = True
                    if write is not None:
                        write(session, pk)
            if announce:
                deliveries.announce(session)
        return pks


def _exception() -> BaseException:
    import sys

    exc = sys.exc_info()[1]
    assert exc is not None
    return exc


def _settle(
    future: asyncio.Future[tuple[StoreOutcome, int]],
    result: tuple[StoreOutcome, int] | BaseException,
) -> None:
    if future.cancelled():
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)
