"""`POST /github/callback`: a downstream reports a job (CRCR's callback action's body, schema
"1"), authenticated by its OIDC token (``Authorization: Bearer <JWT>``, RS256 against the
issuer's JWKS, CRCR's audience); the ``repository`` claim is who is calling.

Answers: 200 ``{"ok": true, "status": "in_progress"|"completed"|"duplicate"|"ignored"}``, 400
schema or no matching dispatch, 401 token missing or refused, 403 not allowlisted or a dispatch
token of someone else, 409 a conflicting transition, 413 over 1 MB, 429 over the rate limit.
"""

from __future__ import annotations

import json
import logging

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from fanout import callbacks
from fanout.oidc import OidcError, OidcVerifier
from relay.bodies import BUSY_RESPONSE, Busy, TooLarge, busy_answer, read_limited
from wire.values import json_problem, openapi_body

log = logging.getLogger("relay.callback")
router = APIRouter(tags=["crcr"])

MAX_CALLBACK_BYTES = 1024 * 1024


def verifier(request: Request) -> OidcVerifier:
    state = request.app.state
    found = getattr(state, "oidc_verifier", None)
    if found is None:
        settings = state.settings
        found = state.oidc_verifier = OidcVerifier(
            issuers=settings.oidc_issuers,
            audience=settings.oidc_audience,
            refresh_interval=settings.oidc_jwks_refresh_seconds,
            max_lifetime=settings.oidc_max_lifetime_seconds,
        )
    return found


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": message})


@router.post(
    "/github/callback",
    responses={
        400: {"description": "not a CRCR callback body, or no matching dispatch"},
        401: {"description": "OIDC token or dispatch token missing or refused"},
        403: {"description": "not allowlisted, or a dispatch token issued to another repository"},
        409: {"description": "a transition the job cannot make"},
        413: {"description": "body over 1 MB"},
        503: BUSY_RESPONSE,
        429: {"description": "over the callbacks-per-minute limit of the repository"},
    },
    openapi_extra=openapi_body(("Authorization", "Bearer <OIDC token>")),
)
async def github_callback(request: Request) -> JSONResponse:
    """A downstream's job report (in_progress, completed, or a nightly/periodic self-report)."""
    answer = await _callback(request)
    request.app.state.callback_counter.labels(str(answer.status_code)).inc()
    return answer


async def _callback(request: Request) -> JSONResponse:
    auth = request.headers.get("authorization", "")
    if not auth.startswith("Bearer ") or not auth.removeprefix("Bearer ").strip():
        return _error(401, "missing Authorization: Bearer <OIDC token>")
    try:  # at most the limit is read, before the token is verified
        body = await read_limited(
            request,
            MAX_CALLBACK_BYTES,
            budget=request.app.state.settings.max_bodies_in_flight_bytes,
        )
    except TooLarge:
        return _error(413, f"body exceeds {MAX_CALLBACK_BYTES} bytes")
    except Busy as exc:
        return busy_answer(exc)
    try:
        claims = await run_in_threadpool(verifier(request).verify, auth.removeprefix("Bearer "))
    except OidcError as exc:
        log.warning("callback refused: %s", exc)
        return _error(401, str(exc))
    try:
        raw = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return _error(400, "malformed JSON")
    if not isinstance(raw, dict):
        return _error(400, "the body must be a JSON object")
    problem = json_problem(raw)  # every string it holds may reach a column or a log
    if problem is not None:
        return _error(400, f"not a CRCR callback body: {problem}"[:300])
    repository = str(claims["repository"])
    role = request.app.state.relay_role
    downstream = role.registry.current().get(repository) if role is not None else None
    answer = await run_in_threadpool(
        callbacks.handle,
        raw,
        repository=repository,
        downstream=downstream,
        settings=request.app.state.settings,
        repository_id=claims.get("repository_id"),
    )
    # the L3/L4 check run follows the job: the transition's transaction marked its update, the
    # outbox publisher hands it to a worker (neither GitHub nor the broker is asked here)
    return JSONResponse(status_code=answer.status, content=answer.body)
