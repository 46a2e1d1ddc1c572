"""The relay role's outbox over HTTP: dispatches to downstream repositories with their state,
attempts and last error (dead letters are ``?state=dead``), and an operator's retry of a dead
letter (``Authorization: Bearer <RELAY_OPERATOR_TOKEN>``)."""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from relay.api.pagination import (
    NO_NUL,
    Page,
    PageParams,
    page_params,
    paginate,
    reject_unknown_params,
)
from store import outbox
from store.db import session_scope
from store.models import Dispatch, DispatchState
from wire.values import Id

router = APIRouter(prefix="/api/v1", tags=["relay"], dependencies=[Depends(reject_unknown_params)])


def _public(row: Dispatch, repo: str, delivery_id: str) -> dict[str, Any]:
    def iso(value: Any) -> str | None:
        return value.isoformat() if value is not None else None

    return {
        "id": row.id,
        "delivery_id": delivery_id,
        "downstream": repo,
        "target": row.target,
        "state": row.state,
        "attempts": row.attempts,
        "http_status": row.http_status,
        "last_error": row.last_error,
        "created_at": iso(row.created_at),
        "next_attempt_at": iso(row.next_attempt_at),
        "sent_at": iso(row.sent_at),
        # L3/L4: the queued check run's creation (pending, created, suppressed, dead)
        "check_state": row.check_state,
        "check_attempts": row.check_attempts,
        "check_error": row.check_error,
        "check_run_id": row.check_run_id,
        # its updates from the job (pending, updating, done, dead): the number of job
        # transitions it has been told of, and the last failure
        "check_update_state": row.check_update_state,
        "check_update_seq": row.check_update_seq,
        "check_update_attempts": row.check_update_attempts,
        "check_update_error": row.check_update_error,
    }


def _public_rows(session: Session, rows: Sequence[Dispatch]) -> list[dict[str, Any]]:
    """The page's dispatches with their downstream's repo and delivery id (one query)."""
    names = outbox.names_of(session, pks=[row.id for row in rows])
    return [_public(row, *names[row.id]) for row in rows]


@router.get("/dispatches", response_model=Page[dict[str, Any]])
def list_dispatches(
    request: Request,
    state: DispatchState | None = Query(None, description="dead: the dead letters"),
    repo: str | None = Query(None, max_length=200, pattern=NO_NUL),
    params: PageParams = Depends(page_params(default_limit=100, max_limit=1000)),
) -> Page[dict[str, Any]]:
    """Dispatches newest first; ``?state=dead`` lists the dead letters."""
    query = outbox.dispatches_query(state=None if state is None else state.value, repo=repo)
    with session_scope(request.app.state.settings.database_url) as session:
        return paginate(
            session,
            query,
            key=Dispatch.id,
            params=params,
            public_rows=lambda rows: _public_rows(session, rows),
        )


def operator_refusal(request: Request) -> JSONResponse | None:
    """401 without credentials, 403 with wrong ones (or none configured), else None."""
    configured = request.app.state.settings.operator_token
    given = request.headers.get("authorization", "")
    if not given.startswith("Bearer ") or not given.removeprefix("Bearer ").strip():
        return JSONResponse(status_code=401, content={"error": "operator token required"})
    if configured is None:
        return JSONResponse(
            status_code=403, content={"error": "no RELAY_OPERATOR_TOKEN is configured"}
        )
    if not hmac.compare_digest(
        given.removeprefix("Bearer ").encode(), configured.get_secret_value().encode()
    ):
        return JSONResponse(status_code=403, content={"error": "operator token does not match"})
    return None


@router.post(
    "/dispatches/{dispatch_id}/retry",
    responses={401: {}, 403: {}, 409: {"description": "not a dead letter"}},
)
async def retry_dispatch(dispatch_id: Id, request: Request) -> JSONResponse:
    """Put a dead letter back into the outbox (sent by the next sweep): a dead dispatch, or
    the dead check run of a sent one."""
    refusal = operator_refusal(request)
    if refusal is not None:
        return refusal

    def retry() -> bool:
        with session_scope(request.app.state.settings.database_url) as session:
            return outbox.retry_dead(session, pk=dispatch_id)

    if not await run_in_threadpool(retry):
        return JSONResponse(
            status_code=409, content={"error": f"dispatch {dispatch_id} is not a dead letter"}
        )
    return JSONResponse(
        status_code=200, content={"ok": True, "id": dispatch_id, "state": "pending"}
    )
