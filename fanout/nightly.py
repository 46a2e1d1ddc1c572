"""Each downstream's own nightly: the policy's ``nightly`` (a crontab, UTC) makes the relay
dispatch a CRCR ``nightly`` event to that downstream alone at its time.

The beat asks every minute (:func:`request_due`). A slot is dispatched once: it becomes a
delivery whose id names the downstream and the slot (``nightly-<org>.<repo>-<YYYYmmddTHHMMZ>``), stored
with its one outbox row in one transaction, so a second beat, a restarted one or a retried task
finds it stored and writes nothing. A slot missed while no beat ran is still dispatched within
:data:`CATCH_UP`; older ones are not. The event's ``head_sha`` is the upstream branch's head at
dispatch time (CRCR's nightly self-report names the tested SHA).
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from celery.schedules import crontab
from sqlalchemy.orm import Session

from config.settings import Settings
from fanout.dispatch_token import new_nonce
from fanout.github import GitHubApi, GitHubError
from fanout.model import AllowlistedDownstream
from store import deliveries, outbox
from store.db import session_scope
from store.deliveries import DeliveryCreate, Stored
from wire.github.events import Envelope, normalize_envelope

log = logging.getLogger("fanout.nightly")

#: a slot missed (no beat running) is still dispatched this long after its time
CATCH_UP = timedelta(hours=1)
#: the upstream branch whose head a nightly tests
NIGHTLY_BRANCH = "main"
#: the delivery source of a downstream's nightly (the in-process runner does not run it)
SOURCE = "downstream-nightly"


def latest_slot(cron: str, *, now: datetime, within: timedelta = CATCH_UP) -> datetime | None:
    """The latest minute in ``(now - within, now]`` that ``cron`` (five fields, UTC) names."""
    minute, hour, day, month, weekday = cron.split()
    spec = crontab(
        minute=minute, hour=hour, day_of_month=day, month_of_year=month, day_of_week=weekday
    )
    t = now.astimezone(UTC).replace(second=0, microsecond=0)
    for _ in range(int(within.total_seconds() // 60)):
        if (
            t.minute in spec.minute
            and t.hour in spec.hour
            and t.day in spec.day_of_month
            and t.month in spec.month_of_year
            and t.isoweekday() % 7 in spec.day_of_week  # crontab: 0 is Sunday
        ):
            return t
        t -= timedelta(minutes=1)
    return None


def delivery_id_of(repo: str, slot: datetime) -> str:
    stamp = slot.strftime("%Y%m%dT%H%MZ")
    # "org.repo": no "/" in an id that URLs carry (an owner has no "."); a long name hashed
    name = repo.replace("/", ".", 1)
    name = name if len(name) <= 60 else hashlib.sha256(repo.encode()).hexdigest()[:16]
    return f"nightly-{name}-{stamp}"


def _store(
    settings: Settings,
    *,
    delivery_id: str,
    payload: dict[str, Any],
    downstream_pk: int,
    target: str,
) -> int | None:
    body = json.dumps(payload).encode()
    normalized = normalize_envelope(Envelope("nightly", payload, SOURCE), delivery_id=delivery_id)

    def write(session: Session, delivery_pk: int) -> None:
        item = outbox.OutboxItem(downstream_pk=downstream_pk, target=target, nonce=new_nonce())
        outbox.add(session, delivery_pk=delivery_pk, items=[item])

    with session_scope(settings.database_url) as session:
        outcome, pk = deliveries.store(
            session,
            data=DeliveryCreate(
                delivery_id=delivery_id,
                event="nightly",
                action=None,
                repo=settings.upstream_repo,
                raw_body=body,
                source=SOURCE,
                upstream_delivery_id=normalized.upstream_delivery_id,
                head_sha=normalized.head_sha,
                normalized=normalized.model_dump(mode="json"),
                upstream_payload=body.decode(),
            ),
            outbox=write,
        )
    return pk if outcome is Stored.NEW else None


def request_due(
    settings: Settings,
    api: GitHubApi,
    downstreams: list[AllowlistedDownstream],
    pks: dict[str, int],
    *,
    now: datetime | None = None,
) -> list[str]:
    """Store the nightly of every downstream whose slot has come and is not stored yet; the
    ids of the deliveries stored now (the outbox publisher sends them on)."""
    now = now or datetime.now(UTC)
    due = [
        (d, slot)
        for d in downstreams
        if d.policy.nightly and d.repo in pks
        if (slot := latest_slot(d.policy.nightly, now=now)) is not None
    ]
    if not due:
        return []
    with session_scope(settings.database_url) as session:
        fresh = [
            (d, slot)
            for d, slot in due
            if deliveries.pk_of(session, delivery_id=delivery_id_of(d.repo, slot)) is None
        ]
    if not fresh:
        return []
    try:
        sha = api.branch_head(settings.upstream_repo, NIGHTLY_BRANCH)
    except GitHubError as exc:  # the slot stays due: the next minute tries again
        log.warning("nightly dispatches wait: the upstream head is unknown: %s", exc)
        return []
    stored = []
    for d, slot in fresh:
        delivery_id = delivery_id_of(d.repo, slot)
        payload = {"repository": {"full_name": settings.upstream_repo}, "head_sha": sha}
        pk = _store(
            settings,
            delivery_id=delivery_id,
            payload=payload,
            downstream_pk=pks[d.repo],
            target=d.policy.target,
        )
        if pk is not None:
            stored.append(delivery_id)
            log.info("nightly of %s for %s stored", d.repo, slot.isoformat())
    return stored
