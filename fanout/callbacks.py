"""A downstream's callback (``POST /github/callback``), decided: who is calling (the OIDC
``repository`` claim), whether it may (allowlisted, L2 and up, under the rate limit, with a
dispatch token that matches when it carries one or when its level requires one), and which
transition of the job state machine it makes. Returns the HTTP status and body to answer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from config.settings import Settings
from fanout import dispatch_token as tokens
from fanout.model import PAYLOAD_KEY, AllowlistedDownstream
from store import callbacks as machine
from store import outbox
from store.db import session_scope
from wire.crcr.allowlist import Level
from wire.crcr.callback import CallbackBody
from wire.values import check_moment

log = logging.getLogger("fanout.callbacks")

SELF_REPORTS = ("nightly", "periodic")


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]


def _error(status: int, message: str) -> Answer:
    return Answer(status, {"error": message})


def _when(text: str | None) -> datetime:
    if text:
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
            return check_moment(moment if moment.tzinfo else moment.replace(tzinfo=UTC))
        except ValueError:
            pass
    return datetime.now(UTC)


def _schema_problem(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors()[:5]:
        where = ".".join(str(p) for p in e.get("loc", ()))
        parts.append(f"{where}: {e.get('msg')}")
    return "not a CRCR callback body: " + "; ".join(parts)


def handle(
    raw: Any,
    *,
    repository: str,
    downstream: AllowlistedDownstream | None,
    settings: Settings,
    repository_id: Any = None,
) -> Answer:
    """One callback from ``repository`` (the verified OIDC claims ``repository`` and
    ``repository_id``)."""
    refused = _caller_refused(repository, downstream, repository_id)
    if refused is not None:
        return refused
    assert downstream is not None
    body = _body(raw)
    if isinstance(body, Answer):
        return body
    with session_scope(settings.database_url) as session:
        count = machine.count_call(session, repo=repository)
    if count > settings.callback_rate_per_minute:
        return _error(429, f"more than {settings.callback_rate_per_minute} callbacks a minute")
    origin = _origin(raw, body, repository=repository, downstream=downstream, settings=settings)
    if isinstance(origin, Answer):
        return origin
    with session_scope(settings.database_url) as session:
        outcome, job_pk = machine.apply(
            session, key=_job_key(body, repository), report=_report(body, origin)
        )
    log.info("callback", extra={"repo": repository, "outcome": outcome.value, "job_pk": job_pk})
    if outcome is machine.CallbackEffect.CONFLICT:
        return _error(409, "the job already completed with another conclusion")
    if outcome is machine.CallbackEffect.DUPLICATE:
        return Answer(200, {"ok": True, "status": "duplicate"})
    if outcome is machine.CallbackEffect.STALE:
        return Answer(200, {"ok": True, "status": "completed", "stale": True})
    # the transition marked its check run's update (store.check_updates): a worker sends it
    return Answer(200, {"ok": True, "status": outcome.value})


def _caller_refused(
    repository: str, downstream: AllowlistedDownstream | None, repository_id: Any
) -> Answer | None:
    """The answer to a caller that may not report (not allowlisted, another repository id than
    the pinned one) or whose reports are ignored (L1), else None."""
    if downstream is None:
        return _error(403, f"repository {repository!r} is not in the allowlist")
    pinned = downstream.policy.repository_id
    if pinned is not None and str(repository_id) != str(pinned):
        return _error(403, f"the token's repository_id is not the one pinned for {repository}")
    if downstream.level is Level.L1:
        # CRCR: callers below L2 are acknowledged and ignored
        return Answer(200, {"ok": True, "status": "ignored"})
    return None


def _body(raw: Any) -> CallbackBody | Answer:
    """The CRCR callback body, or the 400 that says why ``raw`` is none."""
    try:
        body = CallbackBody.model_validate(raw)
    except ValidationError as exc:
        return _error(400, _schema_problem(exc))
    workflow = body.workflow
    if workflow.status == "completed" and workflow.conclusion is None:
        return _error(400, "a completed callback needs a conclusion")
    if workflow.status == "in_progress" and workflow.conclusion is not None:
        return _error(400, "an in_progress callback has no conclusion")
    return body


@dataclass(frozen=True)
class _Origin:
    """What the callback reports on: the dispatch it answers (none for a self-report), with the
    PR and head it was sent for."""

    dispatch_pk: int | None = None
    pr_number: int | None = None
    head_sha: str | None = None


def _origin(
    raw: Any,
    body: CallbackBody,
    *,
    repository: str,
    downstream: AllowlistedDownstream,
    settings: Settings,
) -> _Origin | Answer:
    """The dispatch a callback answers (by its dispatch token, or by delivery and repository
    when it carries none and its level allows that), or a self-report's head; else the 4xx."""
    extra = raw.get(PAYLOAD_KEY) if isinstance(raw, dict) else None
    signed = extra.get("dispatch_token") if isinstance(extra, dict) else None
    if body.event_type in SELF_REPORTS:
        if body.workflow.status != "completed":
            return _error(400, f"a {body.event_type} self-report can only be completed")
        head_sha = body.payload.get("head_sha")
        return _Origin(head_sha=head_sha if isinstance(head_sha, str) else None)
    if signed is None and downstream.level in (Level.L3, Level.L4):
        return _error(401, f"a dispatch token is required at {downstream.level.value}")
    with session_scope(settings.database_url) as session:
        if signed is not None:
            return _signed_origin(session, signed, body, repository=repository, settings=settings)
        dispatch = outbox.sent_for(session, delivery_id=body.delivery_id, repo=repository)
        if dispatch is None:
            return _error(400, f"no dispatch of delivery {body.delivery_id!r} to {repository}")
        delivery = dispatch.delivery
        return _Origin(dispatch.id, delivery.pr_number, delivery.head_sha)


