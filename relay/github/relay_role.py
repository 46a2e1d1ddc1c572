"""The relay role's part of the web service: the downstream registry ingress writes the outbox
from, and the routers of the CRCR side (callbacks, the outbox and dead-letter API, the HUD ingest).
``install(app, settings)`` is the one call the app factory makes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from fanout.role import RelayRole
from relay.api.crcr_results import router as crcr_results_router
from relay.api.dispatches import router as dispatches_router
from relay.api.metrics import make_registry
from relay.api.metrics import router as metrics_router
from relay.github.callback import router as callback_router
from store.queue import TASK_CHECK_RUN
from store.settings import Settings

log = logging.getLogger("relay.relay_role")


def _check_run_sender(producer: Any) -> Callable[[int], bool]:
    def send(job_pk: int) -> bool:
        try:
            producer.send_task(TASK_CHECK_RUN, args=[job_pk], retry=False)
            return True
        except Exception:
            log.exception("check run update of job %s not enqueued", job_pk)
            return False

    return send


def install(app: FastAPI, settings: Settings) -> None:
    """Raises fanout.registry.RegistryError (with file:line problems) for a broken allowlist."""
    app.state.relay_role = RelayRole.from_settings(settings)
    app.state.enqueue_check_run = _check_run_sender(app.state.producer)
    app.include_router(callback_router)
    app.include_router(dispatches_router)
    app.include_router(crcr_results_router)
    app.state.metrics_registry, app.state.callback_counter = make_registry(
        settings, app.state.producer
    )
    app.include_router(metrics_router)
