"""The outbox publisher: hands stored deliveries (and check-run updates) to the broker, so the
webhook request does one durable write (the delivery and its dispatch rows, one transaction)
and nothing else, and the callback request one (the job's transition and its check run's mark).

It runs as a thread in every worker that consumes the control queue (a Celery bootstep:
``relay up``'s control worker, the compose file's ``control`` service). It publishes
``process_delivery`` for each delivery still RECEIVED and unpublished, marks it published in the
same transaction, and waits for the next one: on PostgreSQL it LISTENs on
:data:`store.deliveries.NOTIFY_CHANNEL` (the ingress transaction NOTIFYs on commit, so a new
delivery is published within milliseconds; a one-second poll covers a missed notification), on
SQLite it polls every RELAY_PUBLISH_POLL_SECONDS. A broker that is down leaves the rows where
they are: the publisher backs off and publishes them when the broker returns. Several publishers
(several control workers) never publish the same row twice on PostgreSQL (``SKIP LOCKED``);
a row published twice anyway is processed once (:func:`store.deliveries.claim`).

The check-run updates the callbacks mark (:mod:`store.check_updates`) go out the same way: each
due update whose check run exists is published once as ``update_check_run`` (a retry is
published again when its time comes, so a broker outage only delays it), and the callback's
transaction NOTIFYs on PostgreSQL too.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

from celery import Celery, bootsteps

from config.broker import CONTROL_QUEUE, TASK_CHECK_RUN, TASK_PROCESS_DELIVERY
from config.settings import Settings, get_settings
from store import check_updates, deliveries
from store.db import session_scope
from workers.celery_app import app

log = logging.getLogger("workers.publish")

#: deliveries published per transaction
BATCH = 200
#: the longest wait between polls on PostgreSQL (LISTEN wakes it up sooner)
LISTEN_POLL_SECONDS = 1.0
#: how soon a stopping publisher notices it while it waits for a NOTIFY
STOP_CHECK_SECONDS = 0.5
#: the longest wait after the broker refused a message
MAX_BACKOFF_SECONDS = 5.0


class BrokerUnavailable(RuntimeError):
    """A message could not be published; the rows stay in the outbox."""


class Publisher:
    """Publishes the delivery outbox (``run`` until ``stop``; ``publish_once`` for one pass)."""

    def __init__(self, settings: Settings, producer: Celery, *, batch: int = BATCH) -> None:
        self.settings = settings
        self.producer = producer
        self.batch = batch
        self.published = 0  # deliveries since start, for logs and tests
        self.updates_published = 0  # check-run updates since start
        self._stop = threading.Event()
        self._listener: Any = None

    def publish_once(self) -> int:
        """Publish one batch (commits); raises BrokerUnavailable after publishing what it could."""
        with session_scope(self.settings.database_url) as session:
            due = deliveries.unpublished(session, limit=self.batch)
            done, error = self._send(
                (
                    pk,
                    TASK_PROCESS_DELIVERY,
                    {"args": [pk], "headers": {"delivery_id": delivery_id}},
                )
                for pk, delivery_id in due
            )
            deliveries.mark_published(session, pks=done)
        self.published += len(done)
        if done:
            log.debug("published %d deliveries", len(done))
        _raise_unavailable(error)
        return len(done) + self.publish_check_updates()

    def publish_check_updates(self) -> int:
        """Publish the due check-run updates (commits); raises BrokerUnavailable like
        :meth:`publish_once`."""
        with session_scope(self.settings.database_url) as session:
            done, error = self._send(
                (pk, TASK_CHECK_RUN, {"args": [pk]})
                for pk in check_updates.unpublished(session, limit=self.batch)
            )
            check_updates.mark_published(session, pks=done)
        self.updates_published += len(done)
        _raise_unavailable(error)
        return len(done)

    def _send(
        self, messages: Iterable[tuple[int, str, dict[str, Any]]]
    ) -> tuple[list[int], Exception | None]:
        """Send ``(pk, task, send_task options)`` in order until the broker refuses one: the
        pks sent, and the first transport error (the rest wait for the broker)."""
        done: list[int] = []
        for pk, task, options in messages:
            try:
                self.producer.send_task(task, retry=False, **options)
            except Exception as exc:  # any transport error: the rest waits for the broker
                return done, exc
            done.append(pk)
        return done, None

    def run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                count = self.publish_once()
            except BrokerUnavailable as exc:
                failures += 1
                if failures == 1:
                    log.warning("broker unavailable, deliveries wait in the outbox: %s", exc)
                self._stop.wait(min(MAX_BACKOFF_SECONDS, 0.2 * 2 ** min(failures, 5)))
                continue
            except Exception:  # the database: say so and try again shortly
                failures += 1
                log.exception("outbox publisher pass failed")
                self._stop.wait(min(MAX_BACKOFF_SECONDS, 0.2 * 2 ** min(failures, 5)))
                continue
            if failures:
                log.info("broker back: outbox publishing again")
            failures = 0
            if count < self.batch:
                self._wait()
        self._close_listener()

    def stop(self) -> None:
        self._stop.set()

    # --- waiting for the next delivery

    def _wait(self) -> None:
        if self.settings.is_sqlite or not self._listen_wait(LISTEN_POLL_SECONDS):
            self._stop.wait(self.settings.publish_poll_seconds)

    def _listen_wait(self, timeout: float) -> bool:
        """Wait for a NOTIFY (PostgreSQL); False when listening is not possible now."""
        try:
            if self._listener is None:
                self._listener = _listen(self.settings.database_url)
            deadline = time.monotonic() + timeout
            while not self._stop.is_set():  # in slices, so a stop never waits out the timeout
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                slice_ = min(left, STOP_CHECK_SECONDS)
                if any(True for _ in self._listener.notifies(timeout=slice_, stop_after=1)):
                    break
            return True
        except Exception as exc:
            log.warning("LISTEN unavailable, polling: %s", exc)
            self._close_listener()
            return False

    def _close_listener(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(Exception):
                self._listener.close()
            self._listener = None


def _raise_unavailable(error: Exception | None) -> None:
    if error is not None:
        raise BrokerUnavailable(f"{type(error).__name__}: {error}") from error


def _listen(database_url: str) -> Any:
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(database_url).set(drivername="postgresql")
    conn = psycopg.connect(url.render_as_string(hide_password=False), autocommit=True)
    conn.execute(f"LISTEN {deliveries.NOTIFY_CHANNEL}")
    return conn


def consumes_control_queue(celery: Celery) -> bool:
    """Whether this worker takes the control queue (where ``process_delivery`` goes)."""
    consume_from = celery.amqp.queues.consume_from
    return not consume_from or CONTROL_QUEUE in consume_from


class PublisherStep(bootsteps.StartStopStep):
    """The publisher as a thread of a worker that consumes the control queue. It starts after the
    pool and the embedded beat (``relay worker --beat``) have forked their processes: a process
    forked while this thread is inside SQLite could inherit a held SQLite lock and hang."""

    requires = ("celery.worker.components:Pool", "celery.worker.components:Beat")

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.publisher: Publisher | None = None
        self.thread: threading.Thread | None = None

    def include_if(self, parent: Any) -> bool:
        return consumes_control_queue(parent.app)

    def start(self, parent: Any) -> None:
        self.publisher = Publisher(get_settings(), parent.app)
        self.thread = threading.Thread(
            target=self.publisher.run, name="outbox-publisher", daemon=True
        )
        self.thread.start()
        log.info("outbox publisher started")

    def stop(self, parent: Any) -> None:
        if self.publisher is not None and self.thread is not None:
            self.publisher.stop()
            self.thread.join(timeout=5)

    shutdown = stop


app.steps["worker"].add(PublisherStep)
