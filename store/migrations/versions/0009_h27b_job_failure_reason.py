"""why a job failed before it ran tests: a one-line reason and the error's text

Revision ID: 0009_h27b_job_failure_reason
Revises: 0008_h17_check_updates
Create Date: 2026-12-06 04:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_h27b_job_failure_reason"
down_revision = "0008_h17_check_updates"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(sa.Column("failure_reason", sa.String(length=300), nullable=True))
        batch_op.add_column(sa.Column("failure_error", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_column("failure_error")
        batch_op.drop_column("failure_reason")
