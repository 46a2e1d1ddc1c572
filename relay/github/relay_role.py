"""The relay role's part of the web service: the downstream registry ingress writes the outbox
from, and the routers of the CRCR side (callbacks, the outbox and dead-letter API, the HUD ingest).
``install(app, settings)`` is the one call the app factory makes."""

from __future__ import annotations

import logging

from fastapi import FastAPI

from config.settings import Settings
from fanout.role import RelayRole
from relay.api.crcr_results import router as crcr_results_router
from relay.api.dispatches import router as dispatches_router
from relay.api.metrics import make_registry
from relay.api.metrics import router as metrics_router
from relay.github.callback import router as callback_router

log = logging.getLogger("relay.relay_role")


def install(app: FastAPI, settings: Settings) -> None:
    """Raises fanout.registry.RegistryError (with file:line problems) for a broken allowlist."""
    app.state.relay_role = RelayRole.from_settings(settings)
    app.include_router(callback_router)
    app.include_router(dispatches_router)
    app.include_router(crcr_results_router)
    app.state.metrics_registry, app.state.callback_counter = make_registry(
        settings, app.state.producer
    )
    app.include_router(metrics_router)
