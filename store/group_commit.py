"""Group commit for the webhook: the deliveries of concurrent requests stored in shared
transactions by one writer thread.

A request still answers only once its own delivery (and its outbox rows) is committed: nothing is
acknowledged that is not durable. What is shared is the cost around the write: one transaction,
one commit (SQLite's WAL append, PostgreSQL's round trip and flush) for every request that
arrived while the previous batch was committing, and no thread-pool hop per request (the writer
hands each result back to the request's event loop). Under no concurrency a batch is one
delivery, as before.

The writer keeps one connection of the engine's pool checked out while it runs (no checkout, no
pre-ping, no ORM session per batch; a connection a batch failed on is dropped and the next batch
checks out a fresh one) and writes on its DBAPI cursor :func:`store.deliveries.insert_new`, the
one INSERT of a new delivery (``ON CONFLICT (delivery_id) DO NOTHING RETURNING``), for the whole
batch: on SQLite one transaction, one commit; on PostgreSQL one statement (the rows as arrays,
the NOTIFY in it) in autocommit, its own transaction, one round trip. A batch with outbox rows
to add (the relay role's dispatches) is written through a Session instead, the rows in the
deliveries' transaction. A delivery id already stored (a duplicate, or a redelivery of a failed
delivery) returns no row and is answered by :func:`store.deliveries.existing` after the batch,
as :func:`store.deliveries.store` answers it. When a batch's transaction fails, each of its
deliveries is stored again alone, so one bad delivery fails only its own request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from store import deliveries
from store.db import get_engine, session_scope
from store.deliveries import DeliveryCreate, Stored

log = logging.getLogger("store.group_commit")

#: the most deliveries one transaction stores
MAX_BATCH = 64

#: what ``outbox()`` gives: rows to write with a new delivery, in its transaction
OutboxWrite = Callable[[Session, int], object]


#: a delivery's answer, or why it could not be stored
_Result = tuple[Stored, int] | BaseException
_Future = asyncio.Future[tuple[Stored, int]]


@dataclass
class _Item:
    data: DeliveryCreate
    outbox: Callable[[], OutboxWrite | None] | None
    loop: asyncio.AbstractEventLoop
    future: _Future


class GroupCommit:
    """One writer thread per database URL and process (started on first use, stopped by
    :meth:`close`)."""

    def __init__(self, url: str, *, max_batch: int = MAX_BATCH) -> None:
        self.url = url
        self.max_batch = max_batch
        self.batches = 0  # transactions committed, for tests and logs
        self._queue: queue.SimpleQueue[list[_Item] | None] = queue.SimpleQueue()
        # per event loop, the deliveries of its current iteration: handed over together
        self._pending: dict[asyncio.AbstractEventLoop, list[_Item]] = {}
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._local = threading.local()  # .connection: the writer thread's own

    async def store(
        self, data: DeliveryCreate, outbox: Callable[[], OutboxWrite | None] | None = None
    ) -> tuple[Stored, int]:
        """Store ``data`` (and what ``outbox()``, called in the writer, gives) like
        :func:`store.deliveries.store`; returns once it is committed."""
        loop = asyncio.get_running_loop()
        item = _Item(data, outbox, loop, loop.create_future())
        pending = self._pending.get(loop)
        if pending is None:
            # the requests this iteration of the loop runs join it: one hand-over (and one
            # wake-up of the writer) per iteration, not per request
            pending = self._pending[loop] = []
            loop.call_soon(self._hand_over, loop)
        pending.append(item)
        return await item.future

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        items = self._pending.pop(loop)
        with self._lock:
            self._queue.put(items)
            if self._closed:  # (not expected) handed over after close(): stored, then stop
                self._queue.put(None)
                self._start()
            elif self._thread is None:
                self._thread = self._start()

    def close(self, *, wait: bool = True) -> None:
        """Stop the writer once the deliveries handed to it before this call are stored (its
        connection goes back to the pool); ``wait``: until then. A request's delivery is handed
        over in the event loop's next iteration: an event loop closing a writer it used does so
        from a callback (``loop.call_soon(writer.close, ...)``), which runs after."""
        with self._lock:
            self._closed = True
            thread, self._thread = self._thread, None
            if thread is not None:
                self._queue.put(None)
        if thread is not None and wait:
            thread.join(timeout=10)

    def _start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, name="ingest-group-commit", daemon=True)
        thread.start()
        return thread

    def _run(self) -> None:
        try:
            while True:
                first = self._queue.get()
                if first is None:
                    return
                waiting = list(first)
                while len(waiting) < self.max_batch:
                    try:
                        more = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        self._queue.put(None)  # stop after this batch
                        break
                    waiting.extend(more)
                for start in range(0, len(waiting), self.max_batch):
                    batch = waiting[start : start + self.max_batch]
                    settled: dict[asyncio.AbstractEventLoop, list[tuple[_Future, _Result]]] = {}
                    for item, result in zip(batch, self._write(batch), strict=True):
                        settled.setdefault(item.loop, []).append((item.future, result))
                    for loop, results in settled.items():
                        loop.call_soon_threadsafe(_settle, results)
        finally:
            self._release()

    def _write(self, batch: list[_Item]) -> list[_Result]:
        try:
            # the relay role's outbox is computed first: it may sync the downstream rows in a
            # transaction of its own, which must not wait behind this batch's write lock
            writes = [item.outbox() if item.outbox else None for item in batch]
            pks = self._insert(batch, writes)
            self.batches += 1
        except Exception:
            self._release(invalidate=True)  # whatever failed, the next batch starts afresh
            if len(batch) > 1:
                log.warning("batch of %d deliveries failed; storing each alone", len(batch))
                return [r for item in batch for r in self._write([item])]
            return [_exception()]
        results: list[_Result] = []
        for item, pk in zip(batch, pks, strict=True):
            if pk is not None:
                results.append((Stored.NEW, pk))
                continue
            try:  # already stored: duplicate or redelivery
                with session_scope(self.url) as session:
                    results.append(deliveries.existing(session, delivery_id=item.data.delivery_id))
            except Exception:
                results.append(_exception())
        return results

    def _insert(self, batch: list[_Item], writes: list[OutboxWrite | None]) -> list[int | None]:
        """The batch's new deliveries (and their outbox rows) in one transaction: each item's
        pk, None for a delivery id stored already (or earlier in the batch)."""
        fitted = [deliveries.fit(item.data) for item in batch]
        first: dict[str, int] = {}
        for index, data in enumerate(fitted):
            first.setdefault(data.delivery_id, index)
        new = [d for i, d in enumerate(fitted) if first[d.delivery_id] == i]
        if any(write is not None for write in writes):
            # outbox rows to add (the relay role's dispatches): through a Session, on a pooled
            # connection, in the deliveries' transaction
            with session_scope(self.url) as session:
                stored = _insert_new(session.connection(), new)
                pks = _pks(fitted, first, stored)
                for data, pk, write in zip(fitted, pks, writes, strict=True):
                    if write is not None and pk is not None and data.error is None:
                        write(session, pk)
            return pks
        connection = self._connection()
        if connection.dialect.name == "postgresql":
            # autocommit: the INSERT (and its NOTIFY) is one statement, its own transaction,
            # one round trip for the batch
            return _pks(fitted, first, _insert_new(connection, new))
        with connection.begin():
            return _pks(fitted, first, _insert_new(connection, new))

    def _connection(self) -> Connection:
        """The writer thread's own connection (checked out of the pool on first use)."""
        connection: Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = get_engine(self.url).connect()
            if connection.dialect.name == "postgresql":
                connection = connection.execution_options(isolation_level="AUTOCOMMIT")
            self._local.connection = connection
        return connection

    def _release(self, *, invalidate: bool = False) -> None:
        connection: Connection | None = getattr(self._local, "connection", None)
        self._local.connection = None
        if connection is not None:
            with contextlib.suppress(Exception):
                if invalidate:
                    connection.invalidate()
                connection.close()


def _insert_new(connection: Connection, new: list[DeliveryCreate]) -> dict[str, int]:
    cursor = connection.connection.cursor()
    try:
        return deliveries.insert_new(cursor, connection.dialect, new)
    finally:
        cursor.close()


def _pks(
    fitted: list[DeliveryCreate], first: dict[str, int], stored: dict[str, int]
) -> list[int | None]:
    """Each delivery's new pk: None for an id stored already, or earlier in the batch."""
    return [
        stored.get(d.delivery_id) if first[d.delivery_id] == i else None
        for i, d in enumerate(fitted)
    ]


def _exception() -> BaseException:
    import sys

    exc = sys.exc_info()[1]
    assert exc is not None
    return exc


def _settle(
    results: list[tuple[_Future, _Result]],
) -> None:
    for future, result in results:
        if future.cancelled():
            continue
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)
