"""The Celery side every process agrees on: task names, configuration, and a producer for the API.

The API never imports the worker package: it sends tasks by name through a producer built from
the same settings the workers read.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from config.settings import Settings

# Task names, one per stage of the loop (workers/<stage>.py) and the supervisors.
TASK_PROCESS_DELIVERY = "workers.process_delivery"  # ingest
TASK_PLAN = "workers.plan"
TASK_LEARN_IMPORT_MAP = "workers.learn_import_map"  # after a job that lacked it, on the plan queue
TASK_RUN_SHARD = "workers.run_shard"
TASK_REPORT = "workers.report"
TASK_SWEEP_DELIVERIES = "workers.sweep_deliveries"
TASK_SWEEP_JOBS = "workers.sweep_jobs"
TASK_NIGHTLY = "workers.nightly"
TASK_DOWNSTREAM_NIGHTLIES = "workers.downstream_nightlies"  # the relay role: policies' nightly
TASK_REPLAY = "workers.replay"  # a release replay (``relay replay --run``)
TASK_SEND_DISPATCH = "workers.send_dispatch"  # the relay role: one outbox row to GitHub
TASK_SEND_OUTBOX = "workers.send_outbox"  # the relay role: a delivery's outbox, concurrently
TASK_CHECK_RUN = "workers.update_check_run"  # the relay role: a dispatch's check run, updated
TASK_CREATE_CHECK_RUN = "workers.create_check_run"  # the relay role: a dispatch's queued check run
CONTROL_QUEUE = DEFAULT_QUEUE = "relay"  # deliveries, planning, reports, sweeps: short tasks
SHARD_QUEUE = "shards"  # test shards: long tasks, on their own workers
PLAN_QUEUE = "plan"  # planning (selection over the universe): on its own worker, so deliveries
# and reports never wait behind a plan being computed


def celery_config(settings: Settings) -> dict[str, Any]:
    sweep_every = float(max(2, settings.sweep_after_seconds // 2))
    conf: dict[str, Any] = {
        "broker_url": settings.broker_url,
        "broker_connection_retry_on_startup": True,
        "broker_connection_timeout": 5,
        "task_default_queue": DEFAULT_QUEUE,
        "task_routes": {
            TASK_RUN_SHARD: {"queue": SHARD_QUEUE},
            TASK_PLAN: {"queue": PLAN_QUEUE},
            TASK_LEARN_IMPORT_MAP: {"queue": PLAN_QUEUE},
        },
        "task_ignore_result": True,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "worker_hijack_root_logger": False,
        "worker_redirect_stdouts": False,
        "enable_utc": True,
        "timezone": "UTC",
        "beat_schedule": {
            # one sweeper task does both (see workers.sweep.sweep_jobs)
            "sweep": {"task": TASK_SWEEP_JOBS, "schedule": sweep_every},
        },
    }
    # kombu's SQLAlchemy transport hands every transport option to create_engine, so it takes
    # none here (it polls the database once a second).
    if settings.nightly_cron.strip():
        from celery.schedules import crontab

        minute, hour, day, month, weekday = settings.nightly_cron.split()
        conf["beat_schedule"]["nightly"] = {
            "task": TASK_NIGHTLY,
            "schedule": crontab(
                minute=minute, hour=hour, day_of_month=day, month_of_year=month, day_of_week=weekday
            ),
        }
    if settings.allowlist_location is not None:
        # each downstream's own nightly (its policy's crontab), looked at every minute
        conf["beat_schedule"]["downstream-nightlies"] = {
            "task": TASK_DOWNSTREAM_NIGHTLIES,
            "schedule": 60.0,
        }
    if settings.broker_url.startswith(("redis://", "rediss://")):
        conf["broker_transport_options"] = {"visibility_timeout": 3600}
    return conf


def make_producer(settings: Settings) -> Celery:
    app = Celery("relay-producer", set_as_current=False)
    app.conf.update(celery_config(settings))
    return app


def broker_reachable(app: Celery, timeout: float = 3.0) -> tuple[bool, str]:
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout)
            channel = conn.default_channel  # opens the transport for real
            client = getattr(channel, "client", None)
            if client is not None and hasattr(client, "ping"):
                client.ping()  # redis
            elif hasattr(channel, "session"):
                from sqlalchemy import text

                channel.session.execute(text("SELECT 1"))  # kombu's SQLAlchemy transport
        return True, "ok"
    except Exception as exc:  # any transport error means "not ready"
        return False, f"{type(exc).__name__}: {exc}"


def queue_depth(app: Celery, queue: str) -> int | None:
    """Messages waiting in ``queue`` (None when the broker cannot say). The sweepers re-enqueue
    work whose message was lost (a broker restarted without persistence) only when its queue is
    empty, so a long but healthy queue never grows duplicates."""
    try:
        with app.connection_for_write() as conn:
            channel = conn.default_channel
            # kombu's virtual transports (Redis, SQLAlchemy) count a queue's messages with _size;
            # a queue that never held a message (or vanished with a restart) counts 0.
            return int(channel._size(queue))
    except Exception:
        return None
