"""`POST /api/crcr/results`: this service as the HUD of a deployed CRCR relay. Takes the relay's
``{trusted, untrusted}`` envelope with the HUD's bot token (``x-hud-internal-bot: <token>`` or
``Authorization: Bearer <token>``, RELAY_HUD_BOT_TOKEN), at most 2 MB, and stores one row per
job with its test counts, failed tests and artifact URL. Identity comes from ``trusted`` only.
"""

from __future__ import annotations

import hmac
import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from relay.bodies import BUSY_RESPONSE, Busy, TooLarge, busy_answer, read_limited
from store import crcr_results
from store.db import session_scope
from wire.values import MAX_INT, json_problem, openapi_body

router = APIRouter(tags=["crcr"])

MAX_ENVELOPE_BYTES = 2 * 1024 * 1024
MAX_FAILED_TESTS = 2000


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": message})


def _bot_refusal(request: Request) -> JSONResponse | None:
    given = request.headers.get("x-hud-internal-bot") or ""
    auth = request.headers.get("authorization", "")
    if not given and auth.startswith("Bearer "):
        given = auth.removeprefix("Bearer ").strip()
    if not given:
        return _error(401, "HUD bot token required (x-hud-internal-bot)")
    configured = request.app.state.settings.hud_bot_token
    if configured is None:
        return _error(403, "no RELAY_HUD_BOT_TOKEN is configured")
    if not hmac.compare_digest(given.encode(), configured.get_secret_value().encode()):
        return _error(403, "HUD bot token does not match")
    return None


def _str(value: Any, width: int) -> str | None:
    return value[:width] if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _range_problem(named: dict[str, Any]) -> str | None:
    """The first of ``named`` (where -> value) that is an integer past its INTEGER column."""
    for where, value in named.items():
        number = _int(value)
        if number is not None and not 0 <= number <= MAX_INT:
            return f"{where} is out of range (0 to {MAX_INT})"
    return None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def row_of(envelope: dict[str, Any]) -> tuple[str, dict[str, Any]] | str:
    """(row key, column values) of an envelope, or the one-line reason it is refused."""
    trusted, untrusted = envelope.get("trusted"), envelope.get("untrusted")
    if not isinstance(trusted, dict) or not isinstance(untrusted, dict):
        return "the envelope needs objects 'trusted' and 'untrusted'"
    repo = trusted.get("verified_repo")
    if not isinstance(repo, str) or "/" not in repo or len(repo) > 200:
        return "trusted.verified_repo must be an owner/name repository"
    body = untrusted.get("callback_payload")
    if not isinstance(body, dict) or not isinstance(body.get("workflow"), dict):
        return "untrusted.callback_payload must be a callback body with a workflow"
    workflow = body["workflow"]
    delivery_id = _str(body.get("delivery_id"), 100)
    name, job = _str(workflow.get("name"), 200), _str(workflow.get("job_name"), 200)
    run_id, attempt = workflow.get("run_id"), workflow.get("run_attempt")
    check_run_id = _str(workflow.get("check_run_id"), 100) or f"{run_id}-{attempt}"
    if not delivery_id or not name or not job:
        return "callback_payload needs delivery_id, workflow.name and workflow.job_name"
    payload = body.get("payload") if isinstance(body.get("payload"), dict) else {}
    assert isinstance(payload, dict)
    pr = payload.get("pull_request") if isinstance(payload.get("pull_request"), dict) else {}
    assert isinstance(pr, dict)
    head = pr.get("head") if isinstance(pr.get("head"), dict) else {}
    assert isinstance(head, dict)
    counts = workflow.get("test_results") if isinstance(workflow.get("test_results"), dict) else {}
    assert isinstance(counts, dict)
    metrics = trusted.get("ci_metrics") if isinstance(trusted.get("ci_metrics"), dict) else {}
    assert isinstance(metrics, dict)
    problem = _range_problem(
        {
            f"workflow.test_results.{k}": counts.get(k)
            for k in ("passed", "failed", "skipped", "total")
        }
        | {"payload.pull_request.number": pr.get("number"), "payload.number": payload.get("number")}
    )
    if problem is not None:
        return problem
    failed = workflow.get("failed_tests")
    failed_tests = (
        [str(t)[:500] for t in failed[:MAX_FAILED_TESTS]] if isinstance(failed, list) else None
    )
    upstream = payload.get("repository") if isinstance(payload.get("repository"), dict) else {}
    assert isinstance(upstream, dict)
    values: dict[str, Any] = {
        "downstream_repo": repo,
        "downstream_level": _str(trusted.get("downstream_repo_level"), 2),
        "upstream_repo": _str(upstream.get("full_name"), 200),
        "pr_number": _int(pr.get("number")) or _int(payload.get("number")) or 0,
        "head_sha": _str(head.get("sha"), 64)
        or _str(payload.get("after"), 64)
        or _str(payload.get("head_sha"), 64),
        "delivery_id": delivery_id,
        "event_type": _str(body.get("event_type"), 50),
        "workflow_name": name,
        "job_name": job,
        "run_id": str(run_id)[:50] if run_id is not None else None,
        "run_attempt": str(attempt)[:20] if attempt is not None else None,
        "check_run_id": check_run_id,
        "status": _str(workflow.get("status"), 20),
        "conclusion": _str(workflow.get("conclusion"), 20),
        "queue_time": _num(metrics.get("queue_time")),
        "execution_time": _num(metrics.get("execution_time")),
        "started_at": _str(workflow.get("started_at"), 40),
        "completed_at": _str(workflow.get("completed_at"), 40),
        "tests_passed": _int(counts.get("passed")),
        "tests_failed": _int(counts.get("failed")),
        "tests_skipped": _int(counts.get("skipped")),
        "tests_total": _int(counts.get("total")),
        "failed_tests": failed_tests,
        "artifact_url": _str(workflow.get("artifact_url"), 500),
    }
    return f"{repo}/{delivery_id}/{name}/{job}/{check_run_id}", values


