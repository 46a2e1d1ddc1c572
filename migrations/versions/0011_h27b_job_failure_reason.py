"""why a job failed before it ran tests: a one-line reason and the error's text

Revision ID: 0011_h27b_job_failure_reason
Revises: 0010_h30_failure_text
Create Date: 2026-12-06 04:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_h27b_job_failure_reason"
down_revision = "0010_h30_failure_text"
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
