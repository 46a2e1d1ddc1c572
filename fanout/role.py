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

from fanout import policy as policies
from fanout.dispatch_token import new_nonce
from fanout.model import Decision, Downstream, Policy, Subject
from fanout.registry import Registry
from store import outbox
from store.db import session_scope
from store.settings import Settings
from wire.github.events import UpstreamEvent, unwrap_dispatch

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


def subject_of(event: UpstreamEvent, payload: dict[str, Any], files: list[str] | None) -> Subject:
    pr = payload.get("pull_request") if isinstance(payload.get("pull_request"), dict) else {}
    assert isinstance(pr, dict)
    head_repo = (pr.get("head") or {}).get("repo") or {}
    base_repo = (pr.get("base") or {}).get("repo") or {}
    fork = bool(
        isinstance(head_repo, dict)
        and isinstance(base_repo, dict)
        and head_repo.get("full_name")
        and head_repo.get("full_name") != base_repo.get("full_name")
    )
    return Subject(
        event=event,
        draft=pr.get("draft") is True,
        fork=fork,
        changed_files=tuple(files) if files is not None else None,
    )


def push_files(payload: dict[str, Any]) -> list[str] | None:
    """The files a push changed, from its commits (None when the payload lists no commits, or
    lists them in another shape than GitHub's: commits of objects whose ``added``, ``removed``
    and ``modified`` are lists of strings; who cannot know the files decides conservatively)."""
    commits = payload.get("commits")
    if not isinstance(commits, list):
        return None
    seen: dict[str, None] = {}
    for commit in commits:
        if not isinstance(commit, dict):
            return None
        for key in ("added", "removed", "modified"):
            names = commit.get(key)
            if names is None:
                continue
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                return None
            seen.update(dict.fromkeys(names))
    return list(seen)


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

    def downstream_pks(self) -> tuple[list[Downstream], dict[str, int]]:
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

    def decide(self, event: UpstreamEvent, payload: dict[str, Any]) -> list[Decision]:
        subject = subject_of(event, payload, push_files(payload) if event.event == "push" else None)
        return [policies.admit(d, subject) for d in self.registry.current().downstreams]

    def outbox_for(self, event: UpstreamEvent, payload: dict[str, Any]) -> Outbox | None:
        """What to write with the delivery: one dispatch per admitted downstream (None: none)."""
        downstreams, pks = self.downstream_pks()
        subject = subject_of(event, payload, push_files(payload) if event.event == "push" else None)
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

    def outbox_of(
        self, normalized: dict[str, Any], body: dict[str, Any]
    ) -> Callable[[], Outbox | None]:
        """For ingress: a call (run off the event loop) giving what to write with the delivery
        whose normalized event and request body are these."""

        def make() -> Outbox | None:
            event = UpstreamEvent.model_validate(normalized)
            unwrapped = unwrap_dispatch(body)
            return self.outbox_for(event, unwrapped[2] if unwrapped is not None else body)

        return make
