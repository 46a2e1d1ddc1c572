"""Stage 3 of the loop, run: lease one shard and run its tests with the harness, storing each
result as it finishes; when a job's last shard ends, :mod:`workers.report` concludes it.

A shard is leased, so a redelivered task after a killed worker waits for the lease, then resumes
with the tests whose results are not stored yet; a shard whose worker died without a redelivery,
or whose task raised, is handed back by the sweeper (:mod:`workers.sweep`). Each failing test's
full failure text is stored with its result; the shard's scratch folder under
RELAY_VAR_DIR/runs is removed once the shard is stored (RELAY_RUNS_KEEP_SECONDS keeps it longer).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import shutil
import socket
import time
import traceback
from contextlib import AbstractContextManager
from pathlib import Path

from celery import Task
from sqlalchemy.orm import Session

from backends.base import RunnerConfig
from config.broker import TASK_RUN_SHARD
from config.logs import bind
from config.settings import Settings, get_settings
from planner import StoredPlan
from store import jobs, scheduling, selections, shards
from store import results as result_rows
from store.db import session_scope
from store.models import Job, JobStatus, Shard, ShardState
from store.outcomes import Outcome, TestOutcome, capped_text
from upstream import UpstreamError
from upstream.headenv import HeadEnvError
from upstream.overlay import OverlayError
from upstream.undertest import RunEnvironment, UpstreamUnderTest, resolve_environment
from workers.celery_app import app
from workers.harness.pools import launcher_for
from workers.harness.runner import ShardRun, finished_in, run_shard
from workers.leases import renewed
from workers.report import delivery_of, report, send_callback

log = logging.getLogger("workers.run")


@app.task(
    name=TASK_RUN_SHARD,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=None,
)
def run_shard_task(self: Task, shard_pk: int) -> str:
    """Run the most urgent claimable shard (see :mod:`store.scheduling`: one task is enqueued
    per shard, ``shard_pk`` the one it was enqueued for, but a free worker runs a pull
    request's shard before a replay's); resumable after a worker died (results are kept)."""
    settings = get_settings()
    owner = f"{socket.gethostname()}:{os.getpid()}:{self.request.id}"
    with session_scope(settings.database_url) as session:
        claim = scheduling.claim_next(
            session, owner=owner, task_id=str(self.request.id), lease=settings.shard_lease_seconds
        )
        if claim.shard is None:
            if claim.busy_for:
                raise self.retry(countdown=claim.busy_for)
            return "nothing to do"
        work = _start(session, settings, claim.shard, owner)
    if isinstance(work, str):
        return work
    with bind(delivery_id=work.delivery_id, job_pk=work.job_pk, shard=work.index):
        log.info(
            "shard starting",
            extra={"tests": len(work.todo), "already_done": work.planned - len(work.todo)},
        )
        return _run(settings, work, owner)


@dataclasses.dataclass(frozen=True)
class _Work:
    """A claimed shard of a running job: what its plan says and which of its tests are left."""

    shard_pk: int
    job_pk: int
    index: int
    attempt: int
    delivery_id: str
    runner: RunnerConfig
    under_test: UpstreamUnderTest
    planned: int  # the shard's tests
    todo: list[str]  # those without a stored result
    workdir: Path


def _start(session: Session, settings: Settings, shard: Shard, owner: str) -> _Work | str:
    """The claimed shard's work, after its job learns it is in progress; or why there is none
    ("cancelled": its job is over; "failed": redelivered past RELAY_SHARD_ATTEMPTS)."""
    job = session.get(Job, shard.job_pk)
    assert job is not None
    selection = selections.selection_of(session, job_pk=job.id)
    assert selection is not None  # stored with the job, in the same transaction
    stored = StoredPlan.model_validate(selection.plan)
    delivery = delivery_of(session, job)
    ended = _ended(session, settings, job, shard, owner)
    if ended is not None:
        return ended
    started = jobs.transition(
        session, job=job, to=JobStatus.IN_PROGRESS, expect={JobStatus.DISPATCHED}, source="worker"
    )
    if started:
        send_callback(settings, job, delivery, "in_progress")
    runs = settings.var_dir / "runs" / f"job-{job.id}"
    if shard.attempts > 1:  # results an earlier attempt finished but had not stored yet
        earlier = [runs / f"shard-{shard.index}-attempt-{n}" for n in range(1, shard.attempts)]
        wanted = set(shard.test_ids)
        result_rows.store_results(
            session,
            job_pk=job.id,
            shard_pk=shard.id,
            outcomes=[
                with_failure_text(o, settings.failure_text_max_bytes)
                for o in finished_in(earlier)
                if o.test_id in wanted
            ],
        )
    done = result_rows.finished_test_ids(session, job_pk=job.id)
    return _Work(
        shard_pk=shard.id,
        job_pk=job.id,
        index=shard.index,
        attempt=shard.attempts,
        delivery_id=job.delivery_id,
        runner=stored.runner.resolved(spec_dir=settings.var_dir.resolve() / "specs"),
        under_test=stored.upstream_under_test,
        planned=len(shard.test_ids),
        todo=[t for t in shard.test_ids if t not in done],
        workdir=runs / f"shard-{shard.index}-attempt-{shard.attempts}",
    )


def _ended(session: Session, settings: Settings, job: Job, shard: Shard, owner: str) -> str | None:
    """End a shard that must not run: its job is over ("cancelled"), or it was redelivered past
    the cap ("failed"); the job's report is enqueued when it was its last open shard."""
    if job.status == JobStatus.COMPLETED.value or job.superseded_by_pk is not None:
        jobs.finish_shard(session, shard_pk=shard.id, state=ShardState.CANCELLED)
        outcome = "cancelled"
    elif shard.attempts > settings.shard_attempts:  # a redelivery past the cap: not again
        reason = shards.attempts_spent(
            shard.attempts - 1, settings.shard_attempts, shard.last_error
        )
        shards.end_lost(
            session, shard_pk=shard.id, state=ShardState.FAILED, reason=reason, owner=owner
        )
        outcome = "failed"
    else:
        return None
    if jobs.shards_open(session, job_pk=job.id) == 0:
        report.apply_async(args=[job.id])
    return outcome


