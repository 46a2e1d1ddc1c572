"""Delivery processing tasks. Effects are idempotent: a task that runs twice writes once."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sqlalchemy.exc import OperationalError

from relay import deliveries
from relay.db import session_scope
from relay.github.events import UpstreamEvent, normalize, parse_body, unwrap_dispatch
from relay.logs import bind
from relay.models import Delivery
from relay.queue import CONTROL_QUEUE, TASK_PROCESS_DELIVERY, TASK_SWEEP_DELIVERIES, queue_depth
from relay.settings import Settings, get_settings
from workers.celery_app import app

log = logging.getLogger("workers.tasks")

EventHandler = Callable[[UpstreamEvent, Settings], None]


def load_handlers(paths: list[str]) -> list[EventHandler]:
    handlers = []
    for path in paths:
        module, _, attr = path.partition(":")
        handlers.append(getattr(importlib.import_module(module), attr))
    return handlers


def event_from_delivery(row: Delivery) -> UpstreamEvent:
    payload = parse_body(row.raw_body)
    upstream_delivery_id = None
    if row.source == "repository_dispatch":
        unwrapped = unwrap_dispatch(payload)
        if unwrapped is None:
            raise ValueError("stored repository_dispatch lost its CRCR client_payload")
        _, upstream_delivery_id, payload = unwrapped
    return normalize(
        event=row.event,
        payload=payload,
        delivery_id=row.delivery_id,
        upstream_delivery_id=upstream_delivery_id,
    )


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
    """Parse a stored delivery into an upstream event, run the handlers, record the outcome."""
    settings = get_settings()
    headers = getattr(self.request, "headers", None) or {}
    with bind(delivery_id=headers.get("delivery_id"), delivery_pk=pk):
        with session_scope(settings.database_url) as session:
            if not deliveries.claim(session, pk=pk):
                log.info("delivery already claimed or processed; nothing to do")
                return "skipped"
            row = session.get(Delivery, pk)
            assert row is not None
            session.expunge(row)
        with bind(delivery_id=row.delivery_id):
            try:
                event = event_from_delivery(row)
                for handler in load_handlers(settings.event_handlers):
                    handler(event, settings)
            except Exception as exc:
                log.exception("delivery processing failed")
                with session_scope(settings.database_url) as session:
                    deliveries.mark_failed(session, pk=pk, error=f"{type(exc).__name__}: {exc}")
                return "failed"
            from workers.pipeline import fan_out, plan

            to_plan = fan_out(event, pk, settings) if event.actionable else []
            with session_scope(settings.database_url) as session:
                deliveries.mark_processed(session, pk=pk, normalized=event.model_dump(mode="json"))
            for dispatch_pk in to_plan:
                plan.apply_async(args=[dispatch_pk])
            log.info(
                "delivery processed",
                extra={"event_action": event.action, "actionable": event.actionable},
            )
            return "processed"


@app.task(name=TASK_SWEEP_DELIVERIES)
def sweep_deliveries() -> int:
    """Re-enqueue deliveries that were stored but never processed (broker down at arrival,
    worker killed mid-processing)."""
    settings = get_settings()
    if queue_depth(app, CONTROL_QUEUE) != 0:
        return 0  # messages are waiting: nothing was lost (see relay.queue.queue_depth)
    with session_scope(settings.database_url) as session:
        stale = deliveries.stale_received(
            session, older_than=timedelta(seconds=settings.sweep_after_seconds)
        )
        for pk in stale:
            deliveries.requeue_stuck(session, pk=pk)
    for pk in stale:
        process_delivery.apply_async(args=[pk])
    if stale:
        log.info("re-enqueued stale deliveries", extra={"count": len(stale)})
    return len(stale)
