"""Stage 2 of the loop, plan: select the tests for one dispatch with the planner, create the job
with its selection and shards (one typed :class:`~planner.RunPlan`), cancel the runs it
supersedes, and hand the shards to :mod:`workers.run`.

The planner is a plugin (``RELAY_PLANNER`` names one of the ``crcr_relay.planners`` entry
points, or gives a ``module:function``; it takes the event and the settings and returns a
RunPlan) so a deployment can plan differently; the default is :func:`default_planner` (entry
point ``selector``), the selector's four stages over the bundled universe.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from contextlib import AbstractContextManager

from celery import Task

import plugins
from config.broker import TASK_LEARN_IMPORT_MAP, TASK_PLAN
from config.logs import bind
from config.settings import Settings, get_settings
from planner import RunPlan, ShardPolicy, cut_shards, plan_event
from planner.durations import history_for
from planner.release import learn_in_background, not_queued
from store import jobs, results, scheduling
from store.db import session_scope
from store.models import (
    Conclusion,
    Dispatch,
    DispatchState,
    Job,
    JobStatus,
)
from upstream.headenv import HeadEnvError
from wire.github.events import UpstreamEvent, load_event
from workers.celery_app import app
from workers.harness.pools import runner_backend
from workers.leases import renewed
from workers.report import delivery_of, report, send_callback
from workers.run import run_shard_task

log = logging.getLogger("workers.plan")

Planner = Callable[[UpstreamEvent, Settings], RunPlan]


def default_planner(event: UpstreamEvent, settings: Settings) -> RunPlan:
    """The selector's four stages over the bundled universe on ``RELAY_RUNNER_BACKEND`` under
    ``RELAY_RUNNER_SPECS`` (default: the backend's own), with our per-test history (runner-
    seconds, failures, flakiness; simulated device time beside). A job (a release step, a pull
    request, a push) whose import map is not learned yet is planned without it, and its learning
    queued (:func:`learn_import_map`) for the jobs after it, unless
    ``RELAY_IMPORT_MAP_LEARNING=false``: no job waits for it."""
    backend, specs = runner_backend(settings)
    with session_scope(settings.database_url) as session:
        history = history_for(results.history_rows(session, repo=settings.runner_repo))
    return plan_event(
        event,
        backend=backend,
        specs=specs,
        upstream=settings.upstream_path,
        upstream_cache=settings.upstream_cache,
        budget_seconds=settings.runner_budget_seconds,
        history=history,
        unanalysed_budget_seconds=60 * settings.runner_unanalysed_budget_minutes
        if settings.runner_unanalysed_budget_minutes
        else None,
        head_wheel=settings.head_wheel,
        overlay_base=settings.overlay_base,
        smoke_untested=settings.smoke_untested,
        learn_later=(
            (lambda: learn_import_map.apply_async(args=[backend.name, [str(s) for s in specs]]))
            if settings.import_map_learning
            else not_queued("it is not learned on this host (RELAY_IMPORT_MAP_LEARNING=false)")
        ),
    )


@app.task(name=TASK_LEARN_IMPORT_MAP, acks_late=False)
def learn_import_map(backend: str, specs: list[str]) -> str | None:
    """The release planner's import map, learned after the job that lacked it, in a planner
    process below the jobs' priority (:func:`planner.release.learn_in_background`): the map's
    path, or None when another process is learning it."""
    path = learn_in_background(backend, specs)
    if path is not None:
        log.info("import map ready", extra={"path": str(path)})
    return str(path) if path else None


class PlannerSettingError(ValueError):
    """RELAY_PLANNER names no planner that can be loaded."""


def load_planner(name: str | None) -> Planner:
    """The planner ``RELAY_PLANNER`` names (:mod:`plugins`); unset: :func:`default_planner`."""
    if not name:
        return default_planner
    try:
        planner: Planner = plugins.load(plugins.PLANNERS, name, setting="RELAY_PLANNER")
    except plugins.PluginError as exc:
        raise PlannerSettingError(str(exc)) from exc
    return planner


def failure_reason(exc: BaseException) -> str:
    """One line on why planning failed: the kind of failure and the error's first line."""
    what = "environment error" if isinstance(exc, HeadEnvError) else "planning failed"
    return f"{what}: {type(exc).__name__}: {scheduling.first_line(str(exc))}"


