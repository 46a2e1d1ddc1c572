"""the relay role: outbox columns on dispatch, callback nonces and rates, CRCR HUD results

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 20:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
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
        batch_op.add_column(sa.Column("check_run_id", sa.BigInteger(), nullable=True))
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
    op.create_table(
        "crcr_result",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("row_key", sa.String(length=700), nullable=False),
        sa.Column("downstream_repo", sa.String(length=200), nullable=False),
        sa.Column("downstream_level", sa.String(length=2), nullable=True),
        sa.Column("upstream_repo", sa.String(length=200), nullable=True),
        sa.Column("pr_number", sa.Integer(), nullable=False),
        sa.Column("head_sha", sa.String(length=64), nullable=True),
        sa.Column("delivery_id", sa.String(length=100), nullable=False),
        sa.Column("event_type", sa.String(length=50), nullable=True),
        sa.Column("workflow_name", sa.String(length=200), nullable=False),
        sa.Column("job_name", sa.String(length=200), nullable=False),
        sa.Column("run_id", sa.String(length=50), nullable=True),
        sa.Column("run_attempt", sa.String(length=20), nullable=True),
        sa.Column("check_run_id", sa.String(length=100), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=True),
        sa.Column("conclusion", sa.String(length=20), nullable=True),
        sa.Column("queue_time", sa.Float(), nullable=True),
        sa.Column("execution_time", sa.Float(), nullable=True),
        sa.Column("started_at", sa.String(length=40), nullable=True),
        sa.Column("completed_at", sa.String(length=40), nullable=True),
        sa.Column("tests_passed", sa.Integer(), nullable=True),
        sa.Column("tests_failed", sa.Integer(), nullable=True),
        sa.Column("tests_skipped", sa.Integer(), nullable=True),
        sa.Column("tests_total", sa.Integer(), nullable=True),
        sa.Column("failed_tests", sa.JSON(), nullable=True),
        sa.Column("artifact_url", sa.String(length=500), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_crcr_result")),
        sa.UniqueConstraint("row_key", name=op.f("uq_crcr_result_row_key")),
    )
    op.create_index(
        "ix_crcr_result_downstream_repo", "crcr_result", ["downstream_repo"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_crcr_result_downstream_repo", table_name="crcr_result")
    op.drop_table("crcr_result")
    op.drop_table("callback_rate")
    op.drop_table("callback_nonce")
    with op.batch_alter_table("dispatch", schema=None) as batch_op:
        batch_op.drop_index("ix_dispatch_state_next_attempt_at")
        batch_op.drop_constraint(batch_op.f("uq_dispatch_nonce"), type_="unique")
        batch_op.drop_column("check_run_id")
        batch_op.drop_column("nonce")
        batch_op.drop_column("http_status")
        batch_op.drop_column("sent_at")
        batch_op.drop_column("enqueued_at")
        batch_op.drop_column("lease_until")
        batch_op.drop_column("next_attempt_at")
        batch_op.drop_column("target")
