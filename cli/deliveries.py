"""`relay deliveries export`: the stored deliveries as JSON Lines, replayable with
`relay replay --events FILE`.

One record a line, in arrival order: ``{"event", "delivery_id", "payload", "received_at"}``.
``event`` is the X-GitHub-Event the relay received (``repository_dispatch`` for a CRCR dispatch,
whose payload is the whole dispatch body), ``payload`` the stored raw body parsed as JSON,
``received_at`` informational. The relay's own deliveries (nightly runs, release replays) are
not webhooks and are left out; so are what the relay derived (state, attempts, normalized event).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from sqlalchemy import select
from sqlalchemy.orm import Session

from cli.recorded import event_record
from config.settings import get_settings
from store.models import Delivery
from wire.github.events import body_json

app = typer.Typer(help="Stored webhook deliveries.", no_args_is_help=True)

#: sources that arrived as webhooks (the others are made by the relay itself)
WEBHOOK_SOURCES = ("webhook", "repository_dispatch")


def export_records(
    session: Session, *, after_pk: int = 0, limit: int | None = None
) -> Iterator[tuple[str, Delivery]]:
    """(JSON Lines record, row) per received webhook delivery in arrival order; ("", row) for
    a stored body that is not a JSON object (never the case for what ingress stores)."""
    query = (
        select(Delivery)
        .where(Delivery.source.in_(WEBHOOK_SOURCES), Delivery.id > after_pk)
        .order_by(Delivery.id)
        .limit(limit)
    )
    for row in session.scalars(query):
        try:
            payload: Any = json.loads(body_json(row.raw_body))  # JSON, or a form's payload=
        except (UnicodeDecodeError, ValueError):  # JSONDecodeError, EventError
            payload = None
        if not isinstance(payload, dict):
            yield "", row
            continue
        event = "repository_dispatch" if row.source == "repository_dispatch" else row.event
        yield (
            event_record(
                event=event,
                delivery_id=row.delivery_id,
                payload=payload,
                received_at=row.received_at,
            ),
            row,
        )


@app.command("export")
def export(
    out: Path = typer.Option(..., "--out", help="JSON Lines file to write"),
    limit: int | None = typer.Option(None, "--limit", min=1, help="at most N deliveries"),
    after: int = typer.Option(0, "--after", min=0, help="only deliveries stored after row id N"),
) -> None:
    """Write the received webhook deliveries (oldest first) for `relay replay --events`."""
    from store.db import session_scope

    settings = get_settings()
    written = unreadable = 0
    out.parent.mkdir(parents=True, exist_ok=True)
    with session_scope(settings.database_url) as session, out.open("w", encoding="utf-8") as fh:
        for line, row in export_records(session, after_pk=after, limit=limit):
            if not line:
                unreadable += 1
                typer.echo(f"skipped {row.delivery_id}: body is not JSON", err=True)
                continue
            fh.write(line + "\n")
            written += 1
    typer.echo(
        f"wrote {written} deliveries to {out}" + (f" ({unreadable} skipped)" if unreadable else "")
    )
