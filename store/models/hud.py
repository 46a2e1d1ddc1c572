"""What the HUD keeps beside the jobs: the rows a deployed CRCR relay reports
(``POST /api/crcr/results``) and the reports of ``relay eval``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Float, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from store.models.base import Base, utcnow


class CrcrResult(Base):
    """One job's row as the PyTorch HUD stores a CRCR result (``POST /api/crcr/results``), keyed
    ``repo/delivery_id/workflow/job/check_run_id``; later envelopes fill only non-null fields."""

    __tablename__ = "crcr_result"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    row_key: Mapped[str] = mapped_column(String(700), unique=True)
    downstream_repo: Mapped[str] = mapped_column(String(200))
    downstream_level: Mapped[str | None] = mapped_column(String(2))
    upstream_repo: Mapped[str | None] = mapped_column(String(200))
    pr_number: Mapped[int] = mapped_column(Integer, default=0)  # 0 for push and nightly
    head_sha: Mapped[str | None] = mapped_column(String(64))
    delivery_id: Mapped[str] = mapped_column(String(100))
    event_type: Mapped[str | None] = mapped_column(String(50))
    workflow_name: Mapped[str] = mapped_column(String(200))
    job_name: Mapped[str] = mapped_column(String(200))
    run_id: Mapped[str | None] = mapped_column(String(50))
    run_attempt: Mapped[str | None] = mapped_column(String(20))
    check_run_id: Mapped[str] = mapped_column(String(100))
    status: Mapped[str | None] = mapped_column(String(20))
    conclusion: Mapped[str | None] = mapped_column(String(20))
    queue_time: Mapped[float | None] = mapped_column(Float)
    execution_time: Mapped[float | None] = mapped_column(Float)
    started_at: Mapped[str | None] = mapped_column(String(40))
    completed_at: Mapped[str | None] = mapped_column(String(40))
    tests_passed: Mapped[int | None] = mapped_column(Integer)
    tests_failed: Mapped[int | None] = mapped_column(Integer)
    tests_skipped: Mapped[int | None] = mapped_column(Integer)
    tests_total: Mapped[int | None] = mapped_column(Integer)
    failed_tests: Mapped[list[Any] | None] = mapped_column()
    artifact_url: Mapped[str | None] = mapped_column(String(500))
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )

    __table_args__ = (Index("ix_crcr_result_downstream_repo", "downstream_repo"),)


class EvalReport(Base):
    """A report of ``relay eval`` (its Markdown table and scores), kept in the database so the
    replay pages of any API host show it; one row per run, the pages read the newest per name."""

    __tablename__ = "eval_report"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))  # e.g. report-mutation.md
    kind: Mapped[str] = mapped_column(String(20))  # mutation, release, catch
    text: Mapped[str] = mapped_column(Text)
    scores: Mapped[Any | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    __table_args__ = (Index("ix_eval_report_name", "name", "id"),)
