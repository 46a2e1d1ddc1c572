"""Check runs on the upstream PR for L3 (when the PR carries ``ciflow/crcr/<device>``) and L4
(always) downstreams, named ``crcr/<repo>`` (``crcr/<repo>/<workflow>`` when the policy names
the workflow): created ``queued`` when the dispatch is sent, so a merge gate cannot pass before
the job starts, then updated in place from the job the callbacks drive.

A green run proves nothing unless tests ran: ``success`` with no test counted is reported as
``neutral``; ``success`` with failed tests as ``failure``.
"""

from __future__ import annotations

import logging
from typing import Any

from fanout.github import GitHubApi
from store.db import session_scope
from store.models import Dispatch, Downstream, Job
from store.settings import Settings
from wire.crcr.allowlist import Level
from wire.github.events import CIFLOW_LABEL_PREFIX, UpstreamEvent

log = logging.getLogger("fanout.checks")


def wants_check(level: str, device: str | None, event: UpstreamEvent) -> bool:
    if event.head_sha is None or event.event not in ("pull_request", "check_run", "check_suite"):
        return False
    if level == Level.L4.value:
        return True
    return level == Level.L3.value and f"{CIFLOW_LABEL_PREFIX}{device}" in event.labels


def check_name(repo: str, workflow: str | None) -> str:
    return f"crcr/{repo}/{workflow}" if workflow else f"crcr/{repo}"


def queued_body(*, name: str, event: UpstreamEvent, dispatch_pk: int) -> dict[str, Any]:
    return {
        "name": name,
        "head_sha": event.head_sha,
        "status": "queued",
        "external_id": f"dispatch-{dispatch_pk}:{event.pr_number or 0}",
        "output": {
            "title": "dispatched, waiting for the downstream to start",
            "summary": f"Upstream delivery {event.delivery_id} was dispatched.",
        },
    }


def job_body(job: Job) -> dict[str, Any]:
    """The check run's fields for the job as it stands."""
    body: dict[str, Any] = {"external_id": f"{job.run_id}:{job.pr_number or 0}"}
    if job.url:
        body["details_url"] = job.url
    if job.status != "completed":
        body["status"] = "in_progress"
        body["output"] = {"title": "running", "summary": f"{job.workflow_name} / {job.job_name}"}
        return body
    conclusion = job.conclusion or "failure"
    note = ""
    if conclusion == "success" and job.tests_failed:
        conclusion, note = "failure", " (success reported with failed tests)"
    elif conclusion == "success" and not job.tests_total:
        conclusion, note = "neutral", " (success reported, but no test ran)"
    body.update(
        status="completed",
        conclusion=conclusion,
        output={
            "title": f"{conclusion}{note}",
            "summary": (
                f"{job.tests_passed} passed, {job.tests_failed} failed, "
                f"{job.tests_skipped} skipped of {job.tests_total}"
            ),
        },
    )
    return body


def update_for_job(settings: Settings, api: GitHubApi, job_pk: int) -> bool:
    """Bring the dispatch's check run up to date with the job (False: it has none)."""
    with session_scope(settings.database_url) as session:
        job = session.get(Job, job_pk)
        if job is None or job.dispatch_pk is None:
            return False
        dispatch = session.get(Dispatch, job.dispatch_pk)
        if dispatch is None or dispatch.check_run_id is None:
            return False
        downstream = session.get(Downstream, dispatch.downstream_pk)
        body, check_run_id = job_body(job), dispatch.check_run_id
        upstream = (dispatch.delivery.repo or settings.upstream_repo) if dispatch.delivery else None
    assert downstream is not None
    api.update_check_run(upstream or settings.upstream_repo, check_run_id, body)
    return True
