"""Check runs on the upstream PR for L3 (when the PR carries ``ciflow/crcr/<device>``) and L4
(always) downstreams, named ``crcr/<repo>`` (``crcr/<repo>/<workflow>`` when the policy names
the workflow): created ``queued`` when the dispatch is sent, so a merge gate cannot pass before
the job starts, then updated in place from the job the callbacks drive (each transition marks
the update in its own transaction, :mod:`store.check_updates`; a worker sends it).

The creation and the updates are retried like the dispatch (backoff with jitter,
``Retry-After``), then dead: ``check_state`` and ``check_error`` on the dispatch, and
``check_update_state`` and ``check_update_error``. An L3 downstream whose
``crcr-demotion/<repo>`` pull request is open upstream gets no new check run (CRCR's freeze:
:mod:`fanout.demotion` records it); its dispatches still go out.

A green run proves nothing unless tests ran: ``success`` with no test counted is reported as
``neutral``; ``success`` with failed tests as ``failure``.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from config.settings import Settings
from fanout.github import GitHubApi, GitHubError
from fanout.role import policy_from_json
from store import check_updates, outbox
from store.db import session_scope
from store.models import CheckState, CheckUpdateState, Dispatch, Job, utcnow
from upstream.undertest import UpstreamUnderTest
from wire.crcr.allowlist import Level
from wire.github.events import CIFLOW_LABEL_PREFIX, UpstreamEvent, load_event

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
    summary = (
        f"{job.tests_passed} passed, {job.tests_failed} failed, "
        f"{job.tests_skipped} skipped of {job.tests_total}"
    )
    if job.failure_reason:  # it failed before its tests ran: why, first
        summary = f"{job.failure_reason}\n\n{summary}"
    body.update(
        status="completed",
        conclusion=conclusion,
        output={"title": f"{conclusion}{note}", "summary": summary + tested_line(job)},
    )
    return body


def tested_line(job: Job) -> str:
    """The check run's line on which PyTorch was tested: the downstream's summary, or the
    job's own ``upstream_under_test`` (a job of the in-process runner); empty when unknown."""
    tested = job.upstream_under_test or {}
    if "summary" in tested:
        return "\n" + str(tested["summary"])
    if "kind" in tested:
        return "\nupstream under test: " + UpstreamUnderTest.model_validate(tested).describe()
    return ""


@dataclass(frozen=True)
class CheckResult:
    state: str  # a CheckState (CheckUpdateState) value, or "not-due" when another sender has it
    detail: str = ""
    retry_in: float | None = None  # seconds until the next attempt (state pending)


@dataclass(frozen=True)
class Failure:
    """What a failed GitHub call leads to: a dead letter, or a retry ``wait`` seconds on."""

    dead: bool
    error: str
    wait: float = 0.0

    @property
    def next_attempt_at(self) -> datetime:
        return utcnow() + timedelta(seconds=self.wait)


def failure(settings: Settings, exc: GitHubError, *, attempts: int, rng: random.Random) -> Failure:
    """Refused (not retryable) or ``RELAY_DISPATCH_MAX_ATTEMPTS`` spent: dead; else backoff with
    jitter, or what ``Retry-After`` says."""
    if not exc.retryable or attempts >= settings.dispatch_max_attempts:
        why = "refused" if not exc.retryable else f"{attempts} attempts spent"
        return Failure(True, f"{why}: {exc}")
    wait = backoff(
        attempts,
        base=settings.dispatch_backoff_seconds,
        cap=settings.dispatch_backoff_max_seconds,
        rng=rng,
    )
    if exc.retry_after is not None:
        wait = exc.retry_after + rng.random() * min(1.0, exc.retry_after / 10 + 0.1)
    return Failure(False, str(exc), wait)


def backoff(attempt: int, *, base: float, cap: float, rng: random.Random) -> float:
    """Exponential backoff with full jitter in its upper half: ``[d/2, d]``, d = base * 2^(n-1)."""
    delay = min(cap, base * (2 ** max(0, attempt - 1)))
    return delay / 2 + rng.random() * delay / 2


