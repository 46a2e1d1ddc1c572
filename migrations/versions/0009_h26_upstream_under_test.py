"""the upstream under test on a job: which PyTorch it ran (kind, torch version and build, the
overlay's head SHA and files laid over, compiled files not covered, the reason)

Revision ID: 0009_h26_upstream_under_test
Revises: 0008_h17_check_updates
Create Date: 2026-12-06 04:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_h26_upstream_under_test"
down_revision = "0008_h17_check_updates"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(sa.Column("upstream_under_test", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_column("upstream_under_test")
