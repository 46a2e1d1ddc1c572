"""The relay's own events, on a schedule or on request: the nightly run (Celery beat, crontab
RELAY_NIGHTLY_CRON) and a release replay (``relay replay --run``, and ``relay up``'s first
start). Each is stored as a delivery the relay makes itself, normalized like a received one, and
handed to :mod:`workers.ingest`.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from store.db import session_scope
from store.deliveries import DeliveryCreate, StoreOutcome, store
from store.models import utcnow
from store.queue import TASK_NIGHTLY, TASK_REPLAY
from store.settings import get_settings
from wire.github.events import Envelope, normalize_envelope
from workers.celery_app import app
from workers.ingest import process_delivery

log = logging.getLogger("workers.schedule")


def installed_upstream_sha() -> str:
    """The upstream commit the installed torch was built from (what a nightly run tests)."""
    import importlib.metadata

    try:
        from torch.version import git_version

        return str(git_version)
    except ImportError:
        return "torch-" + importlib.metadata.version("torch")


def _self_report(
    *, delivery_id: str, event: str, source: str, payload: dict[str, Any]
) -> int | None:
    """Store a delivery the relay makes itself (nightly, release replay) and process it like a
    received one; None when it was already stored (one run per key)."""
    settings = get_settings()
    full = {"repository": {"full_name": settings.upstream_repo}, **payload}
    body = json.dumps(full).encode()
    normalized = normalize_envelope(Envelope(event, full, source), delivery_id=delivery_id)
    with session_scope(settings.database_url) as session:
        outcome, pk = store(
            session,
            data=DeliveryCreate(
                delivery_id=delivery_id,
                event=event,
                action=None,
                repo=settings.upstream_repo,
                raw_body=body,
                source=source,
                head_sha=normalized.head_sha,
                normalized=normalized.model_dump(mode="json"),
            ),
        )
    if outcome is StoreOutcome.DUPLICATE:
        return None
    process_delivery.apply_async(args=[pk], headers={"delivery_id": delivery_id})
    log.info("%s run requested", source, extra={"delivery_pk": pk, **payload})
    return pk


@app.task(name=TASK_NIGHTLY)
def nightly(head_sha: str | None = None, day: str | None = None) -> int | None:
    """One nightly run per day (idempotent on the day and SHA): a CRCR-shaped nightly delivery
    planned and run like any other event, reported with event_type "nightly"."""
    import hashlib

    sha = head_sha or installed_upstream_sha()
    day = day or utcnow().strftime("%Y-%m-%d")
    return _self_report(
        delivery_id=f"nightly-{day}-{hashlib.sha1(sha.encode()).hexdigest()[:12]}",
        event="nightly",
        source="nightly",
        payload={"head_sha": sha},
    )


@app.task(name=TASK_REPLAY)
def release_replay(base_version: str, head_version: str) -> int | None:
    """A release replay (e.g. 2.13 -> 2.14) run as a CRCR "periodic" event: planned by the
    selector on the released wheels and run like any other. Once per version pair."""
    return _self_report(
        delivery_id=f"replay-{base_version}-{head_version}",
        event="periodic",
        source="replay",
        payload={
            "head_sha": f"v{head_version}",
            "base_version": base_version,
            "head_version": head_version,
        },
    )
