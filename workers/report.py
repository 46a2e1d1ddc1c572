"""Stage 4 of the loop, report: once all of a job's shards are done, conclude it (success only
when at least one test ran and no gating test failed), fold its results into the per-test
history, and send the CRCR callbacks (``in_progress`` when the first shard starts, ``completed``
at the end, schema "1").
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Task

from config.broker import TASK_REPORT
from config.logs import bind
from config.settings import Settings, get_settings
from store import jobs, results, scheduling
from store.db import session_scope
from store.models import Conclusion, Delivery, Dispatch, Job, JobStatus
from store.selections import nothing_to_test
from upstream.undertest import UpstreamUnderTest
from wire.crcr import callback as crcr_callback
from wire.crcr.client import CallbackError, send
from wire.github.events import load_event, load_payload
from workers.celery_app import app

log = logging.getLogger("workers.report")

#: self-reported events: CRCR takes only `completed` for them, keyed by the tested SHA
NIGHTLY_EVENTS = ("nightly", "periodic")


def _upstream_payload(delivery: Delivery) -> tuple[str, str, dict[str, Any]]:
    """(event_type, CRCR delivery id, upstream payload) as a downstream sees them: the payload a
    callback echoes is the upstream one ingress stored, verbatim."""
    event = load_event(delivery.normalized)
    # a CRCR dispatch's id of the upstream delivery; a nightly's is the tested upstream SHA
    return (
        event.event,
        event.upstream_delivery_id or event.delivery_id,
        load_payload(delivery.upstream_payload),
    )


def send_callback(settings: Settings, job: Job, delivery: Delivery | None, status: str) -> None:
    """The job's CRCR callback (``in_progress`` or ``completed``) to RELAY_CALLBACK_URL."""
    if not settings.callback_url:
        return
    if job.event_type in NIGHTLY_EVENTS and status != "completed":
        return  # CRCR takes only `completed` for nightly / periodic self-reports
    payload: dict[str, Any]
    if delivery is None:
        event_type, delivery_id, payload = job.event_type or "nightly", job.delivery_id, {}
    else:
        event_type, delivery_id, payload = _upstream_payload(delivery)
    body = crcr_callback.build(
        event_type=event_type,
        delivery_id=delivery_id,
        payload=payload,
        status=status,  # type: ignore[arg-type]
        workflow_name=job.workflow_name or settings.runner_workflow,
        url=job.url or "",
        run_id=job.run_id,
        run_attempt=job.run_attempt,
        job_name=job.job_name,
        check_run_id=job.check_run_id,
        started_at=job.started_at if status == "in_progress" else None,
        completed_at=job.completed_at if status == "completed" else None,
        conclusion=_crcr_conclusion(job.conclusion) if status == "completed" else None,
        test_results=crcr_callback.TestCounts(
            passed=job.tests_passed,
            failed=job.tests_failed,
            skipped=job.tests_skipped,
            total=job.tests_passed + job.tests_failed + job.tests_skipped,
        )
        if status == "completed"
        else None,
        summary="\n".join(
            line
            for line in (job.failure_reason if status == "completed" else None, tested_summary(job))
            if line
        )
        or None,
    )
    token = settings.callback_token.get_secret_value() if settings.callback_token else None
    try:
        send(settings.callback_url, body, token=token)
        log.info("callback sent", extra={"status": status, "job_pk": job.id})
    except CallbackError:
        log.exception("callback failed", extra={"status": status, "job_pk": job.id})


def tested_summary(job: Job) -> str | None:
    """The line saying which PyTorch the job tested (its ``upstream_under_test``)."""
    if not job.upstream_under_test:
        return None
    return (
        "upstream under test: "
        + UpstreamUnderTest.model_validate(job.upstream_under_test).describe()
    )


def _crcr_conclusion(conclusion: str | None) -> Any:
    """CRCR's schema "1" has no ``neutral``: a job nothing could test is sent ``cancelled``
    (neither green nor red), its summary saying why."""
    return "cancelled" if conclusion == Conclusion.NEUTRAL.value else conclusion


def delivery_of(session: Any, job: Job) -> Delivery | None:
    if job.dispatch_pk is None:
        return None
    dispatch = session.get(Dispatch, job.dispatch_pk)
    return dispatch.delivery if dispatch is not None else None


def _no_test_reason(job: Job) -> str:
    if not job.tests_total:
        return "no test selected: the plan chose no test to run (its selection funnel says why)"
    return f"no test ran: {job.tests_total} planned, none executed (skipped or never run: see its results)"


@app.task(name=TASK_REPORT, bind=True, acks_late=True, max_retries=5, retry_backoff=True)
def report(self: Task, job_pk: int) -> str | None:
    """Finalize a job once all its shards are done: conclusion, counts, history, callback."""
    settings = get_settings()
    with session_scope(settings.database_url) as session:
        job = session.get(Job, job_pk)
        if job is None or job.status == JobStatus.COMPLETED.value:
            return None
        if jobs.shards_open(session, job_pk=job_pk):
            return None
        delivery = delivery_of(session, job)
        with bind(delivery_id=job.delivery_id, job_pk=job_pk):
            results.store_counts(session, job=job)
            if job.status == JobStatus.DISPATCHED.value and jobs.transition(
                session,
                job=job,
                to=JobStatus.IN_PROGRESS,
                expect={JobStatus.DISPATCHED},
                source="report",
            ):
                send_callback(settings, job, delivery, "in_progress")
            conclusion = jobs.conclude(session, job=job)
            if job.failure_reason is None and not results.ran_count(session, job_pk=job_pk):
                reason = (
                    _no_test_reason(job)
                    if conclusion is Conclusion.FAILURE
                    else nothing_to_test(session, job=job)
                    if conclusion is Conclusion.SUCCESS
                    else None
                )
                if reason:
                    scheduling.set_failure(job, reason)
            if not jobs.transition(
                session,
                job=job,
                to=JobStatus.COMPLETED,
                expect={JobStatus.IN_PROGRESS},
                source="report",
                conclusion=conclusion,
            ):
                return None  # another report finished it
            results.update_stats(session, job=job)
            log.info("job reported", extra={"conclusion": conclusion.value})
            send_callback(settings, job, delivery, "completed")
            return conclusion.value