def _run(settings: Settings, work: _Work, owner: str) -> str:
    """Run the shard's tests left in its job's upstream environment, storing each result as it
    finishes and renewing the lease meanwhile; then end the shard (the shard's state)."""
    results = _ResultBatch(
        settings.database_url,
        job_pk=work.job_pk,
        shard_pk=work.shard_pk,
        text_bytes=settings.failure_text_max_bytes,
    )
    environment = _environment_or_not_run(settings, work, owner, results)

    def heartbeat() -> None:
        results.flush()
        with session_scope(settings.database_url) as s:
            jobs.renew_lease(
                s, shard_pk=work.shard_pk, owner=owner, lease=settings.shard_lease_seconds
            )

    try:
        run = (
            ShardRun([], 0, 0.0)
            if environment is None
            else run_shard(
                work.todo,
                launcher=launcher_for(
                    work.runner,
                    warm=settings.warm_pool,
                    module_servers=settings.module_servers,
                    environment=environment,
                    environment_key=work.under_test.key(),
                    keep_environments=settings.warm_pool_envs,
                ),
                pytest_args=work.runner.pytest_args,
                per_test_timeout=settings.per_test_timeout,
                device_time_property=work.runner.device_time_property,
                workdir=work.workdir,
                on_result=results.add,
                heartbeat=heartbeat,
                should_stop=lambda: _job_cancelled(settings, work.job_pk),
            )
        )
    except Exception as exc:  # the sweeper hands the shard on at its next pass
        results.flush()
        error = "".join(traceback.format_exception_only(exc)).strip()
        with session_scope(settings.database_url) as s:
            shards.give_up_lease(s, shard_pk=work.shard_pk, owner=owner, error=error)
        log.exception("shard raised; its lease is given up", extra={"error": error})
        raise
    finally:
        results.flush()  # what finished is stored, whatever happened
    return _finish(settings, work, run)


def _environment_or_not_run(
    settings: Settings, work: _Work, owner: str, results: _ResultBatch
) -> RunEnvironment | None:
    """The job's upstream environment on this host (the lease kept while it is made); when it
    cannot be made, every test left is stored ``not_run`` with the reason, and None."""
    try:
        with _lease_kept(settings, work.shard_pk, owner):  # making one can take minutes
            return _environment(settings, work.job_pk, work.under_test)
    except (HeadEnvError, OverlayError, UpstreamError, ValueError, OSError) as exc:
        log.exception("upstream environment not made")
        message = f"the upstream environment ({work.under_test.key()}) was not made: {exc}"
        for test_id in work.todo:
            results.add(TestOutcome(test_id, Outcome.NOT_RUN, message=message))
        results.flush()
        return None


def _job_cancelled(settings: Settings, job_pk: int) -> bool:
    """Whether the job is gone, superseded or completed (a running shard stops)."""
    with session_scope(settings.database_url) as s:
        j = s.get(Job, job_pk)
        return j is None or j.superseded_by_pk is not None or j.status == JobStatus.COMPLETED.value


