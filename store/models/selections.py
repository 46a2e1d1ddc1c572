"""A job's stored selection: the plan's JSON without its per-variant lists, and one row per
variant (selected, cut or removed)."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from store.models.base import Base, utcnow


class Selection(Base):
    """A stored SelectionPlan: the funnel counts, the reasons and the shards planned."""

    __tablename__ = "selection"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_pk: Mapped[int | None] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"), index=True)
    base_rev: Mapped[str | None] = mapped_column(String(100))
    head_rev: Mapped[str | None] = mapped_column(String(100))
    stage_counts: Mapped[dict[str, Any]] = mapped_column(default=dict)
    fallbacks: Mapped[list[Any]] = mapped_column(default=list)
    # the SelectionPlan JSON without its per-variant lists (tests, cut, removed: SelectionTest
    # rows; shards: Shard rows), with the runner's recipe under "runner"
    plan: Mapped[dict[str, Any]] = mapped_column(default=dict)
    estimated_device_seconds: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class SelectionKind(enum.StrEnum):
    SELECTED = "selected"  # planned to run
    CUT = "cut"  # chosen by the impact stage, cut by the budget
    REMOVED = "removed"  # in the plan's universe but gone at head


class SelectionTest(Base):
    """One variant of a stored selection, with its rank, reasons and (when selected) shard: the
    per-variant part of a SelectionPlan, stored as rows so the API pages it."""

    __tablename__ = "selection_test"
    __test__ = False

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    job_pk: Mapped[int] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(10))
    test_id: Mapped[str] = mapped_column(String(500))
    rank: Mapped[int | None] = mapped_column(Integer)
    shard: Mapped[int | None] = mapped_column(Integer)
    risk: Mapped[float | None] = mapped_column(Float)
    seconds: Mapped[float | None] = mapped_column(Float)
    seconds_source: Mapped[str | None] = mapped_column(String(30))
    mode: Mapped[str | None] = mapped_column(String(30))
    gating: Mapped[bool | None] = mapped_column()
    flag: Mapped[str | None] = mapped_column(String(30))
    signals: Mapped[list[Any]] = mapped_column(default=list)
    reasons: Mapped[list[Any]] = mapped_column(default=list)

    __table_args__ = (UniqueConstraint("job_pk", "kind", "test_id"),)

    @classmethod
    def variant_columns(cls) -> tuple[str, ...]:
        """The columns a variant fills: the selector's per-test record (``selector.model.Ranked``,
        the cut and removed records a subset of it), with ``kind`` and the runner's ``shard``."""
        return tuple(c.name for c in cls.__table__.columns if c.name not in ("id", "job_pk"))
