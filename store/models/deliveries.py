"""What comes in and where it goes: the upstream repositories, the downstreams registered to
receive their events, each webhook delivery (stored byte-exact) and each dispatch of a delivery
to one downstream (the relay role's outbox, its check run and the check run's updates)."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from store.models.base import Base, utcnow


class UpstreamRepo(Base):
    __tablename__ = "upstream_repo"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    full_name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Downstream(Base):
    """A repository registered to receive upstream events (an allowlist entry)."""

    __tablename__ = "downstream"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo: Mapped[str] = mapped_column(String(200), unique=True)
    level: Mapped[str] = mapped_column(String(2), default="L2")  # CRCR level, L1-L4
    device: Mapped[str | None] = mapped_column(String(100))
    oncalls: Mapped[list[Any]] = mapped_column(default=list)
    # events, branches, paths, author-trust and cancellation rules for this downstream
    policy: Mapped[dict[str, Any]] = mapped_column(default=dict)
    callback_url: Mapped[str | None] = mapped_column(String(500))
    enabled: Mapped[bool] = mapped_column(default=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # an L3 repository's crcr-demotion/<repo> PR is open since then: no new check runs
    demoted_since: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class DeliveryState(enum.StrEnum):
    RECEIVED = "received"  # stored; the outbox publisher enqueues it (published_at)
    PROCESSING = "processing"
    PROCESSED = "processed"
    FAILED = "failed"  # processing raised; a GitHub redelivery processes it again
    REJECTED = "rejected"  # valid JSON, not the shape of its event: stored with the reason, never processed


class Delivery(Base):
    """One webhook delivery, stored byte-exact before anything else happens to it."""

    __tablename__ = "delivery"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    delivery_id: Mapped[str] = mapped_column(String(100), unique=True)  # X-GitHub-Delivery
    event: Mapped[str] = mapped_column(String(50))  # the upstream event (inner one for dispatches)
    action: Mapped[str | None] = mapped_column(String(50))
    repo: Mapped[str | None] = mapped_column(String(200))
    source: Mapped[str] = mapped_column(String(30), default="webhook")  # or repository_dispatch
    upstream_delivery_id: Mapped[str | None] = mapped_column(String(100))  # CRCR inner id
    hook_id: Mapped[str | None] = mapped_column(String(50))
    head_sha: Mapped[str | None] = mapped_column(String(64))
    base_sha: Mapped[str | None] = mapped_column(String(64))
    pr_number: Mapped[int | None] = mapped_column(Integer)
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    raw_body: Mapped[bytes] = mapped_column(LargeBinary)
    body_sha256: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(20), default=DeliveryState.RECEIVED.value)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    processed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # the typed upstream event (wire.github.events.UpstreamEvent), validated once by ingress and
    # written with the row, never again; later stages load it, never raw_body (None: rejected)
    normalized: Mapped[dict[str, Any] | None] = mapped_column()
    # the upstream payload (a CRCR dispatch unwrapped), written with the row: what the relay
    # forwards and echoes verbatim as CRCR's client_payload.payload (None: rejected)
    upstream_payload: Mapped[dict[str, Any] | None] = mapped_column()
    # when the outbox publisher handed it to the broker (None: RECEIVED and still to publish)
    published_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    dispatches: Mapped[list[Dispatch]] = relationship(back_populates="delivery")

    __table_args__ = (Index("ix_delivery_state_received_at", "state", "received_at"),)


class CheckState(enum.StrEnum):
    """A dispatch's check run (L3 with the label, L4), created like the dispatch is sent."""

    PENDING = "pending"  # to create at check_next_attempt_at (a retry waits there too)
    CREATING = "creating"  # claimed by a sender until check_next_attempt_at
    CREATED = "created"  # check_run_id holds it
    SUPPRESSED = "suppressed"  # held back: the downstream's crcr-demotion PR is open
    DEAD = "dead"  # the attempts are spent or GitHub refused: check_error says why


class CheckUpdateState(enum.StrEnum):
    """A dispatch's check run brought up to date with its job: the callbacks' outbox, written in
    the transaction of the job's transition, sent by a worker (fanout.checks)."""

    PENDING = "pending"  # to send at check_update_next_attempt_at (once the check run exists)
    UPDATING = "updating"  # claimed by a sender until check_update_next_attempt_at
    DONE = "done"  # the check run shows the transition numbered check_update_seq
    DEAD = "dead"  # the attempts are spent or GitHub refused: check_update_error says why


class DispatchState(enum.StrEnum):
    PENDING = "pending"  # in the outbox: to send at next_attempt_at (a retry waits there too)
    SENDING = "sending"  # claimed by a sender until lease_until
    SENT = "sent"  # CRCR's DISPATCHED
    FAILED = "failed"
    SKIPPED = "skipped"  # the policy turned it away at send time (changed paths), with the reason
    DEAD = "dead"  # attempts exhausted or refused for good: a dead letter, retried by an operator


class Dispatch(Base):
    """A delivery sent to one downstream."""

    __tablename__ = "dispatch"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    delivery_pk: Mapped[int] = mapped_column(ForeignKey("delivery.id", ondelete="CASCADE"))
    downstream_pk: Mapped[int] = mapped_column(ForeignKey("downstream.id", ondelete="CASCADE"))
    state: Mapped[str] = mapped_column(String(20), default=DispatchState.PENDING.value)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )

    # the relay role's outbox (fanout/): where it goes, when it is next tried, what came back
    target: Mapped[str] = mapped_column(String(20), default="runner")  # or "github"
    next_attempt_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    enqueued_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    http_status: Mapped[int | None] = mapped_column(Integer)
    nonce: Mapped[str | None] = mapped_column(String(64), unique=True)  # the dispatch token's
    check_run_id: Mapped[int | None] = mapped_column(BigInteger)  # L3/L4: queued at dispatch
    # the check run's creation, retried like the dispatch (store.checks.CheckState)
    check_state: Mapped[str | None] = mapped_column(String(20))
    check_attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    check_next_attempt_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    check_error: Mapped[str | None] = mapped_column(Text)
    # the check run's updates (CheckUpdateState): each job transition of the dispatch numbers
    # itself (check_update_seq) in its own transaction; a sender shows the newest one
    check_update_state: Mapped[str | None] = mapped_column(String(20))
    check_update_seq: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    check_update_job_pk: Mapped[int | None] = mapped_column(Integer)  # the job to show
    check_update_attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    check_update_next_attempt_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    check_update_enqueued_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    check_update_error: Mapped[str | None] = mapped_column(Text)

    delivery: Mapped[Delivery] = relationship(back_populates="dispatches")
    downstream: Mapped[Downstream] = relationship()

    __table_args__ = (
        UniqueConstraint("delivery_pk", "downstream_pk"),
        Index("ix_dispatch_state_next_attempt_at", "state", "next_attempt_at"),
        Index("ix_dispatch_check_state", "check_state", "check_next_attempt_at"),
        Index(
            "ix_dispatch_check_update_state", "check_update_state", "check_update_next_attempt_at"
        ),
    )
