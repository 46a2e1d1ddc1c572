"""the HUD's indexes and a result's op and dtype

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("test_result", schema=None) as batch_op:
        batch_op.add_column(sa.Column("op", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("dtype", sa.String(length=40), nullable=True))
    op.create_index("ix_job_dispatched_at", "job", ["dispatched_at"])
    op.create_index("ix_job_head_sha_dispatched_at", "job", ["head_sha", "dispatched_at"])
    op.create_index("ix_job_repo_dispatched_at", "job", ["repo", "dispatched_at"])
    op.create_index("ix_test_result_test_id_job_pk", "test_result", ["test_id", "job_pk"])
    op.create_index("ix_test_result_job_pk_outcome", "test_result", ["job_pk", "outcome"])


def downgrade() -> None:
    op.drop_index("ix_test_result_job_pk_outcome", table_name="test_result")
    op.drop_index("ix_test_result_test_id_job_pk", table_name="test_result")
    op.drop_index("ix_job_repo_dispatched_at", table_name="job")
    op.drop_index("ix_job_head_sha_dispatched_at", table_name="job")
    op.drop_index("ix_job_dispatched_at", table_name="job")
    with op.batch_alter_table("test_result", schema=None) as batch_op:
        batch_op.drop_column("dtype")
        batch_op.drop_column("op")
