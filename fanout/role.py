"""The relay role wired for one process: the downstream registry, their rows in the store, and
what ingress writes with a delivery (the outbox: one dispatch per admitted downstream).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from config.settings import Settings
from fanout import policy as policies
from fanout.dispatch_token import new_nonce
from fanout.model import AllowlistedDownstream, Policy, Subject
from fanout.registry import Registry
from store import outbox
from store.db import session_scope
from wire.github.events import UpstreamEvent

log = logging.getLogger("fanout.role")

Outbox = Callable[[Session, int], None]


def policy_to_json(policy: Policy) -> dict[str, Any]:
    data = dataclasses.asdict(policy)
    data.pop("line", None)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}


def policy_from_json(data: dict[str, Any]) -> Policy:
    known = {f.name for f in dataclasses.fields(Policy)}
    values: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in known
    }
    return Policy(**values)


def subject_of(event: UpstreamEvent, files: list[str] | None) -> Subject:
    """What the policy decides on: the typed event (a draft, a fork, a push's files are its
    fields) and a pull request's changed files once known."""
    if files is None and event.event == "push":
        files = event.changed_files
    return Subject(
        event=event,
        draft=event.draft,
        fork=event.fork,
        changed_files=tuple(files) if files is not None else None,
    )


class RelayRole:
    """Built once per process from the settings (None when no allowlist is configured)."""

    def __init__(self, settings: Settings, registry: Registry) -> None:
        self.settings = settings
        self.registry = registry
        self._lock = threading.Lock()
        self._synced: tuple[str, dict[str, int]] = ("", {})

    @classmethod
    def from_settings(cls, settings: Settings) -> RelayRole | None:
        location = settings.allowlist_location
        if location is None:
            return None
        registry = Registry(
            allowlist_source=location,
            policy_path=settings.policy_path,
            interval=settings.allowlist_reload_seconds,
            background=True,  # a URL is re-fetched off the request path
        )
        return cls(settings, registry)

    def downstream_pks(self) -> tuple[list[AllowlistedDownstream], dict[str, int]]:
        """The downstreams in force and their store rows (synced when the files changed)."""
        snapshot = self.registry.current()
        with self._lock:
            digest, pks = self._synced
            if digest != snapshot.digest:
                with session_scope(self.settings.database_url) as session:
                    pks = outbox.sync_downstreams(
                        session,
                        rows=[
                            outbox.DownstreamRow(
                                repo=d.repo,
                                level=d.level.value,
                                device=d.entry.device,
                                oncalls=d.entry.oncalls,
                                policy=policy_to_json(d.policy),
                            )
                            for d in snapshot.downstreams
                        ],
                    )
                self._synced = (snapshot.digest, pks)
        return list(snapshot.downstreams), pks

    def outbox_for(self, event: UpstreamEvent) -> Outbox | None:
        """What to write with the delivery: one dispatch per admitted downstream (None: none)."""
        downstreams, pks = self.downstream_pks()
        subject = subject_of(event, None)
        items = []
        for d in downstreams:
            decision = policies.admit(d, subject)
            if decision.admitted and d.repo in pks:
                items.append(
                    outbox.OutboxItem(
                        downstream_pk=pks[d.repo], target=d.policy.target, nonce=new_nonce()
                    )
                )
        if not items:
            return None

        def write(session: Session, delivery_pk: int) -> None:
            outbox.add(session, delivery_pk=delivery_pk, items=items)

        return write

    def outbox_of(self, event: UpstreamEvent) -> Callable[[], Outbox | None]:
        """For ingress: a call (run off the event loop) giving what to write with the delivery
        of this event (the one ingress validated)."""
        return lambda: self.outbox_for(event)