def _fail(settings: Settings, dispatch_pk: int, job_pk: int, exc: BaseException) -> None:
    """The dispatch fails; its job completes as a failure that says why (the page, the API)
    and, when its planning job existed, the CRCR callback carries the reason."""
    _set_dispatch(settings, dispatch_pk, DispatchState.FAILED, f"{type(exc).__name__}: {exc}")
    with session_scope(settings.database_url) as session:
        job = session.get(Job, job_pk)
        if job is not None and not job.url:  # the callback links to the job that says why
            job.url = f"{settings.public_url.rstrip('/')}/api/v1/jobs/{job.id}"
        if job is not None and scheduling.fail_planning(
            session, job=job, error=traceback.format_exc(), reason=failure_reason(exc)
        ):
            send_callback(settings, job, delivery_of(session, job), "completed")


@app.task(name=TASK_PLAN, bind=True, acks_late=True, max_retries=3, retry_backoff=True)
def plan(self: Task, dispatch_pk: int) -> int | None:
    """Select the tests for one dispatch, create the job, its selection and shards, enqueue them."""
    settings = get_settings()
    with session_scope(settings.database_url) as session:
        dispatch = session.get(Dispatch, dispatch_pk)
        if dispatch is None:
            return None
        event = load_event(dispatch.delivery.normalized)
        if dispatch.state != DispatchState.PENDING.value:
            # planned (or given up) already: a redelivered or re-queued message has nothing to do
            log.info("dispatch already planned", extra={"dispatch_pk": dispatch_pk})
            return None
    with session_scope(settings.database_url) as session:
        if not scheduling.claim_planning(
            session,
            dispatch_pk=dispatch_pk,
            lease=settings.plan_lease_seconds,
            max_attempts=settings.plan_attempts,
        ):
            # another planner holds it, or its attempts are spent (the sweeper says why)
            log.info("dispatch not claimed", extra={"dispatch_pk": dispatch_pk})
            return None
    with bind(delivery_id=event.delivery_id, dispatch_pk=dispatch_pk):
        if event.event == "pull_request" and event.action == "closed" and not event.merged:
            _cancel_pr(settings, event, newer_job_pk=None)
            _set_dispatch(
                settings, dispatch_pk, DispatchState.SKIPPED, "pull request closed without merge"
            )
            return None
        key = jobs.JobKey(
            delivery_id=event.upstream_delivery_id or event.delivery_id,
            repo=settings.runner_repo,
            run_id=str(dispatch_pk),
            run_attempt="1",
            job_name=settings.runner_job_name,
        )
        # the job shows (status "planning", with its start time) while its tests are selected,
        # and the runs it supersedes free their workers now, not once it is planned
        planning_pk, status = _begin_planning(settings, event, key, dispatch_pk)
        if status != JobStatus.PLANNING.value:  # planned by a task that died before saying so
            _set_dispatch(settings, dispatch_pk, DispatchState.SENT, None)
            return planning_pk
        try:
            with _planning_lease(settings, dispatch_pk):
                planned = load_planner(settings.planner)(event, settings)
        except Exception as exc:
            log.exception("planning failed")
            _fail(settings, dispatch_pk, planning_pk, exc)
            raise
        # the one split: the job stores and runs these shards, and its selection says so
        planned = cut_shards(planned, ShardPolicy.from_settings(settings))
        with session_scope(settings.database_url) as session:
            job, created = jobs.create_job(
                session,
                key=key,
                dispatch_pk=dispatch_pk,
                event_type=event.event,
                workflow_name=settings.runner_workflow,
                url="",
                head_sha=event.head_sha or event.after_sha,
                pr_number=event.pr_number,
                shards=planned.shards,
                shard_seconds=planned.shard_seconds,
                selection=planned.stored(),
            )
            if created:
                job.url = f"{settings.public_url.rstrip('/')}/api/v1/jobs/{job.id}"
                job.upstream_under_test = planned.upstream.model_dump(mode="json")
                session.commit()
            job_pk = job.id
        _set_dispatch(settings, dispatch_pk, DispatchState.SENT, None)
        if created:
            _enqueue_job(settings, job_pk)
        log.info(
            "planned",
            extra={"job_pk": job_pk, "tests": planned.total, "shards": len(planned.shards)},
        )
        return job_pk


