"""`POST /github/webhook`: verify, store the raw delivery once, answer. Nothing else.

One durable write per delivery: the delivery row and, for the relay role, its dispatch rows (the
outbox), in one transaction. Nothing here talks to the broker or to GitHub: the outbox publisher
(``workers.publish``) hands the stored delivery to the workers within a fraction of a second, and
a broker outage only delays that.

Answers (CRCR-compatible, see reference/crcr.md): 400 missing signature / delivery id / bad JSON
(or JSON nested deeper than 64 levels), 401 bad signature, 413 body over the limit, 200
``{"ignored": true}`` for events and repositories we do not serve, 200 ``{"duplicate": true}``
for a delivery already stored, 202 when stored, 422 ``{"rejected": true}`` for valid
JSON that is not the shape of its event (a push without ``ref``, a PR number past INTEGER, a
string its column cannot hold): stored, with the reason, as ``rejected`` and never processed.
Every refusal is one line. The body is parsed once, here: the stored delivery carries its
typed upstream event (and the upstream payload CRCR forwards verbatim); no later stage reads the
raw body, kept for audit and replay (tests/test_architecture.py checks).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
from dataclasses import dataclass, replace
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.routing import Route

from config.logs import bind
from relay.bodies import BUSY_RESPONSE, Busy, TooLarge, busy_answer, read_limited
from store import deliveries
from store.deliveries import DeliveryCreate, Stored
from store.group_commit import GroupCommit
from wire.github import signature
from wire.github.events import (
    LIMITS,
    MAX_DELIVERY_ID,
    SUPPORTED_EVENTS,
    Envelope,
    EventError,
    UpstreamEvent,
    body_json,
    normalize_envelope,
    open_envelope,
)
from wire.values import nonfinite_at, openapi_body

log = logging.getLogger("relay.ingress")
#: documents the endpoint (its OpenAPI entry); :func:`install` serves it
router = APIRouter(tags=["github"])
#: the path GitHub posts to
PATH = "/github/webhook"


def install(app: FastAPI) -> None:
    """Add the webhook to ``app``: its OpenAPI entry from :data:`router`, and a plain Starlette
    route ahead of every other that serves it. The endpoint takes the Request and answers a
    Response itself, so FastAPI's per-request machinery (dependency solving, its exit stacks,
    the matching through included routers) is work the hot path does not need (what it
    saves: docs/benchmarks.md)."""
    app.include_router(router)
    app.router.routes.insert(0, Route(PATH, github_webhook, methods=["POST"]))


def _answer(status: int, **body: Any) -> JSONResponse:
    return JSONResponse(status_code=status, content=body)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": message})


@router.post(
    PATH,
    status_code=202,
    responses={
        200: {"description": "ping, ignored event or repository, or duplicate delivery"},
        400: {"description": "missing signature or delivery id, or malformed JSON"},
        401: {"description": "signature does not match any configured secret"},
        413: {"description": "body larger than RELAY_MAX_BODY_BYTES"},
        503: BUSY_RESPONSE,
        422: {"description": "valid JSON, not the shape of its event: stored as rejected"},
    },
    openapi_extra=openapi_body(
        ("X-GitHub-Event", "the event"),
        ("X-GitHub-Delivery", "the delivery's id"),
        ("X-Hub-Signature-256", "sha256=<HMAC of the raw body>"),
        form=True,
    ),
)
async def github_webhook(request: Request) -> JSONResponse:
    """Receive one GitHub webhook delivery (or a CRCR repository_dispatch)."""
    settings = request.app.state.settings
    # headers arrive as latin-1: a delivery id is kept as the UTF-8 it was sent in ("" when
    # it is not UTF-8, refused below)
    delivery_id = _utf8(request.headers.get("x-github-delivery", ""))
    event = request.headers.get("x-github-event", "")
    with bind(delivery_id=delivery_id or None, github_event=event or None):
        try:
            body = await read_limited(
                request, settings.max_body_bytes, budget=settings.max_bodies_in_flight_bytes
            )
        except TooLarge:
            log.warning("delivery refused: body over %d bytes", settings.max_body_bytes)
            return _error(413, f"body exceeds the limit of {settings.max_body_bytes} bytes")
        except Busy as exc:
            log.warning("delivery refused: %s", exc)
            return busy_answer(exc)
        sig = request.headers.get("x-hub-signature-256")
        if not sig:
            return _error(400, "missing X-Hub-Signature-256 header")
        if not signature.verify(settings.secret_values(), body, sig):
            log.warning("delivery refused: bad signature")
            return _error(401, "signature does not match")
        parsed = _parse(body)
        if isinstance(parsed, str):
            log.info("delivery refused: %s", parsed)
            return _error(400, parsed)
        payload = parsed.payload
        if event == "ping":
            hook_id = payload.get("hook_id")
            if isinstance(hook_id, bool) or not isinstance(hook_id, int | str):
                hook_id = None
            return _answer(200, ok=True, ping=True, hook_id=hook_id)
        problem = _header_problem(event, delivery_id)
        if problem is not None or delivery_id is None:
            return _error(400, problem or "X-GitHub-Delivery is not UTF-8")
        hook_id = request.headers.get("x-github-hook-id")
        classified = _classify(
            event=event,
            parsed=parsed,
            body=body,
            delivery_id=delivery_id,
            hook_id=hook_id if hook_id and len(hook_id) <= LIMITS["hook_id"] else None,
            upstream=settings.upstream_repo,
        )
        if isinstance(classified, str):
            log.info("delivery ignored: %s", classified)
            return _answer(200, ignored=True, reason=classified)
        data, typed = classified
        data = deliveries.fit(data)
        role = getattr(request.app.state, "relay_role", None)
        outbox = None
        if role is not None and typed is not None and data.normalized is not None:
            outbox = role.outbox_of(typed)
        outcome, pk = await _writer(request).store(data, outbox)
        if data.error is not None:
            # valid JSON, not the shape of its event: stored (nothing is lost) as rejected
            log.warning("delivery rejected: %s", data.error, extra={"delivery_pk": pk})
            return _answer(
                422,
                error=f"not a valid {data.event} event: {data.error}",
                rejected=True,
                delivery_id=delivery_id,
                duplicate=outcome is Stored.DUPLICATE,
            )
        if outcome is Stored.DUPLICATE:
            log.info("duplicate delivery", extra={"delivery_pk": pk})
            return _answer(200, duplicate=True, delivery_id=delivery_id)
        log.info("delivery stored", extra={"delivery_pk": pk, "outcome": outcome.value})
        return _answer(
            202,
            accepted=True,
            delivery_id=delivery_id,
            redelivery=outcome is Stored.REDELIVERY,
        )


def _header_problem(event: str, delivery_id: str | None) -> str | None:
    """Why a delivery's headers are refused (None: they are not); ``delivery_id`` None is not
    UTF-8."""
    if not event:
        return "missing X-GitHub-Event header"
    if delivery_id == "":
        return "missing X-GitHub-Delivery header"
    if delivery_id is None or len(delivery_id) > MAX_DELIVERY_ID or not delivery_id.isprintable():
        return f"X-GitHub-Delivery must be at most {MAX_DELIVERY_ID} printable characters"
    return None


#: how deeply a body's JSON may nest (GitHub's payloads nest about 8 levels, a CRCR dispatch
#: two more); deeper bodies are refused before anything walks them
MAX_JSON_DEPTH = 64
#: the longest reason an answer quotes from a payload
MAX_REASON = 300


@dataclass(frozen=True)
class _Parsed:
    payload: dict[str, Any]
    json: bytes  # the JSON as it was signed (a form's ``payload=`` decoded)
    finite: bool  # no NaN or infinity anywhere (Python's parser takes them; JSON cannot hold them)


def _parse(raw_body: bytes) -> _Parsed | str:
    """The body (JSON, or form-encoded with the JSON in ``payload=``) as a JSON object, or the
    one-line reason it is refused."""
    try:
        body = body_json(raw_body)
    except EventError as exc:
        return _one_line(str(exc))
    nonfinite: list[str] = []

    def number(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            nonfinite.append(text)
        return value

    def constant(text: str) -> float:
        nonfinite.append(text)
        return float(text)

    try:
        payload = json.loads(body, parse_float=number, parse_constant=constant)
    except RecursionError:
        return f"malformed JSON: nested deeper than {MAX_JSON_DEPTH} levels"
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, int digit limit
        return _one_line(f"malformed JSON: {exc}")
    if not isinstance(payload, dict):
        return "malformed JSON: the body must be a JSON object"
    # a body with no more brackets than the limit cannot nest deeper (brackets in strings only
    # make the count larger): the walk is for the rest
    if body.count(b"{") + body.count(b"[") > MAX_JSON_DEPTH and _depth_exceeds(
        payload, MAX_JSON_DEPTH
    ):
        return f"malformed JSON: nested deeper than {MAX_JSON_DEPTH} levels"
    return _Parsed(payload, body, finite=not nonfinite)


def _payload_json(parsed: _Parsed, envelope: Envelope) -> str:
    """The upstream payload's JSON text to store: the body's own when the payload is the body
    (not serialized again), else the payload serialized (a CRCR dispatch's inner payload)."""
    if envelope.payload is parsed.payload:
        try:
            text = parsed.json.decode("utf-8")
        except UnicodeDecodeError:  # JSON in UTF-16 or UTF-32, which Python's parser takes
            text = ""
        if text and not text.startswith("\ufeff"):
            return text
    return json.dumps(envelope.payload)


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` containers deep (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values() if isinstance(v, dict | list))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item if isinstance(v, dict | list))
    return False


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_REASON else flat[: MAX_REASON - 3] + "..."


def _writer(request: Request) -> GroupCommit:
    """The app's group-commit writer (one per app and database, started on first use; one
    for a database the app no longer uses is closed once it stored what it was given)."""
    state = request.app.state
    writer: GroupCommit | None = getattr(state, "group_commit", None)
    if writer is None or writer.url != state.settings.database_url:
        if writer is not None:  # after the hand-over of its deliveries, queued before this
            asyncio.get_running_loop().call_soon(functools.partial(writer.close, wait=False))
        writer = state.group_commit = GroupCommit(state.settings.database_url)
    return writer


def close_writer(app: FastAPI) -> None:
    """Stop the app's group-commit writer once what it was given is stored (at shutdown)."""
    writer: GroupCommit | None = getattr(app.state, "group_commit", None)
    if writer is not None:
        app.state.group_commit = None
        writer.close()


def _classify(
    *,
    event: str,
    parsed: _Parsed,
    body: bytes,
    delivery_id: str,
    hook_id: str | None,
    upstream: str,
) -> tuple[DeliveryCreate, UpstreamEvent | None] | str:
    """The row to store (with the typed event, None when the payload is not its event's shape:
    stored rejected), or the reason the delivery is ignored."""
    try:
        envelope = open_envelope(event, parsed.payload)
    except EventError as exc:
        return _one_line(str(exc))
    if envelope.event not in SUPPORTED_EVENTS:
        return _one_line(f"event {envelope.event[:60]!r} is not handled")
    if envelope.repo != upstream:
        repo = envelope.repo[:200] if envelope.repo else envelope.repo
        return _one_line(f"repository {repo!r} is not the configured upstream {upstream!r}")
    data = DeliveryCreate(
        delivery_id=delivery_id,
        event=envelope.event,
        action=_str(envelope.payload.get("action")),
        repo=envelope.repo,
        raw_body=body,
        source=envelope.source,
        upstream_delivery_id=envelope.upstream_delivery_id,
        hook_id=hook_id,
    )
    try:
        typed = normalize_envelope(envelope, delivery_id=delivery_id)
    except EventError as exc:
        # stored anyway (nothing is lost), as rejected with the reason
        return replace(data, error=_one_line(str(exc))), None
    except ValueError as exc:  # pydantic: a value out of range
        return replace(data, error=_one_line(_validation_reason(exc))), None
    # Python's parser takes NaN and infinities, which the stored payload (JSON) cannot hold
    where = None if parsed.finite else nonfinite_at(envelope.payload)
    if where is not None:
        return replace(data, error=_one_line(f"payload's {where} is not a finite number")), None
    stored = replace(
        data,
        action=typed.action,
        upstream_delivery_id=typed.upstream_delivery_id,
        normalized=typed.model_dump(mode="json"),
        upstream_payload=_payload_json(parsed, envelope),
        head_sha=typed.head_sha,
        base_sha=typed.base_sha or typed.before_sha,
        pr_number=typed.pr_number,
    )
    return stored, typed


def _validation_reason(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        return "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in errors()
        )
    return str(exc)


def _utf8(header: str) -> str | None:
    """A header's value as the UTF-8 it was sent in (None: not UTF-8)."""
    try:
        return header.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None
