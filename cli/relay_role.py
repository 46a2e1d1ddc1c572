"""`relay downstreams` (who the relay role serves, and how) and `relay dispatch list|retry`
(the outbox and its dead letters)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from config.settings import get_settings
from fanout import policy as policies
from fanout.registry import Registry, RegistryError
from fanout.role import subject_of
from wire.github.events import EventError, normalize_envelope, open_envelope


def _registry(source: str | None, policy: Path | None) -> Registry:
    settings = get_settings()
    location = source or settings.allowlist_location
    if location is None:
        raise typer.BadParameter("give --allowlist or set RELAY_ALLOWLIST_SOURCE")
    try:
        return Registry(
            allowlist_source=location, policy_path=policy or settings.policy_path, interval=0
        )
    except RegistryError as exc:
        for problem in exc.problems:
            typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(1) from exc


def downstreams(
    allowlist: str = typer.Option(None, help="a file or URL; default RELAY_ALLOWLIST_SOURCE"),
    policy: Path = typer.Option(None, help="the policy file; default RELAY_POLICY_PATH"),
    event: Path = typer.Option(
        None, help="a webhook payload file: show which downstreams it would be dispatched to"
    ),
    event_name: str = typer.Option(
        "pull_request", "--event-name", help="the payload's X-GitHub-Event"
    ),
) -> None:
    """List the downstream repositories with their level, device, events and policy."""
    snapshot = _registry(allowlist, policy).current()
    decisions = {}
    if event is not None:
        try:
            payload = json.loads(event.read_text())
            envelope = open_envelope(event_name, payload)
            normalized = normalize_envelope(envelope, delivery_id="cli")
        except (OSError, ValueError, EventError) as exc:
            typer.echo(f"error: {event}: {exc}", err=True)
            raise typer.Exit(1) from exc
        subject = subject_of(normalized, None)
        decisions = {d.repo: policies.admit(d, subject) for d in snapshot.downstreams}
    for d in snapshot.downstreams:
        p = d.policy
        events = ",".join(d.entry.events) if d.entry.events is not None else "all"
        parts = [
            f"{d.level.value} {d.repo}",
            f"device={d.entry.device or '-'}",
            f"events={events}",
            f"target={p.target}",
        ]
        for name in ("events", "actions", "branches", "paths"):
            value = getattr(p, name)
            if value is not None:
                parts.append(f"policy.{name}={','.join(value)}")
        if p.merged_only:
            parts.append("merged-only")
        if not p.drafts:
            parts.append("no-drafts")
        if p.author_trust != "any":
            parts.append(f"author-trust={p.author_trust}")
        if p.nightly:
            parts.append(f"nightly='{p.nightly}'")
        if p.max_in_flight:
            parts.append(f"max-in-flight={p.max_in_flight}")
        parts.append(f"timeouts={p.start_timeout}s/{p.run_timeout}s")
        if d.repo in decisions:
            decision = decisions[d.repo]
            verdict = "dispatch" if decision.admitted else "skip"
            parts.append(f"-> {verdict}: {decision.reason}")
        typer.echo(" ".join(parts))
    typer.echo(f"{len(snapshot.downstreams)} downstream repositories")


dispatch_app = typer.Typer(
    help="The relay role's outbox: dispatches to downstreams and their dead letters.",
    no_args_is_help=True,
)


@dispatch_app.command("list")
def list_dispatches(
    state: str = typer.Option(None, help="pending, sending, sent, skipped or dead"),
    repo: str = typer.Option(None, help="one downstream repository"),
    limit: int = typer.Option(50, min=1, max=1000),
) -> None:
    """Dispatches, newest first."""
    from store import outbox
    from store.db import session_scope

    with session_scope(get_settings().database_url) as session:
        for row, downstream, delivery in outbox.listing(
            session, state=state, repo=repo, limit=limit
        ):
            typer.echo(
                f"{row.id} {row.state} {downstream} delivery={delivery} attempts={row.attempts}"
                f" http={row.http_status or '-'} {row.last_error or ''}".rstrip()
            )


@dispatch_app.command("retry")
def retry(
    dispatch_id: int = typer.Argument(..., help="the dispatch's id (relay dispatch list)"),
) -> None:
    """Put a dead letter back into the outbox (the next sweep sends it)."""
    from store import outbox
    from store.db import session_scope

    with session_scope(get_settings().database_url) as session:
        if not outbox.retry_dead(session, pk=dispatch_id):
            typer.echo(f"error: dispatch {dispatch_id} is not a dead letter", err=True)
            raise typer.Exit(1)
    typer.echo(f"dispatch {dispatch_id} is back in the outbox")
