"""The relay role's sender: outbox rows (written by ingress with their delivery) sent to GitHub's
``repository_dispatch`` by one task each (:func:`fanout.send.send_one`), retried at the time it
says; :func:`sweep_outbox` (called by the sweeper) sends what a lost message or a broker outage
left in the outbox.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from config.broker import (
    TASK_CHECK_RUN,
    TASK_CREATE_CHECK_RUN,
    TASK_SEND_DISPATCH,
    TASK_SEND_OUTBOX,
)
from config.settings import Settings, get_settings
from fanout.checks import create_for_dispatch, update_for_dispatch
from fanout.demotion import reconcile
from fanout.github import GitHubApi
from fanout.send import send_one
from fanout.sweep import sweep_timeouts
from store import check_updates, outbox
from store.db import session_scope
from store.models import utcnow
from workers.celery_app import app

log = logging.getLogger("workers.dispatch")

#: dispatches of one delivery sent at once by one task
SEND_THREADS = 16
#: the sweeper leaves a due row this long to the task whose countdown is already waiting for it
SWEEP_GRACE_SECONDS = 30.0

_api_lock = threading.Lock()
_apis: dict[tuple[str, str | None], GitHubApi] = {}


def github_api(settings: Settings) -> GitHubApi:
    """One client per process and configuration (its installation tokens are cached in it)."""
    key = (settings.github_api_url, settings.github_app_id)
    with _api_lock:
        api = _apis.get(key)
        if api is None:
            api = _apis[key] = GitHubApi(
                base_url=settings.github_api_url,
                app_id=settings.github_app_id,
                private_key=(
                    settings.github_app_private_key.get_secret_value()
                    if settings.github_app_private_key
                    else None
                ),
                token=settings.github_token.get_secret_value() if settings.github_token else None,
                timeout=settings.dispatch_timeout_seconds,
            )
        return api


@app.task(name=TASK_SEND_DISPATCH, acks_late=True)
def send_dispatch(pk: int) -> str:
    settings = get_settings()
    try:
        api = github_api(settings)
    except ValueError as exc:  # no credentials: the row stays in the outbox
        log.error("dispatch %s not sent: %s", pk, exc)
        return "unconfigured"
    result = send_one(pk, settings=settings, api=api)
    if result.retry_in is not None:
        send_dispatch.apply_async(args=[pk], countdown=result.retry_in)
    if result.check_retry_in is not None:
        create_check_run.apply_async(args=[pk], countdown=result.check_retry_in)
    return result.state


@app.task(name=TASK_CREATE_CHECK_RUN, acks_late=True)
def create_check_run(pk: int) -> str:
    """One more attempt at a sent dispatch's queued check run (its creation failed)."""
    settings = get_settings()
    try:
        api = github_api(settings)
    except ValueError as exc:
        log.error("check run of dispatch %s not created: %s", pk, exc)
        return "unconfigured"
    result = create_for_dispatch(settings, api, pk)
    if result.retry_in is not None:
        create_check_run.apply_async(args=[pk], countdown=result.retry_in)
    return result.state


@app.task(name=TASK_CHECK_RUN, acks_late=True)
def update_check_run(pk: int) -> str:
    """One attempt at bringing dispatch ``pk``'s check run up to date with its newest job
    transition (published by the outbox publisher; a retry waits in the database for it)."""
    settings = get_settings()
    try:
        api = github_api(settings)
    except ValueError as exc:  # no credentials: the update stays in the outbox
        log.error("check run of dispatch %s not updated: %s", pk, exc)
        return "unconfigured"
    return update_for_dispatch(settings, api, pk).state


def send_many(pks: list[int], settings: Settings) -> dict[str, int]:
    """Send outbox rows concurrently (GitHub answers in a few hundred ms: one at a time would
    make fifty downstreams wait on each other); retries are scheduled one task each."""
    if not pks:
        return {}
    try:
        api = github_api(settings)
    except ValueError as exc:  # no credentials: the rows stay in the outbox
        log.error("%d dispatches not sent: %s", len(pks), exc)
        return {"unconfigured": len(pks)}
    with ThreadPoolExecutor(max_workers=min(SEND_THREADS, len(pks))) as pool:
        results = list(pool.map(lambda pk: send_one(pk, settings=settings, api=api), pks))
    states: dict[str, int] = {}
    for pk, result in zip(pks, results, strict=True):
        states[result.state] = states.get(result.state, 0) + 1
        if result.retry_in is not None:
            send_dispatch.apply_async(args=[pk], countdown=result.retry_in)
        if result.check_retry_in is not None:
            create_check_run.apply_async(args=[pk], countdown=result.check_retry_in)
    return states


@app.task(name=TASK_SEND_OUTBOX, acks_late=True)
def send_outbox(delivery_pk: int) -> dict[str, int]:
    """Send one delivery's pending outbox rows."""
    settings = get_settings()
    with session_scope(settings.database_url) as session:
        pks = outbox.pending_of(session, delivery_pk=delivery_pk)
    return send_many(pks, settings)


def enqueue_outbox(delivery_pk: int, settings: Settings | None = None) -> int:
    """Send the delivery's outbox rows (after ingest processed it): one message."""
    settings = settings or get_settings()
    with session_scope(settings.database_url) as session:
        pks = outbox.pending_of(session, delivery_pk=delivery_pk)
        outbox.mark_enqueued(session, pks=pks)
    if pks:
        send_outbox.apply_async(args=[delivery_pk])
    return len(pks)


def sweep_outbox(settings: Settings | None = None) -> dict[str, Any]:
    """Release rows whose sender died, send every row overdue by more than the grace (and every
    check run whose creation is; check-run updates whose message was lost or whose sender died go
    back to the outbox publisher), reconcile the L3 demotion freezes, and time out relayed jobs
    past their downstream's start or run timeout."""
    settings = settings or get_settings()
    overdue = utcnow() - timedelta(seconds=SWEEP_GRACE_SECONDS)
    with session_scope(settings.database_url) as session:
        released = outbox.release_expired(session)
        due = outbox.due(session, now=overdue)
        outbox.mark_enqueued(session, pks=due)
        checks_due = outbox.checks_due(session, now=overdue)
        updates_released = check_updates.release_lost(session, older_than=overdue)
    for pk in due:
        send_dispatch.apply_async(args=[pk])
    for pk in checks_due:
        create_check_run.apply_async(args=[pk])
    demotions: dict[str, int] = {}
    if settings.allowlist_location is not None:
        try:
            demotions = reconcile(settings, github_api(settings))
        except ValueError:  # no GitHub credentials: nothing to look up
            demotions = {}
    timed_out, _ = sweep_timeouts(settings)  # their check runs' updates are in the outbox
    return {
        "dispatches_released": released,
        "dispatches_requeued": len(due),
        "check_runs_requeued": len(checks_due),
        "check_updates_released": updates_released,
        "downstreams_demoted": demotions.get("demoted", 0),
        "downstreams_restored": demotions.get("restored", 0),
        **timed_out,
    }
