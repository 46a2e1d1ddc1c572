"""a dispatch's check-run updates become an outbox: the callback's transaction numbers the job's
transition (``check_update_seq``) and marks the update pending; a worker sends the newest state,
retried like the check run's creation (``check_update_state`` and its attempts)

Revision ID: 0008_h17_check_updates
Revises: 0007_h17_relay_outbox
Create Date: 2026-12-02 06:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_h17_check_updates"
down_revision = "0007_h17_relay_outbox"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("dispatch", schema=None) as batch_op:
        batch_op.add_column(sa.Column("check_update_state", sa.String(20), nullable=True))
        batch_op.add_column(
            sa.Column("check_update_seq", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("check_update_job_pk", sa.Integer(), nullable=True))
        batch_op.add_column(
            sa.Column("check_update_attempts", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(
            sa.Column("check_update_next_attempt_at", sa.DateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(
            sa.Column("check_update_enqueued_at", sa.DateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(sa.Column("check_update_error", sa.Text(), nullable=True))
        batch_op.create_index(
            "ix_dispatch_check_update_state",
            ["check_update_state", "check_update_next_attempt_at"],
        )


def downgrade() -> None:
    with op.batch_alter_table("dispatch", schema=None) as batch_op:
        batch_op.drop_index("ix_dispatch_check_update_state")
        batch_op.drop_column("check_update_error")
        batch_op.drop_column("check_update_enqueued_at")
        batch_op.drop_column("check_update_next_attempt_at")
        batch_op.drop_column("check_update_attempts")
        batch_op.drop_column("check_update_job_pk")
        batch_op.drop_column("check_update_seq")
        batch_op.drop_column("check_update_state")