def create_for_dispatch(
    settings: Settings, api: GitHubApi, pk: int, *, rng: random.Random | None = None
) -> CheckResult:
    """One attempt at creating dispatch ``pk``'s queued check run."""
    rng = rng or random.Random()
    lease = settings.outbox_claim_seconds
    with session_scope(settings.database_url) as session:
        if not outbox.claim_check(session, pk=pk, lease_seconds=lease):
            return CheckResult("not-due")
        dispatch = session.get(Dispatch, pk)
        assert dispatch is not None
        row, delivery = dispatch.downstream, dispatch.delivery
        attempts, repo, level = dispatch.check_attempts, row.repo, row.level
        frozen = level == Level.L3.value and row.demoted_since is not None
        workflow = policy_from_json(row.policy or {}).workflow
        event = load_event(delivery.normalized)

    def finish(state: CheckState, **kw: Any) -> None:
        with session_scope(settings.database_url) as session:
            outbox.finish_check(session, pk=pk, state=state, **kw)

    name = check_name(repo, workflow)
    if frozen:
        finish(CheckState.SUPPRESSED, error=f"crcr-demotion/{repo} is open: no new check run")
        log.info("check run %s held back: the demotion PR is open", name)
        return CheckResult(CheckState.SUPPRESSED.value)
    try:
        created = api.create_check_run(
            event.repo, queued_body(name=name, event=event, dispatch_pk=pk)
        )
    except GitHubError as exc:
        failed = failure(settings, exc, attempts=attempts, rng=rng)
        if failed.dead:
            finish(CheckState.DEAD, error=failed.error)
            log.warning("check run %s dead-lettered: %s", name, exc)
            return CheckResult(CheckState.DEAD.value, str(exc))
        finish(CheckState.PENDING, error=failed.error, next_attempt_at=failed.next_attempt_at)
        log.info("check run %s will be retried in %.1f s: %s", name, failed.wait, exc)
        return CheckResult(CheckState.PENDING.value, str(exc), retry_in=failed.wait)
    finish(CheckState.CREATED, check_run_id=int(created["id"]))
    return CheckResult(CheckState.CREATED.value)


def update_for_dispatch(
    settings: Settings, api: GitHubApi, pk: int, *, rng: random.Random | None = None
) -> CheckResult:
    """One attempt at bringing dispatch ``pk``'s check run up to date with the job its newest
    transition marked (:mod:`store.check_updates`): the job is read after the claim, so what is
    sent is never older than what was marked; a transition that came meanwhile is sent next."""
    rng = rng or random.Random()
    with session_scope(settings.database_url) as session:
        claimed = check_updates.claim(session, pk=pk, lease_seconds=settings.outbox_claim_seconds)
        if claimed is None:
            return CheckResult("not-due")
        job = session.get(Job, claimed.job_pk) if claimed.job_pk is not None else None
        dispatch = session.get(Dispatch, pk)
        assert dispatch is not None
        body = job_body(job) if job is not None else None
        upstream = (dispatch.delivery.repo if dispatch.delivery else None) or settings.upstream_repo

    def finish(state: CheckUpdateState, **kw: Any) -> str:
        with session_scope(settings.database_url) as session:
            return check_updates.finish(session, pk=pk, seq=claimed.seq, state=state, **kw)

    if body is None:  # the job is gone: nothing to show
        return CheckResult(finish(CheckUpdateState.DONE))
    try:
        api.update_check_run(upstream, claimed.check_run_id, body)
    except GitHubError as exc:
        failed = failure(settings, exc, attempts=claimed.attempts, rng=rng)
        if failed.dead:
            state = finish(CheckUpdateState.DEAD, error=failed.error)
            log.warning(
                "check run %s of dispatch %s not updated: %s",
                claimed.check_run_id,
                pk,
                failed.error,
            )
            return CheckResult(state, str(exc))
        state = finish(
            CheckUpdateState.PENDING, error=failed.error, next_attempt_at=failed.next_attempt_at
        )
        log.info(
            "check run update of dispatch %s will be retried in %.1f s: %s", pk, failed.wait, exc
        )
        return CheckResult(state, str(exc), retry_in=failed.wait)
    return CheckResult(finish(CheckUpdateState.DONE))
