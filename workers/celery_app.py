"""The worker-side Celery app: ``celery -A workers.celery_app worker``.

The loop's stages are one module each, every one calling only later stages:
``ingest -> plan -> run -> report``; the supervisors ``sweep`` (hands back what a lost message or
a killed worker left) and ``schedule`` (the relay's own nightly and replay events) call into
them. Configuration is read lazily (``workers.celeryconfig``) so importing this module builds
nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from celery import Celery
from celery.signals import beat_init, setup_logging, worker_process_init, worker_process_shutdown

from config import logs
from config.broker import SHARD_QUEUE
from config.settings import get_settings
from workers.harness.pools import boot_pool, close_pools, warm_and_log
from workers.harness.procs import die_with_parent

STAGES = ["ingest", "dispatch", "plan", "run", "report", "sweep", "schedule", "publish"]

#: how often a worker polls an empty queue of the embedded (SQLite) broker; kombu's default is a
#: second, and a worker that takes one message at a time (prefetch 1, acks late) polls once
#: between messages too, so the embedded stack processed about one delivery a second
EMBEDDED_BROKER_POLL_SECONDS = 0.1
#: while messages keep coming (one delivered within the last BUSY_WINDOW seconds) the worker
#: polls this often: at 0.1 s a burst of deliveries drained at about ten a second, each waiting
#: out a poll after the one before was done (the wait, not the work, set the pace)
EMBEDDED_BROKER_BUSY_POLL_SECONDS = 0.005
EMBEDDED_BROKER_BUSY_WINDOW_SECONDS = 1.0


def _poll_embedded_broker_faster() -> None:
    """kombu's SQLAlchemy transport hands every transport option to create_engine, so its
    polling interval cannot be configured through ``broker_transport_options``: set on its class,
    in the worker processes (the web app only publishes). The interval adapts: short while
    messages arrive, :data:`EMBEDDED_BROKER_POLL_SECONDS` once the queues have been quiet for
    a second (an idle worker does not hammer the SQLite file)."""
    from kombu.transport import sqlalchemy as kombu_sqlalchemy

    transport: Any = kombu_sqlalchemy.Transport
    if getattr(transport, "_relay_adaptive_poll", False):
        return
    deliver = transport._deliver

    def _deliver(self: Any, message: Any, queue: Any) -> Any:
        self._relay_last_delivery = time.monotonic()
        return deliver(self, message, queue)

    def _interval(self: Any) -> float:
        last = getattr(self, "_relay_last_delivery", None)
        if last is not None and time.monotonic() - last < EMBEDDED_BROKER_BUSY_WINDOW_SECONDS:
            return EMBEDDED_BROKER_BUSY_POLL_SECONDS
        return EMBEDDED_BROKER_POLL_SECONDS

    transport._deliver = _deliver
    transport.polling_interval = property(_interval)
    transport._relay_adaptive_poll = True


_poll_embedded_broker_faster()
app = Celery("relay", include=[f"workers.{stage}" for stage in STAGES])
app.config_from_object("workers.celeryconfig")


@setup_logging.connect
def _configure_logging(**_: Any) -> None:
    settings = get_settings()
    logs.configure(settings.log_level, settings.log_json)


@worker_process_shutdown.connect
def _close_pools(**_: Any) -> None:
    close_pools()


@worker_process_init.connect
@beat_init.connect
def _die_with_parent(**_: Any) -> None:
    # Pool and embedded-beat processes go when their worker goes, even on SIGKILL.
    die_with_parent()


@worker_process_init.connect
def _warm_shard_pool(**_: Any) -> None:
    """A process of a worker that runs shards starts its warm pool when it boots (torch and the
    test databases imported: a persistent worker's normal state), not when the first shard
    comes. The server is started here, in the process's main thread (it dies with the thread
    that started it); its imports are waited for in a thread, as Celery gives a pool process a
    few seconds to report up. Logs "warm pool ready" when done."""
    from celery.worker import state

    if state.should_stop not in (None, False) or state.should_terminate not in (None, False):
        return  # a pool process replaced while the worker shuts down: nothing will run here
    settings = get_settings()
    if not settings.runner_enabled or SHARD_QUEUE not in (app.amqp.queues.consume_from or {}):
        return
    try:
        pool = boot_pool(settings)
    except Exception:  # the first shard tries again and reports what fails
        logging.getLogger("workers.harness").exception("warm pool failed to start")
        return
    if pool is not None:
        threading.Thread(target=warm_and_log, args=(pool,), name="warm-pool", daemon=True).start()
