"""The ASGI application. ``relay.app:app`` is built on first access (no work at import time)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from config import logs
from config.broker import broker_reachable, make_producer
from config.settings import Settings, get_settings
from relay.api import router as api_router
from relay.docs import add_docs
from relay.github.ingress import close_writer
from relay.github.ingress import install as install_ingress
from relay.github.relay_role import install as install_relay_role
from relay.web.routes import router as web_router
from store.db import database_reachable

log = logging.getLogger("relay.app")

VERSION = "0.1.0"


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the API. A webhook is stored, never sent to the broker here: the outbox publisher
    of the control worker (workers.publish) does that."""
    settings = settings or get_settings()
    logs.configure(settings.log_level, settings.log_json)
    app = FastAPI(
        lifespan=_lifespan,
        docs_url=None,  # relay.docs serves /docs and /redoc with local assets
        redoc_url=None,
        title="crcr-relay",
        version=VERSION,
        description=(
            "Cross-repository CI relay for out-of-tree PyTorch backends: CRCR-compatible GitHub "
            "ingress, and a versioned /api/v1 status API."
        ),
    )
    app.state.settings = settings
    producer = make_producer(settings)
    app.state.producer = producer
    install_ingress(app)  # the webhook (documented, served by a plain route)
    app.include_router(api_router)
    app.include_router(web_router)  # the HUD's pages
    install_relay_role(app, settings)  # outbox, callbacks, dispatches (fanout/)
    app.add_exception_handler(RequestValidationError, _validation_error)
    _declare_validation_errors(app)
    add_docs(app)

    @app.get("/healthz", tags=["ops"])
    def healthz() -> dict[str, Any]:
        """The process is up."""
        return {"ok": True, "version": VERSION}

    @app.get("/readyz", tags=["ops"], responses={503: {"description": "a dependency is down"}})
    async def readyz() -> JSONResponse:
        """The database and the broker are reachable."""
        db_ok, db_detail = await run_in_threadpool(database_reachable, settings.database_url)
        broker_ok, broker_detail = await run_in_threadpool(broker_reachable, producer)
        ok = db_ok and broker_ok
        return JSONResponse(
            status_code=200 if ok else 503,
            content={
                "ok": ok,
                "database": {"ok": db_ok, "detail": db_detail},
                "broker": {"ok": broker_ok, "detail": broker_detail},
            },
        )

    return app


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    # the webhook's group-commit writer: what it was given is stored, its connection returned
    await run_in_threadpool(close_writer, app)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    """422 with a one-line reason in ``detail`` (like every other API error) and FastAPI's
    structured list under ``errors``."""
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    return JSONResponse(
        status_code=422,
        content={"detail": one_line(errors), "errors": jsonable_encoder(errors)},
    )


#: the 422 every endpoint answers (:func:`_validation_error`, and the one-line refusals)
VALIDATION_ERROR = {
    "title": "HTTPValidationError",
    "type": "object",
    "properties": {
        "detail": {"type": "string", "title": "Detail", "description": "the reason, one line"},
        "errors": {
            "type": "array",
            "items": {"$ref": "#/components/schemas/ValidationError"},
            "description": "FastAPI's structured list, when the parameters did not validate",
        },
    },
    "required": ["detail"],
}


def _declare_validation_errors(app: FastAPI) -> None:
    """The OpenAPI document says the 422 the app answers (FastAPI's default says ``detail``
    is a list)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schemas = build().get("components", {}).get("schemas", {})
            if "HTTPValidationError" in schemas:
                schemas["HTTPValidationError"] = VALIDATION_ERROR
        return build()

    app.openapi = openapi  # type: ignore[method-assign]


def one_line(errors: Sequence[Any]) -> str:
    """``query.status: Input should be 'dispatched', ...; query.limit: ...``"""
    parts = []
    for e in errors:
        where = ".".join(str(p) for p in e.get("loc", ()))
        parts.append(f"{where}: {e.get('msg', 'invalid')}" if where else str(e.get("msg")))
    return "; ".join(parts).replace("\n", " ")[:1000] or "invalid request"


def __getattr__(name: str) -> Any:
    if name == "app":
        return create_app()
    raise AttributeError(name)
