"""the relay role: outbox columns on dispatch, callback nonces and rates

Revision ID: 0005_h17_relay_role
Revises: 0004
Create Date: 2026-12-01 20:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_h17_relay_role"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("dispatch", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("target", sa.String(length=20), nullable=False, server_default="runner")
        )
        batch_op.add_column(sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("enqueued_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("http_status", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("nonce", sa.String(length=64), nullable=True))
        batch_op.create_unique_constraint(batch_op.f("uq_dispatch_nonce"), ["nonce"])
        batch_op.create_index(
            "ix_dispatch_state_next_attempt_at", ["state", "next_attempt_at"], unique=False
        )
    op.create_table(
        "callback_nonce",
        sa.Column("nonce", sa.String(length=64), nullable=False),
        sa.Column("repo", sa.String(length=200), nullable=False),
        sa.Column("run_id", sa.String(length=50), nullable=False),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("nonce", name=op.f("pk_callback_nonce")),
    )
    op.create_table(
        "callback_rate",
        sa.Column("repo", sa.String(length=200), nullable=False),
        sa.Column("minute", sa.Integer(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("repo", "minute", name=op.f("pk_callback_rate")),
    )


def downgrade() -> None:
    op.drop_table("callback_rate")
    op.drop_table("callback_nonce")
    with op.batch_alter_table("dispatch", schema=None) as batch_op:
        batch_op.drop_index("ix_dispatch_state_next_attempt_at")
        batch_op.drop_constraint(batch_op.f("uq_dispatch_nonce"), type_="unique")
        batch_op.drop_column("nonce")
        batch_op.drop_column("http_status")
        batch_op.drop_column("sent_at")
        batch_op.drop_column("enqueued_at")
        batch_op.drop_column("lease_until")
        batch_op.drop_column("next_attempt_at")
        batch_op.drop_column("target")
