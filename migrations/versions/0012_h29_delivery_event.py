"""a delivery's typed event and upstream payload, written once: old rows filled here, once

Ingress validates a delivery once and stores its typed event (``normalized``, schema 2 of
``wire.github.events.UpstreamEvent``) and the upstream payload CRCR forwards verbatim
(``upstream_payload``, new); later stages load those and never read ``raw_body``. Rows stored
before are parsed here, once, from their raw body with the same code ingress runs: a row whose
body is not its event's shape (or holds NaN, which the JSON column cannot) is marked rejected
with the reason and its unsent dispatches dead-lettered, as ingress would have. Rejected rows keep
no event. Downgrade drops the payload column (schema 1 code reads schema 2 events: it ignores
the new fields).

Revision ID: 0012_h29_delivery_event
Revises: 0011_h27b_job_failure_reason
Create Date: 2026-12-06 08:00:00
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

from wire.github.events import EventError, normalize_envelope, stored_envelope
from wire.values import nonfinite_at

revision = "0012_h29_delivery_event"
down_revision = "0011_h27b_job_failure_reason"
branch_labels = None
depends_on = None

_delivery = sa.table(
    "delivery",
    sa.column("id", sa.Integer),
    sa.column("delivery_id", sa.String),
    sa.column("event", sa.String),
    sa.column("source", sa.String),
    sa.column("state", sa.String),
    sa.column("raw_body", sa.LargeBinary),
    sa.column("normalized", sa.JSON),
    sa.column("upstream_payload", sa.JSON),
    sa.column("last_error", sa.Text),
    sa.column("processed_at", sa.DateTime(timezone=True)),
)
_dispatch = sa.table(
    "dispatch",
    sa.column("delivery_pk", sa.Integer),
    sa.column("state", sa.String),
    sa.column("last_error", sa.Text),
)
#: rows read at a time (their raw bodies are in memory together)
CHUNK = 200
#: dispatch states still to send
UNSENT = ("pending", "sending", "failed")


def upgrade() -> None:
    with op.batch_alter_table("delivery", schema=None) as batch_op:
        batch_op.add_column(sa.Column("upstream_payload", sa.JSON(), nullable=True))
    conn = op.get_bind()
    last = 0
    while True:
        rows = conn.execute(
            sa.select(
                _delivery.c.id,
                _delivery.c.delivery_id,
                _delivery.c.event,
                _delivery.c.source,
                _delivery.c.raw_body,
            )
            .where(_delivery.c.id > last, _delivery.c.state != "rejected")
            .order_by(_delivery.c.id)
            .limit(CHUNK)
        ).all()
        if not rows:
            return
        for pk, delivery_id, event, source, raw_body in rows:
            _fill(conn, pk, _parsed(raw_body, event=event, source=source, delivery_id=delivery_id))
        last = rows[-1][0]


def _parsed(
    raw_body: bytes, *, event: str, source: str, delivery_id: str
) -> tuple[dict[str, Any], dict[str, Any]] | str:
    """(the typed event's JSON, the upstream payload) of a stored body, or why it has none."""
    try:
        envelope = stored_envelope(raw_body, event=event, source=source)
        typed = normalize_envelope(envelope, delivery_id=delivery_id)
    except (EventError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:4000]
    where = nonfinite_at(envelope.payload)
    if where is not None:
        return f"payload's {where} is not a finite number"
    return typed.model_dump(mode="json"), envelope.payload


def _fill(conn: Any, pk: int, parsed: tuple[dict[str, Any], dict[str, Any]] | str) -> None:
    row = _delivery.update().where(_delivery.c.id == pk)
    if not isinstance(parsed, str):
        conn.execute(row.values(normalized=parsed[0], upstream_payload=parsed[1]))
        return
    conn.execute(
        row.values(
            state="rejected",
            last_error=parsed,
            normalized=None,
            upstream_payload=None,
            processed_at=sa.func.coalesce(_delivery.c.processed_at, datetime.now(UTC)),
        )
    )
    conn.execute(
        _dispatch.update()
        .where(_dispatch.c.delivery_pk == pk, _dispatch.c.state.in_(UNSENT))
        .values(state="dead", last_error=f"the delivery is rejected: {parsed}"[:4000])
    )


def downgrade() -> None:
    with op.batch_alter_table("delivery", schema=None) as batch_op:
        batch_op.drop_column("upstream_payload")