@router.post(
    "/api/crcr/results",
    responses={
        400: {"description": "not a relay envelope"},
        401: {"description": "no bot token"},
        403: {"description": "wrong bot token"},
        413: {"description": "over 2 MB"},
        503: BUSY_RESPONSE,
    },
    openapi_extra=openapi_body(
        ("x-hud-internal-bot", "the HUD bot token"), ("Authorization", "Bearer <the HUD bot token>")
    ),
)
async def crcr_results_ingest(request: Request) -> JSONResponse:
    """Store one relay -> HUD envelope."""
    refusal = _bot_refusal(request)
    if refusal is not None:
        return refusal
    try:  # at most the limit is read, streaming
        body = await read_limited(
            request,
            MAX_ENVELOPE_BYTES,
            budget=request.app.state.settings.max_bodies_in_flight_bytes,
        )
    except TooLarge:
        return _error(413, f"body exceeds {MAX_ENVELOPE_BYTES} bytes")
    except Busy as exc:
        return busy_answer(exc)
    try:
        envelope = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return _error(400, "malformed JSON")
    if not isinstance(envelope, dict):
        return _error(400, "the body must be a JSON object")
    problem = json_problem(envelope)  # every string it holds may reach a column or a log
    if problem is not None:
        return _error(400, problem[:300])
    parsed = row_of(envelope)
    if isinstance(parsed, str):
        return _error(400, parsed)
    key, values = parsed

    def store() -> tuple[int, bool]:
        with session_scope(request.app.state.settings.database_url) as session:
            return crcr_results.upsert(session, row_key=key, values=values)

    pk, created = await run_in_threadpool(store)
    return JSONResponse(
        status_code=201 if created else 200, content={"ok": True, "id": pk, "key": key}
    )