def _planning_lease(settings: Settings, dispatch_pk: int) -> AbstractContextManager[None]:
    """Renew the dispatch's planning lease every third of RELAY_PLAN_LEASE_SECONDS while the
    planner works, so the sweeper re-queues the plan only when this process is gone."""
    return renewed(
        lambda session, lease: scheduling.renew_planning(
            session, dispatch_pk=dispatch_pk, lease=lease
        ),
        database_url=settings.database_url,
        lease=settings.plan_lease_seconds,
        name=f"plan-lease-{dispatch_pk}",
    )


def _begin_planning(
    settings: Settings, event: UpstreamEvent, key: jobs.JobKey, dispatch_pk: int
) -> tuple[int, str]:
    with session_scope(settings.database_url) as session:
        job = scheduling.begin_planning(
            session,
            key=key,
            dispatch_pk=dispatch_pk,
            event_type=event.event,
            workflow_name=settings.runner_workflow,
            head_sha=event.head_sha or event.after_sha,
            pr_number=event.pr_number,
        )
        job_pk, status = job.id, job.status
    if event.event == "pull_request" and event.pr_number is not None and settings.cancel_superseded:
        _cancel_pr(settings, event, newer_job_pk=job_pk)
    return job_pk, status


def _enqueue_job(settings: Settings, job_pk: int) -> None:
    with session_scope(settings.database_url) as session:
        ids = jobs.pending_shards(session, job_pk=job_pk)
        jobs.mark_enqueued(session, shard_pks=ids)
    if not ids:
        report.apply_async(args=[job_pk])
    for shard_pk in ids:
        run_shard_task.apply_async(args=[shard_pk])


def _set_dispatch(
    settings: Settings, dispatch_pk: int, state: DispatchState, error: str | None
) -> None:
    with session_scope(settings.database_url) as session:
        dispatch = session.get(Dispatch, dispatch_pk)
        if dispatch is not None:
            dispatch.state, dispatch.last_error = state.value, error


def _cancel_pr(settings: Settings, event: UpstreamEvent, *, newer_job_pk: int | None) -> None:
    """A newer push to the PR (or its closing) supersedes the runs still going for it."""
    if event.pr_number is None:
        return
    to_report: list[int] = []
    with session_scope(settings.database_url) as session:
        for old in jobs.superseded_jobs(
            session,
            repo=settings.runner_repo,
            pr_number=event.pr_number,
            newer_than_pk=newer_job_pk,
        ):
            if newer_job_pk is not None and old.id > newer_job_pk:
                continue  # a newer job than this one exists: it is not superseded by us
            old.superseded_by_pk = newer_job_pk if newer_job_pk is not None else old.id
            old.conclusion = Conclusion.CANCELLED.value
            session.commit()
            cancelled = jobs.cancel_job_shards(session, job_pk=old.id)
            log.info(
                "superseded job cancelled", extra={"job_pk": old.id, "shards_cancelled": cancelled}
            )
            if jobs.shards_open(session, job_pk=old.id) == 0:
                to_report.append(old.id)
    for job_pk in to_report:
        report.apply_async(args=[job_pk])