def _finish(settings: Settings, work: _Work, run: ShardRun) -> str:
    """End the shard (done, or cancelled when its job is), remove old scratch, and enqueue the
    job's report when it was its last open shard."""
    with session_scope(settings.database_url) as session:
        state = ShardState.CANCELLED if _job_cancelled(settings, work.job_pk) else ShardState.DONE
        jobs.finish_shard(session, shard_pk=work.shard_pk, state=state)
        open_left = jobs.shards_open(session, job_pk=work.job_pk)
    log.info(
        "shard finished",
        extra={
            "tests": len(run.results),
            "children": run.children,
            "seconds": round(run.seconds, 2),
        },
    )
    removed = prune_scratch(settings)
    if removed:
        log.info("scratch removed", extra={"folders": removed})
    if open_left == 0:
        report.apply_async(args=[work.job_pk])
    return state.value


def _lease_kept(settings: Settings, shard_pk: int, owner: str) -> AbstractContextManager[None]:
    """Renew the shard's lease every third of RELAY_SHARD_LEASE_SECONDS meanwhile (an
    environment made for the first time takes minutes; no other worker should take the shard)."""
    return renewed(
        lambda session, lease: jobs.renew_lease(
            session, shard_pk=shard_pk, owner=owner, lease=lease
        ),
        database_url=settings.database_url,
        lease=settings.shard_lease_seconds,
        name=f"shard-lease-{shard_pk}",
    )


def _environment(settings: Settings, job_pk: int, under_test: UpstreamUnderTest) -> RunEnvironment:
    """The job's upstream environment on this host (made once, shared by its shards); the job's
    ``upstream_under_test`` learns the torch build (and the files laid over) the first time."""
    environment = resolve_environment(
        under_test,
        envs=settings.var_dir / "envs",
        checkout=settings.upstream_path,
        wheel_cache=settings.upstream_cache,
    )
    with session_scope(settings.database_url) as session:
        job = session.get(Job, job_pk)
        known = dict(job.upstream_under_test or {}) if job is not None else {}
        learned: dict[str, object] = {"torch_build": environment.torch_build}
        if environment.files_laid_over is not None:
            learned["files_laid_over"] = environment.files_laid_over
        if job is not None and any(known.get(k) != v for k, v in learned.items()):
            job.upstream_under_test = {**under_test.model_dump(mode="json"), **known, **learned}
    return environment


def with_failure_text(outcome: TestOutcome, max_bytes: int) -> TestOutcome:
    """``outcome`` with its artifact's text (the full failure report the harness wrote on this
    host), capped, to store with the result; unchanged without one."""
    if not outcome.artifact_path or outcome.failure_text is not None:
        return outcome
    try:
        text = Path(outcome.artifact_path).read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        text = f"the failure text could not be read on the worker: {exc}"
    return dataclasses.replace(outcome, failure_text=capped_text(text, max_bytes))


_SCRATCH = re.compile(r"shard-(\d+)-attempt-\d+")


def prune_scratch(settings: Settings) -> int:
    """Remove this host's shard scratch folders (RELAY_VAR_DIR/runs/job-N/shard-I-attempt-K)
    whose shard is stored (done, cancelled or failed, on whichever host) and that are older
    than RELAY_RUNS_KEEP_SECONDS (0: at once); a running shard's earlier attempts stay, for its
    resumption. The number of folders removed."""
    runs = settings.var_dir / "runs"
    cutoff = time.time() - settings.runs_keep_seconds
    found: dict[tuple[int, int], list[Path]] = {}
    for folder in runs.glob("job-*/shard-*-attempt-*") if runs.is_dir() else []:
        match = _SCRATCH.fullmatch(folder.name)
        job = folder.parent.name.removeprefix("job-")
        if match and job.isdigit() and folder.stat().st_mtime <= cutoff:
            found.setdefault((int(job), int(match.group(1))), []).append(folder)
    if not found:
        return 0
    with session_scope(settings.database_url) as session:
        stored = shards.finished_keys(session, job_pks=sorted({j for j, _ in found}))
    removed = [f for key, folders in found.items() if key in stored for f in folders]
    for folder in removed:
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):  # another shard of the job may start here meanwhile
            if not any(folder.parent.iterdir()):
                folder.parent.rmdir()
    return len(removed)


class _ResultBatch:
    """Results stored as they finish, a transaction per batch instead of a commit per test:
    the first one at once, then at least once a second (the heartbeat) or every 50."""

    def __init__(
        self, database_url: str, *, job_pk: int, shard_pk: int, text_bytes: int, size: int = 50
    ) -> None:
        self.database_url, self.job_pk, self.shard_pk, self.size = (
            database_url,
            job_pk,
            shard_pk,
            size,
        )
        self.text_bytes = text_bytes
        self.pending: list[TestOutcome] = []
        self.stored = 0

    def add(self, outcome: TestOutcome) -> None:
        self.pending.append(with_failure_text(outcome, self.text_bytes))
        if self.stored == 0 or len(self.pending) >= self.size:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        with session_scope(self.database_url) as s:
            result_rows.store_results(
                s, job_pk=self.job_pk, shard_pk=self.shard_pk, outcomes=self.pending
            )
        self.stored += len(self.pending)
        self.pending = []
