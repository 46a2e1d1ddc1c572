"""Data access for downstreams: the repositories that receive upstream events.

Rows come from the CRCR allowlist (:func:`sync_allowlist`) and, for the in-process runner, from
the settings (:func:`ensure_downstream`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.models import Downstream


class DownstreamEntry(Protocol):
    """What the store needs of an allowlist entry (wire.crcr.allowlist.AllowlistEntry)."""

    @property
    def repo(self) -> str: ...
    @property
    def level(self) -> str: ...
    @property
    def device(self) -> str | None: ...
    @property
    def oncalls(self) -> tuple[str, ...]: ...
    @property
    def events(self) -> tuple[str, ...] | None: ...


def ensure_downstream(
    session: Session, *, repo: str, level: str, device: str | None, policy: dict[str, Any]
) -> Downstream:
    """The downstream row for ``repo``, created (enabled) when missing; not committed."""
    row = session.scalar(select(Downstream).where(Downstream.repo == repo))
    if row is None:
        row = Downstream(repo=repo, level=level, device=device, policy=policy, enabled=True)
        session.add(row)
        session.flush()
    return row


def sync_allowlist(session: Session, *, entries: Iterable[DownstreamEntry]) -> dict[str, int]:
    """Upsert Downstream rows from the allowlist; repos no longer listed are disabled (commits)."""
    existing = {d.repo: d for d in session.scalars(select(Downstream))}
    counts = {"added": 0, "updated": 0, "disabled": 0}
    listed = set()
    for entry in entries:
        listed.add(entry.repo)
        row = existing.get(entry.repo)
        policy = {"events": list(entry.events)} if entry.events is not None else {}
        if row is None:
            session.add(
                Downstream(
                    repo=entry.repo,
                    level=str(entry.level),
                    device=entry.device,
                    oncalls=list(entry.oncalls),
                    policy=policy,
                    enabled=True,
                )
            )
            counts["added"] += 1
        else:
            changed = (
                row.level,
                row.device,
                row.oncalls,
                row.policy.get("events"),
                row.enabled,
            ) != (str(entry.level), entry.device, list(entry.oncalls), policy.get("events"), True)
            if changed:
                row.level, row.device, row.oncalls, row.enabled = (
                    str(entry.level),
                    entry.device,
                    list(entry.oncalls),
                    True,
                )
                row.policy = {**{k: v for k, v in row.policy.items() if k != "events"}, **policy}
                counts["updated"] += 1
    for repo, row in existing.items():
        if repo not in listed and row.enabled:
            row.enabled = False
            counts["disabled"] += 1
    session.commit()
    return counts
