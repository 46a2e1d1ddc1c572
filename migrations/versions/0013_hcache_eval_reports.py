"""the reports of relay eval in the database (the replay pages read them from any host)

Revision ID: 0013_hcache_eval_reports
Revises: 0012_h29_delivery_event
Create Date: 2026-12-06 07:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_hcache_eval_reports"
down_revision = "0012_h29_delivery_event"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "eval_report",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("scores", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_eval_report")),
    )
    op.create_index("ix_eval_report_name", "eval_report", ["name", "id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_eval_report_name", table_name="eval_report")
    op.drop_table("eval_report")
