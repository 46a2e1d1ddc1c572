"""A downstream job (keyed like CRCR), its status history and its shards (the runner's split,
the only one)."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import (
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from store.models.base import Base, utcnow


class JobStatus(enum.StrEnum):
    PLANNING = "planning"  # the job exists; its tests are being selected (no shards yet)
    DISPATCHED = "dispatched"
    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"


class Conclusion(enum.StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    NEUTRAL = "neutral"  # nothing could test the change (the job's upstream_under_test says why)


class Job(Base):
    """A downstream job, keyed like CRCR: (delivery_id, repo, run_id, run_attempt, job_name)."""

    __tablename__ = "job"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    delivery_id: Mapped[str] = mapped_column(String(100))
    repo: Mapped[str] = mapped_column(String(200))
    run_id: Mapped[str] = mapped_column(String(50))
    run_attempt: Mapped[str] = mapped_column(String(20), default="1")
    job_name: Mapped[str] = mapped_column(String(200))
    dispatch_pk: Mapped[int | None] = mapped_column(ForeignKey("dispatch.id", ondelete="SET NULL"))
    event_type: Mapped[str | None] = mapped_column(String(50))
    workflow_name: Mapped[str | None] = mapped_column(String(200))
    url: Mapped[str | None] = mapped_column(String(500))
    check_run_id: Mapped[str | None] = mapped_column(String(100))
    head_sha: Mapped[str | None] = mapped_column(String(64))
    pr_number: Mapped[int | None] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(20), default=JobStatus.DISPATCHED.value)
    conclusion: Mapped[str | None] = mapped_column(String(20))
    dispatched_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    planning_started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    tests_passed: Mapped[int] = mapped_column(Integer, default=0)
    tests_failed: Mapped[int] = mapped_column(Integer, default=0)
    tests_skipped: Mapped[int] = mapped_column(Integer, default=0)
    tests_total: Mapped[int] = mapped_column(Integer, default=0)
    artifact_url: Mapped[str | None] = mapped_column(String(500))
    superseded_by_pk: Mapped[int | None] = mapped_column(ForeignKey("job.id", ondelete="SET NULL"))
    # the PyTorch the job tested (planner.RunPlan.upstream, completed by the shard worker):
    # kind, torch version and build, overlay head SHA and files laid over, compiled files not
    # covered, the reason
    upstream_under_test: Mapped[dict[str, Any] | None] = mapped_column()
    # why a job failed before it ran tests (planning error, environment error, nothing
    # selected): one line for the page, the callback and the check run, and the error's text
    failure_reason: Mapped[str | None] = mapped_column(String(300))
    failure_error: Mapped[str | None] = mapped_column(Text)

    transitions: Mapped[list[JobTransition]] = relationship(
        back_populates="job", order_by="JobTransition.id"
    )

    __table_args__ = (
        UniqueConstraint("delivery_id", "repo", "run_id", "run_attempt", "job_name"),
        Index("ix_job_status", "status"),
        # the HUD: the commit grid (newest first, per commit), a downstream's health window
        Index("ix_job_dispatched_at", "dispatched_at"),
        Index("ix_job_head_sha_dispatched_at", "head_sha", "dispatched_at"),
        Index("ix_job_repo_dispatched_at", "repo", "dispatched_at"),
    )


class JobTransition(Base):
    """Timestamped history of a job's status changes."""

    __tablename__ = "job_transition"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_pk: Mapped[int] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"), index=True)
    from_status: Mapped[str | None] = mapped_column(String(20))
    to_status: Mapped[str] = mapped_column(String(20))
    conclusion: Mapped[str | None] = mapped_column(String(20))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    source: Mapped[str | None] = mapped_column(String(50))  # worker, callback, sweeper...
    detail: Mapped[dict[str, Any] | None] = mapped_column()

    job: Mapped[Job] = relationship(back_populates="transitions")


class ShardState(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"


class Shard(Base):
    __tablename__ = "shard"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_pk: Mapped[int] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    test_ids: Mapped[list[Any]] = mapped_column(default=list)
    state: Mapped[str] = mapped_column(String(20), default=ShardState.PENDING.value)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    estimated_seconds: Mapped[float | None] = mapped_column(Float)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(Text)
    # a running shard's owner renews its lease; a redelivered task waits for it to expire
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    owner: Mapped[str | None] = mapped_column(String(200))
    enqueued_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (UniqueConstraint("job_pk", "index"),)
