"""The relay's own events, on a schedule or on request: the nightly run (Celery beat, crontab
RELAY_NIGHTLY_CRON) and a release replay (``relay replay --run``, and ``relay up``'s first
start). Each is stored as a delivery the relay makes itself, normalized like a received one, and
handed to :mod:`workers.ingest` through the outbox (:mod:`workers.publish`).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from config.broker import TASK_DOWNSTREAM_NIGHTLIES, TASK_NIGHTLY, TASK_REPLAY
from config.settings import Settings, get_settings
from fanout.nightly import request_due
from fanout.role import RelayRole
from store.db import session_scope
from store.deliveries import DeliveryCreate, Stored, store
from store.models import utcnow
from wire.github.events import Envelope, normalize_envelope
from workers.celery_app import app
from workers.dispatch import github_api

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
                upstream_payload=body.decode(),
            ),
        )
    if outcome is Stored.DUPLICATE:
        return None
    # stored in the outbox: the publisher (workers.publish) hands it to workers.ingest
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


_role_lock = threading.Lock()
_roles: dict[tuple[str, str], RelayRole] = {}


def relay_role(settings: Settings) -> RelayRole | None:
    """The relay role of this worker process (its downstreams reloaded like the web service's)."""
    location = settings.allowlist_location
    if location is None:
        return None
    key = (location, str(settings.policy_path))
    with _role_lock:
        role = _roles.get(key)
        if role is None:
            role = RelayRole.from_settings(settings)
            assert role is not None
            _roles[key] = role
        return role


@app.task(name=TASK_DOWNSTREAM_NIGHTLIES)
def downstream_nightlies() -> list[str]:
    """Every minute (beat): each downstream whose policy's ``nightly`` slot has come gets a CRCR
    nightly dispatch, once per slot (fanout.nightly)."""
    settings = get_settings()
    role = relay_role(settings)
    if role is None:
        return []
    try:
        api = github_api(settings)
    except ValueError as exc:  # no GitHub credentials: nothing can be dispatched
        log.error("downstream nightlies not requested: %s", exc)
        return []
    downstreams, pks = role.downstream_pks()
    return request_due(settings, api, downstreams, pks)
