"""the relay role's outbox, finished: a delivery is published to the broker by the outbox
publisher (``published_at``), a dispatch's check run is retried like the dispatch
(``check_state`` and its attempts), and an L3 downstream's open demotion PR is recorded
(``demoted_since``)

Revision ID: 0007_h17_relay_outbox
Revises: 0006
Create Date: 2026-12-02 00:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_h17_relay_outbox"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("delivery", schema=None) as batch_op:
        batch_op.add_column(sa.Column("published_at", sa.DateTime(timezone=True), nullable=True))
    # deliveries past RECEIVED were enqueued by the request that stored them
    op.execute("UPDATE delivery SET published_at = received_at WHERE state <> 'received'")
    with op.batch_alter_table("dispatch", schema=None) as batch_op:
        batch_op.add_column(sa.Column("check_state", sa.String(20), nullable=True))
        batch_op.add_column(
            sa.Column("check_attempts", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(
            sa.Column("check_next_attempt_at", sa.DateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(sa.Column("check_error", sa.Text(), nullable=True))
        batch_op.create_index("ix_dispatch_check_state", ["check_state", "check_next_attempt_at"])
    with op.batch_alter_table("downstream", schema=None) as batch_op:
        batch_op.add_column(sa.Column("demoted_since", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("downstream", schema=None) as batch_op:
        batch_op.drop_column("demoted_since")
    with op.batch_alter_table("dispatch", schema=None) as batch_op:
        batch_op.drop_index("ix_dispatch_check_state")
        batch_op.drop_column("check_error")
        batch_op.drop_column("check_next_attempt_at")
        batch_op.drop_column("check_attempts")
        batch_op.drop_column("check_state")
    with op.batch_alter_table("delivery", schema=None) as batch_op:
        batch_op.drop_column("published_at")
