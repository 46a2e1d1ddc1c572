"""The callback state machine's guards: a dispatch token's nonce bound to its first run, and
the per-repository rate of callbacks."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from store.models.base import Base, utcnow


class CallbackNonce(Base):
    """A dispatch token's nonce, bound to the first workflow run that called back with it: a
    token replayed by another run is refused."""

    __tablename__ = "callback_nonce"

    nonce: Mapped[str] = mapped_column(String(64), primary_key=True)
    repo: Mapped[str] = mapped_column(String(200))
    run_id: Mapped[str] = mapped_column(String(50))
    first_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class CallbackRate(Base):
    """Callbacks per downstream repository per minute (the 100/min limit, shared by every
    process of the service)."""

    __tablename__ = "callback_rate"

    repo: Mapped[str] = mapped_column(String(200), primary_key=True)
    minute: Mapped[int] = mapped_column(Integer, primary_key=True)  # epoch seconds // 60
    count: Mapped[int] = mapped_column(Integer, default=0)
