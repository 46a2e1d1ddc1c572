"""What a job's tests did (one row per job and test id) and the per-test history of a
downstream that the budget stage and the flaky detector read."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from store.models.base import Base, utcnow


class TestResult(Base):
    """One test variant's outcome in one job (written once per job and test id)."""

    __tablename__ = "test_result"
    __test__ = False  # not a pytest class

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    job_pk: Mapped[int] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"))
    shard_pk: Mapped[int | None] = mapped_column(ForeignKey("shard.id", ondelete="SET NULL"))
    test_id: Mapped[str] = mapped_column(String(500))
    outcome: Mapped[str] = mapped_column(
        String(20)
    )  # passed failed skipped xfailed xpassed error crashed timeout
    duration_s: Mapped[float | None] = mapped_column(Float)
    device_time_us: Mapped[float | None] = mapped_column(Float)
    message: Mapped[str | None] = mapped_column(Text)
    artifact_path: Mapped[str | None] = mapped_column(String(500))  # where the worker wrote it
    # the full failure text (capped; store.outcomes.capped_text): served from here by any host,
    # loaded only when read (a job's result list does not carry it)
    failure_text: Mapped[str | None] = mapped_column(Text, deferred=True)
    spec_mode: Mapped[str | None] = mapped_column(String(30))
    tags: Mapped[list[Any]] = mapped_column(default=list)
    op: Mapped[str | None] = mapped_column(String(200))  # the OpInfo/ModuleInfo the spec saw
    dtype: Mapped[str | None] = mapped_column(String(40))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    __table_args__ = (
        UniqueConstraint("job_pk", "test_id"),
        # the HUD: one test's history across jobs; a job's results by outcome
        Index("ix_test_result_test_id_job_pk", "test_id", "job_pk"),
        Index("ix_test_result_job_pk_outcome", "job_pk", "outcome"),
    )


class TestStat(Base):
    """Per-test history for one downstream: feeds the budget stage and the flaky detector."""

    __tablename__ = "test_stat"
    __test__ = False

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    downstream_repo: Mapped[str] = mapped_column(String(200))
    test_id: Mapped[str] = mapped_column(String(500))
    runs: Mapped[int] = mapped_column(Integer, default=0)
    passes: Mapped[int] = mapped_column(Integer, default=0)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    flips: Mapped[int] = mapped_column(Integer, default=0)  # outcome changes between runs
    last_outcome: Mapped[str | None] = mapped_column(String(20))
    mean_duration_s: Mapped[float | None] = mapped_column(Float)
    mean_device_time_us: Mapped[float | None] = mapped_column(Float)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    __table_args__ = (UniqueConstraint("downstream_repo", "test_id"),)
