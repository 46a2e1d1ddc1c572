"""The outbox publisher (workers.publish): the webhook request only stores; the publisher hands
each stored delivery to the real broker once, wakes up on PostgreSQL's NOTIFY, and keeps what
a broker outage leaves until the broker is back."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest


def _settings(database_url: str, broker_url: str, **extra: Any) -> Any:
    from config.settings import Settings
    from store import migrate

    migrate.upgrade(database_url)
    return Settings(
        env="development",
        database_url=database_url,
        broker_url=broker_url,
        log_json=False,
        **extra,
    )


def _store(settings: Any, delivery_id: str | None = None) -> int:
    from store import deliveries
    from store.db import session_scope
    from store.deliveries import DeliveryCreate

    data = DeliveryCreate(
        delivery_id=delivery_id or str(uuid.uuid4()),
        event="push",
        action=None,
        repo="pytorch/pytorch",
        raw_body=b"{}",
    )
    with session_scope(settings.database_url) as session:
        return deliveries.store(session, data=data)[1]


def _published(settings: Any, pk: int) -> bool:
    from store.db import session_scope
    from store.models import Delivery

    with session_scope(settings.database_url) as session:
        row = session.get(Delivery, pk)
        return row is not None and row.published_at is not None


def _messages(producer: Any) -> list[int]:
    """The delivery pks waiting in the control queue of the real broker (consumed)."""
    from config.broker import CONTROL_QUEUE

    pks = []
    with producer.connection_for_read() as conn:
        queue = conn.SimpleQueue(CONTROL_QUEUE, no_ack=True)
        try:
            while True:
                try:
                    message = queue.get(timeout=1)
                except queue.Empty:
                    break
                pks.append(message.payload[0][0])  # protocol 2: (args, kwargs, embed)
        finally:
            queue.close()
    return pks


def test_each_stored_delivery_is_published_once_on_the_embedded_broker(tmp_path: Path) -> None:
    from config.broker import make_producer
    from workers.publish import Publisher

    settings = _settings(
        f"sqlite:///{tmp_path}/relay.sqlite", f"sqla+sqlite:///{tmp_path}/broker.sqlite"
    )
    producer = make_producer(settings)
    pks = [_store(settings) for _ in range(3)]
    publisher = Publisher(settings, producer, batch=2)
    assert publisher.publish_once() == 2  # a batch per transaction
    assert publisher.publish_once() == 1
    assert publisher.publish_once() == 0  # nothing is published twice
    assert all(_published(settings, pk) for pk in pks)
    assert sorted(_messages(producer)) == pks


def test_a_swept_delivery_goes_back_through_the_outbox(tmp_path: Path) -> None:
    """A message lost with a broker restart: the sweeper puts the delivery back in the outbox
    and the publisher sends it again."""
    from datetime import timedelta

    from config.broker import make_producer
    from store import deliveries
    from store.db import session_scope
    from workers.publish import Publisher

    settings = _settings(
        f"sqlite:///{tmp_path}/relay.sqlite", f"sqla+sqlite:///{tmp_path}/broker.sqlite"
    )
    producer = make_producer(settings)
    pk = _store(settings)
    publisher = Publisher(settings, producer)
    assert publisher.publish_once() == 1
    assert _messages(producer) == [pk]  # ...and then the message is lost
    with session_scope(settings.database_url) as session:
        assert deliveries.stale_received(session, older_than=timedelta(seconds=-1)) == [pk]
        assert deliveries.requeue_stuck(session, pk=pk)
    assert not _published(settings, pk)
    assert publisher.publish_once() == 1
    assert _messages(producer) == [pk]


def test_a_broker_outage_keeps_deliveries_in_the_outbox(
    tmp_path: Path, own_redis: Any, postgres_url: str
) -> None:
    from config.broker import make_producer
    from workers.publish import BrokerUnavailable, Publisher

    settings = _settings(postgres_url, own_redis.url)
    producer = make_producer(settings)
    own_redis.stop()
    pk = _store(settings)
    publisher = Publisher(settings, producer)
    with pytest.raises(BrokerUnavailable):
        publisher.publish_once()
    assert not _published(settings, pk)
    own_redis.start()
    assert publisher.publish_once() == 1
    assert _published(settings, pk)
    assert _messages(producer) == [pk]


def test_postgres_notify_wakes_the_publisher(
    postgres_url: str, fresh_redis_url: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With its fallback poll set to a minute, a new delivery is still published at once: the
    storing transaction's NOTIFY woke the publisher up."""
    from config.broker import make_producer
    from workers import publish

    monkeypatch.setattr(publish, "LISTEN_POLL_SECONDS", 60.0)
    settings = _settings(postgres_url, fresh_redis_url(), publish_poll_seconds=60.0)
    publisher = publish.Publisher(settings, make_producer(settings))
    thread = threading.Thread(target=publisher.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while publisher._listener is None and time.monotonic() < deadline:
            time.sleep(0.05)  # listening, waiting out its minute
        assert publisher._listener is not None
        time.sleep(0.2)
        pk = _store(settings)
        deadline = time.monotonic() + 30  # well under the minute a poll would take
        while not _published(settings, pk) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _published(settings, pk)
        assert publisher.published == 1
    finally:
        publisher.stop()
        thread.join(timeout=70)
    publisher = publish.Publisher(settings, make_producer(settings))
    thread = threading.Thread(target=publisher.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while publisher._listener is None and time.monotonic() < deadline:
        time.sleep(0.05)
    publisher.stop()  # a worker's shutdown does not wait out the minute's LISTEN
    thread.join(timeout=30)
    assert not thread.is_alive()


_BOOT_ORDER = """
from celery.worker.worker import WorkController
from workers.celery_app import app
import workers.publish
blueprint = WorkController.Blueprint(steps=app.steps["worker"])
print(" ".join(s.name.rsplit(".", 1)[-1] for s in blueprint._finalize_steps(blueprint.claim_steps())))
"""


@pytest.mark.parametrize("seed", ["0", "1", "2", "3", "5", "7"])
def test_the_publisher_thread_starts_after_every_fork_of_its_worker(
    seed: str, repo_root: Path
) -> None:
    """Celery orders independent bootsteps by iterating a set (string hashes, and our step
    class's address), so the order changes from one worker start to the next: without the
    step's ``requires``, the publisher thread started before the embedded beat forked in about
    half the starts, and a beat forked while that thread was inside SQLite hung for good (no
    sweeper). Each seed is another start."""
    import os
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _BOOT_ORDER],
        env={**os.environ, "PYTHONHASHSEED": seed},
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split()
    assert out.index("PublisherStep") > max(out.index("Pool"), out.index("Beat")), out
