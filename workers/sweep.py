"""The sweeper (Celery beat, every RELAY_SWEEP_AFTER_SECONDS / 2): the database is the source of
truth, so whatever a lost broker message or a killed worker left behind is found here and handed
back to the stage it belongs to: deliveries to the outbox :mod:`workers.publish` sends, plans
whose planner died or whose message was lost to :mod:`workers.plan` (failed with the reason after
RELAY_PLAN_ATTEMPTS), shards whose task was lost or whose worker died (lease expired: back to
pending, failed with the reason after RELAY_SHARD_ATTEMPTS, cancelled when their job was) to
:mod:`workers.run`, finished jobs to :mod:`workers.report`; jobs
past RELAY_JOB_TIMEOUT_SECONDS complete as ``timed_out``; upstream overlays no open job needs
are removed.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import select

from config.broker import (
    CONTROL_QUEUE,
    PLAN_QUEUE,
    SHARD_QUEUE,
    TASK_SWEEP_DELIVERIES,
    TASK_SWEEP_JOBS,
    queue_depth,
)
from config.settings import Settings, get_settings
from store import deliveries, jobs, results, scheduling, shards
from store.db import session_scope
from store.models import Conclusion, Job, JobStatus, ShardState, utcnow
from upstream.overlay import remove_overlays
from workers.celery_app import app
from workers.dispatch import sweep_outbox
from workers.plan import plan
from workers.report import delivery_of, report, send_callback
from workers.run import run_shard_task

log = logging.getLogger("workers.sweep")


@app.task(name=TASK_SWEEP_DELIVERIES)
def sweep_deliveries() -> int:
    """Put back into the outbox deliveries whose message was lost (a broker restarted without
    it) or whose worker was killed mid-processing; the publisher (workers.publish) sends them
    again. A delivery the broker never took is still in the outbox: nothing to do here."""
    settings = get_settings()
    if queue_depth(app, CONTROL_QUEUE) != 0:
        return 0  # messages are waiting: nothing was lost (see config.broker.queue_depth)
    with session_scope(settings.database_url) as session:
        stale = deliveries.stale_received(
            session, older_than=timedelta(seconds=settings.sweep_after_seconds)
        )
        for pk in stale:
            deliveries.requeue_stuck(session, pk=pk)
    if stale:
        log.info("re-enqueued stale deliveries", extra={"count": len(stale)})
    return len(stale)


def sweep_plans() -> dict[str, int]:
    """Re-enqueue plans whose planner died (its lease expired) or whose message was lost (never
    started, RELAY_SWEEP_AFTER_SECONDS ago, the plan queue empty); after RELAY_PLAN_ATTEMPTS
    planners started one and none finished, or when it is older than RELAY_JOB_TIMEOUT_SECONDS,
    its job completes as a failure with the reason instead."""
    settings = get_settings()
    requeued: list[int] = []
    given_up = 0
    with session_scope(settings.database_url) as session:
        stalled = scheduling.stalled_plans(
            session,
            unstarted_after=timedelta(seconds=settings.sweep_after_seconds),
            plan_queue_empty=queue_depth(app, PLAN_QUEUE) == 0,
        )
        for s in stalled:
            age = jobs.seconds_between(s.created_at, utcnow()) or 0.0
            reason = None
            if s.attempts >= settings.plan_attempts:
                reason = (
                    f"planning lost {s.attempts} times (its planner stopped without a plan: "
                    "worker killed or restarted?); RELAY_PLAN_ATTEMPTS reached"
                )
            elif age > settings.job_timeout_seconds:
                reason = (
                    f"never planned within RELAY_JOB_TIMEOUT_SECONDS ({settings.job_timeout_seconds}"
                    f" s; {s.attempts} planner(s) started it)"
                )
            if reason is not None:
                scheduling.give_up_planning(session, dispatch_pk=s.dispatch_pk, reason=reason)
                log.warning(
                    "planning given up", extra={"dispatch_pk": s.dispatch_pk, "reason": reason}
                )
                given_up += 1
            elif scheduling.requeue_planning(session, dispatch_pk=s.dispatch_pk):
                requeued.append(s.dispatch_pk)
    for dispatch_pk in requeued:
        plan.apply_async(args=[dispatch_pk])
    if requeued:
        log.info("re-enqueued stalled plans", extra={"dispatch_pks": requeued})
    return {"plans_requeued": len(requeued), "plans_given_up": given_up}


def sweep_overlays(settings: Settings) -> int:
    """Remove the upstream overlays (RELAY_VAR_DIR/envs) no open job needs and none used for
    RELAY_OVERLAY_KEEP_SECONDS (a job's shards on this host refresh its overlay's use)."""
    envs = settings.var_dir / "envs"
    if not envs.is_dir():
        return 0
    with session_scope(settings.database_url) as session:
        heads = session.scalars(
            select(Job.head_sha).where(
                Job.status != JobStatus.COMPLETED.value, Job.head_sha.is_not(None)
            )
        )
        keep = [h for h in heads if h]
    removed = remove_overlays(envs, keep=keep, older_than_seconds=settings.overlay_keep_seconds)
    return len(removed)


def sweep_shards() -> dict[str, int]:
    """Hand back the running shards whose lease expired (their worker died, or their task
    raised): to pending with a new task message (the tests already stored are not run again);
    failed with the reason once RELAY_SHARD_ATTEMPTS owners took one; cancelled when their job
    was cancelled meanwhile. Logs which shards it re-queued, and who had them."""
    settings = get_settings()
    requeued: list[shards.LostShard] = []
    ended = {ShardState.FAILED: 0, ShardState.CANCELLED: 0}
    with session_scope(settings.database_url) as session:
        for lost in shards.lost_shards(session):
            if lost.job_cancelled:
                state, reason = ShardState.CANCELLED, "its job was cancelled; its worker was lost"
            elif lost.attempts >= settings.shard_attempts:
                state = ShardState.FAILED
                reason = shards.attempts_spent(
                    lost.attempts, settings.shard_attempts, lost.last_error
                )
            else:
                if shards.requeue_lost(session, shard_pk=lost.shard_pk):
                    requeued.append(lost)
                continue
            if shards.end_lost(session, shard_pk=lost.shard_pk, state=state, reason=reason):
                ended[state] += 1
                log.warning(
                    "lost shard ended",
                    extra={**lost.log_entry(), "state": state.value, "reason": reason},
                )
    for lost in requeued:
        run_shard_task.apply_async(args=[lost.shard_pk])
    if requeued:
        log.info(
            "re-queued shards whose worker was lost",
            extra={"shards": [lost.log_entry() for lost in requeued]},
        )
    return {
        "shards_lost_requeued": len(requeued),
        "shards_failed": ended[ShardState.FAILED],
        "shards_cancelled": ended[ShardState.CANCELLED],
    }


@app.task(name=TASK_SWEEP_JOBS)
def sweep_jobs() -> dict[str, int]:
    """The periodic sweeper: re-enqueue deliveries and shards whose messages were lost, hand
    back shards whose worker was lost (:func:`sweep_shards`), report
    jobs whose report was lost, and time out jobs running past RELAY_JOB_TIMEOUT_SECONDS (CRCR's
    zombie sweeper, plus the jobs that were dispatched but never started)."""
    deliveries_requeued = sweep_deliveries()
    planning = sweep_plans()
    lost = sweep_shards()
    settings = get_settings()
    waiting = queue_depth(app, SHARD_QUEUE)
    with session_scope(settings.database_url) as session:
        stale = (
            shards.stale_pending_shards(
                session, older_than=timedelta(seconds=settings.sweep_after_seconds)
            )
            if waiting == 0
            else []
        )
        jobs.mark_enqueued(session, shard_pks=stale)
        overdue = jobs.overdue_jobs(
            session, older_than=timedelta(seconds=settings.job_timeout_seconds)
        )
        timed_out = []
        for job in overdue:
            jobs.cancel_job_shards(session, job_pk=job.id)
            if job.status == JobStatus.DISPATCHED.value:
                jobs.transition(
                    session,
                    job=job,
                    to=JobStatus.IN_PROGRESS,
                    expect={JobStatus.DISPATCHED},
                    source="sweeper",
                )
            results.store_counts(session, job=job)
            if jobs.transition(
                session,
                job=job,
                to=JobStatus.COMPLETED,
                expect={JobStatus.IN_PROGRESS},
                source="sweeper",
                conclusion=Conclusion.TIMED_OUT,
            ):
                timed_out.append(job)
                send_callback(settings, job, delivery_of(session, job), "completed")
        orphans = jobs.orphaned_jobs(session)
    for shard_pk in stale:
        run_shard_task.apply_async(args=[shard_pk])
    for job_pk in orphans:
        report.apply_async(args=[job_pk])
    counts = {
        **sweep_outbox(settings),
        "overlays_removed": sweep_overlays(settings),
        "deliveries_requeued": deliveries_requeued,
        **planning,
        **lost,
        "shards_requeued": len(stale),
        "jobs_timed_out": len(timed_out),
        "jobs_reported": len(orphans),
    }
    if any(counts.values()):
        log.info("sweep", extra=counts)
    return counts
