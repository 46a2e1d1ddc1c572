"""a result's full failure text is stored with it (TestResult.failure_text, capped by
RELAY_FAILURE_TEXT_MAX_BYTES), so any host serves it, not only the worker whose disk had the file

Revision ID: 0010_h30_failure_text
Revises: 0009_h26_upstream_under_test
Create Date: 2026-12-06 04:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_h30_failure_text"
down_revision = "0009_h26_upstream_under_test"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("test_result", schema=None) as batch_op:
        batch_op.add_column(sa.Column("failure_text", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("test_result", schema=None) as batch_op:
        batch_op.drop_column("failure_text")
