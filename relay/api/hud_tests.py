"""``/api/v1/hud``, the tests and the downstreams: one test's history across upstream commits,
flaky tests, and each downstream's health against CRCR's L3 rules (the grid and the runs:
:mod:`relay.api.hud`). Lists are paged like every list of the API
(:mod:`relay.api.pagination`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel
from sqlalchemy.orm import Session

from relay.api.hud_health import DownstreamHealth, health_of
from relay.api.pagination import Page, PageParams, decode_cursor, page_of, page_params
from store import health as health_rows
from store import hud
from store.db import session_scope
from store.models import TestResult, utcnow
from store.paging import page_rows
from wire.values import Moment

router = APIRouter(prefix="/hud", tags=["hud"])


def _session(request: Request) -> Any:
    return session_scope(request.app.state.settings.database_url)


# ----------------------------------------------------------------------------- one test


class HistoryItem(BaseModel):
    job_id: int
    repo: str
    head_sha: str | None
    pr_number: int | None
    event_type: str | None
    dispatched_at: datetime
    outcome: str
    duration_s: float | None
    device_time_us: float | None
    spec_mode: str | None
    message: str | None
    page: str


def history_page(
    session: Session, test_id: str, repo: str | None, params: PageParams
) -> Page[HistoryItem]:
    after = int(decode_cursor(params.cursor)) if params.cursor is not None else None
    page = page_rows(
        session,
        hud.history_query(test_id, repo=repo),
        key=TestResult.id,
        limit=params.limit,
        offset=params.offset,
        after=after,
        scalars=False,
    )
    rows = page.rows
    items = [
        HistoryItem(
            job_id=j.id,
            repo=j.repo,
            head_sha=j.head_sha,
            pr_number=j.pr_number,
            event_type=j.event_type,
            dispatched_at=j.dispatched_at,
            outcome=r.outcome,
            duration_s=r.duration_s,
            device_time_us=r.device_time_us,
            spec_mode=r.spec_mode,
            message=r.message,
            page=f"/runs/{j.id}",
        )
        for r, j in rows
    ]
    next_key = rows[-1][0].id if page.more else None
    return page_of(items, total=page.total, params=params, next_key=next_key)


@router.get("/tests/history", response_model=Page[HistoryItem])
def get_history(
    request: Request,
    test_id: str = Query(min_length=1, max_length=500, description="the test's node id"),
    repo: str | None = Query(default=None, max_length=200),
    params: PageParams = Depends(page_params(default_limit=50, max_limit=500)),
) -> Page[HistoryItem]:
    """One test id across upstream commits, newest first: outcome, duration, simulated device
    time and spec mode in each job."""
    with _session(request) as session:
        return history_page(session, test_id, repo, params)


class Flaky(BaseModel):
    test_id: str
    commits: int  # upstream SHAs on which it both passed and failed
    passed: int
    failed: int
    last_sha: str
    last_at: datetime
    page: str


def flaky_page(
    session: Session,
    *,
    days: int,
    repo: str | None,
    params: PageParams,
    now: datetime | None = None,
) -> Page[Flaky]:
    since = (now or utcnow()) - timedelta(days=days)
    after = str(decode_cursor(params.cursor)) if params.cursor is not None else None
    items, total, next_key = hud.flaky(
        session, since=since, repo=repo, limit=params.limit, offset=params.offset, after=after
    )
    return page_of(
        [Flaky(**vars(f), page=f"/tests?id={f.test_id}") for f in items],
        total=total,
        params=params,
        next_key=next_key,
    )


@router.get("/flaky", response_model=Page[Flaky])
def get_flaky(
    request: Request,
    days: int = Query(default=14, ge=1, le=365, description="window, by job dispatch time"),
    repo: str | None = Query(default=None, max_length=200),
    params: PageParams = Depends(page_params(default_limit=50, max_limit=500)),
) -> Page[Flaky]:
    """Tests that both passed and failed on the same upstream SHA within the window."""
    with _session(request) as session:
        return flaky_page(session, days=days, repo=repo, params=params)


# ----------------------------------------------------------------------------- health


def aware(at: datetime) -> datetime:
    """A time in UTC (a naive one is taken as UTC)."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def health(
    session: Session, *, at: datetime | None = None, repo: str | None = None
) -> list[DownstreamHealth]:
    now = aware(at or utcnow())
    timings = health_rows.downstream_timings(
        session, now=now, days=14, repos=[repo] if repo is not None else None
    )
    return [health_of(d, now=now) for d in timings]


@router.get("/health", response_model=list[DownstreamHealth])
def get_health(
    request: Request,
    at: Moment | None = Query(default=None, description="evaluate at this time (default: now)"),
    repo: str | None = Query(default=None, max_length=200),
) -> list[DownstreamHealth]:
    """Each downstream's numbers over 7 and 14 days (average queue time, end-to-end P50, share
    over 3 h, timeout rate, job pass rate over latest attempts) and CRCR's L3 verdict."""
    with _session(request) as session:
        return health(session, at=at, repo=repo)
