"""Database models for the whole loop: upstream event in, dispatch, job, selection, results out.

Designed up front so later features fill rows rather than reshape tables. Statuses are short
strings (validated in code by the enums below) so the schema stays portable across SQLite and
PostgreSQL. Schema changes go through Alembic (``migrations/``); ``STORED_DATA_VERSION`` is the
number of the newest migration (1: initial schema; 2: shard leases; 3: the HUD's indexes and a
result's op and dtype; 4: a selection's variants as rows, SelectionTest; 5: the relay role's
outbox columns on Dispatch, CallbackNonce, CallbackRate and CrcrResult; 6: a job's
planning_started_at; 7: the outbox's publishing and check-run creation columns; 8: the check
run's updates as an outbox on Dispatch; 9: a result's full failure text, TestResult.failure_text;
12: a delivery's upstream_payload, and its normalized event filled for every stored delivery).
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

STORED_DATA_VERSION = 6

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class DeliveryState(enum.StrEnum):
    RECEIVED = "received"  # stored; the outbox publisher enqueues it (published_at)
    PROCESSING = "processing"
    PROCESSED = "processed"
    FAILED = "failed"  # processing raised; a GitHub redelivery processes it again
    REJECTED = "rejected"  # valid JSON, not the shape of its event: stored with the reason, never processed


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


class ShardState(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"


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
