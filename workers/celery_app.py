"""The worker-side Celery app: ``celery -A workers.celery_app worker``.

Configuration is read lazily (``workers.celeryconfig``) so importing this module builds nothing.
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.signals import setup_logging

app = Celery("relay", include=["workers.tasks"])
app.config_from_object("workers.celeryconfig")


@setup_logging.connect
def _configure_logging(**_: Any) -> None:
    from relay import logs
    from relay.settings import get_settings

    settings = get_settings()
    logs.configure(settings.log_level, settings.log_json)