def _signed_origin(
    session: Session, signed: Any, body: CallbackBody, *, repository: str, settings: Settings
) -> _Origin | Answer:
    """The dispatch a dispatch token names, bound to the reporting run on first use."""
    if not isinstance(signed, str):
        return _error(401, "the dispatch token is not a string")
    try:
        claims = tokens.verify(signed, secret=settings.dispatch_token_secret.get_secret_value())
    except tokens.DispatchTokenError as exc:
        return _error(401, str(exc))
    if claims.repo != repository:
        return _error(403, f"the dispatch token was issued to {claims.repo}, not {repository}")
    if claims.delivery_id != body.delivery_id:
        return _error(403, "the dispatch token is for another delivery")
    dispatch = outbox.by_nonce(session, nonce=claims.nonce)
    if dispatch is None:
        return _error(400, "no dispatch matches the dispatch token")
    run_id = body.workflow.run_id
    if not machine.bind_nonce(session, nonce=claims.nonce, repo=repository, run_id=run_id):
        return _error(403, "the dispatch token was already used by another run")
    return _Origin(dispatch.id, claims.pr_number, claims.head_sha)


def _job_key(body: CallbackBody, repository: str) -> machine.JobKey:
    workflow = body.workflow
    return machine.JobKey(
        delivery_id=body.delivery_id[:100],
        repo=repository,
        run_id=workflow.run_id[:50],
        run_attempt=workflow.run_attempt[:20],
        job_name=workflow.job_name[:200],
    )


def _report(body: CallbackBody, origin: _Origin) -> machine.Report:
    """The state machine's report of the callback (times, conclusion, counts, links)."""
    workflow = body.workflow
    at = _when(workflow.started_at if workflow.status == "in_progress" else workflow.completed_at)
    return machine.Report(
        status=workflow.status,
        conclusion=workflow.conclusion,
        at=at,
        event_type=body.event_type[:50],
        workflow_name=workflow.name,
        url=workflow.url,
        check_run_id=workflow.check_run_id,
        head_sha=origin.head_sha[:64] if origin.head_sha else None,
        pr_number=origin.pr_number,
        dispatch_pk=origin.dispatch_pk,
        counts=workflow.test_results.model_dump() if workflow.test_results else None,
        artifact_url=workflow.artifact_url,
        summary=workflow.summary,
        detail={"run_url": workflow.url[:500]},
        failure_reason=_failure_reason(workflow),
    )


def _failure_reason(workflow: Any) -> str | None:
    """Why a downstream's job failed before its tests ran: the first line of a ``completed``
    failure's summary, unless that line only says what was tested."""
    if workflow.status != "completed" or workflow.conclusion != "failure" or not workflow.summary:
        return None
    first = workflow.summary.splitlines()[0]
    return None if first.startswith("upstream under test:") else first
