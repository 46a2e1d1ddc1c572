"""Stage 1 of the loop, ingest: claim a stored delivery, load the upstream event ingress stored, run
the configured event handlers, and fan out: one dispatch per admitted downstream, each planned
by :mod:`workers.plan`. Effects are idempotent: a task that runs twice writes once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import OperationalError

import plugins
from config.broker import TASK_PROCESS_DELIVERY
from config.logs import bind
from config.settings import Settings, get_settings
from fanout.nightly import SOURCE as NIGHTLY_SOURCE
from store import deliveries
from store.db import session_scope
from store.downstreams import ensure_downstream
from store.models import Delivery, Dispatch, DispatchState
from wire.crcr.allowlist import Level
from wire.github.events import UpstreamEvent, load_event
from workers.celery_app import app
from workers.dispatch import enqueue_outbox
from workers.plan import plan

log = logging.getLogger("workers.ingest")

EventHandler = Callable[[UpstreamEvent, Settings], None]


def load_handlers(names: list[str]) -> list[EventHandler]:
    """The event handlers ``RELAY_EVENT_HANDLERS`` names (:mod:`plugins`), in its order."""
    group = plugins.EVENT_HANDLERS
    return [plugins.load(group, name, setting="RELAY_EVENT_HANDLERS") for name in names]


def fan_out(event: UpstreamEvent, delivery_pk: int, settings: Settings) -> list[int]:
    """Dispatches to create for this event (idempotent); returns the ones to plan."""
    if not settings.runner_enabled:
        return []
    with session_scope(settings.database_url) as session:
        downstream = ensure_downstream(
            session,
            repo=settings.runner_repo,
            level=Level.L2.value,
            device=settings.runner_backend,
            policy={"cancel_superseded": settings.cancel_superseded},
        )
        if not downstream.enabled:
            return []
        existing = session.scalar(
            select(Dispatch).where(
                Dispatch.delivery_pk == delivery_pk, Dispatch.downstream_pk == downstream.id
            )
        )
        if existing is None:
            existing = Dispatch(delivery_pk=delivery_pk, downstream_pk=downstream.id)
            session.add(existing)
            session.flush()
        if existing.state != DispatchState.PENDING.value:
            return []
        return [existing.id]


@app.task(
    name=TASK_PROCESS_DELIVERY,
    bind=True,
    acks_late=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    retry_backoff_max=60,
    max_retries=5,
)
def process_delivery(self: Any, pk: int) -> str:
    """Read a stored delivery's upstream event, run the handlers, fan out, record the outcome."""
    settings = get_settings()
    headers = getattr(self.request, "headers", None) or {}
    with bind(delivery_id=headers.get("delivery_id"), delivery_pk=pk):
        with session_scope(settings.database_url) as session:
            if not deliveries.claim(session, pk=pk):
                log.info("delivery already claimed or processed; nothing to do")
                return "skipped"
            # the row's typed event, not its raw body (kept for audit and replay)
            row = session.execute(
                select(Delivery.delivery_id, Delivery.source, Delivery.normalized).where(
                    Delivery.id == pk
                )
            ).one()
        with bind(delivery_id=row.delivery_id):
            try:
                event = load_event(row.normalized)  # the typed event ingress validated
                for handler in load_handlers(settings.event_handlers):
                    handler(event, settings)
            except Exception as exc:
                log.exception("delivery processing failed")
                with session_scope(settings.database_url) as session:
                    deliveries.mark_failed(session, pk=pk, error=f"{type(exc).__name__}: {exc}")
                return "failed"
            # a downstream's own nightly is for that downstream only, not the in-process runner
            runner = event.actionable and row.source != NIGHTLY_SOURCE
            to_plan = fan_out(event, pk, settings) if runner else []
            with session_scope(settings.database_url) as session:
                deliveries.mark_processed(session, pk=pk)
            for dispatch_pk in to_plan:
                plan.apply_async(args=[dispatch_pk])
            enqueue_outbox(pk, settings)  # the relay role's dispatches to downstream repos
            log.info(
                "delivery processed",
                extra={"event_action": event.action, "actionable": event.actionable},
            )
            return "processed"
