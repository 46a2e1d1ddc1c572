"""The worker-side Celery app: ``celery -A workers.celery_app worker``.

Configuration is read lazily (``workers.celeryconfig``) so importing this module builds nothing.
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.signals import beat_init, setup_logging, worker_process_init, worker_process_shutdown

app = Celery("relay", include=["workers.tasks", "workers.pipeline"])
app.config_from_object("workers.celeryconfig")


@setup_logging.connect
def _configure_logging(**_: Any) -> None:
    from relay import logs
    from relay.settings import get_settings

    settings = get_settings()
    logs.configure(settings.log_level, settings.log_json)


@worker_process_shutdown.connect
def _close_pools(**_: Any) -> None:
    from workers.pipeline import close_pools

    close_pools()


@worker_process_init.connect
@beat_init.connect
def _die_with_parent(**_: Any) -> None:
    # Pool and embedded-beat processes go when their worker goes, even on SIGKILL.
    from relay.procs import die_with_parent

    die_with_parent()
