"""The pages a maintainer lives in: the overview (``/``), the commit x job grid (``/grid``), one
run (``/runs/{id}``), one test (``/tests?id=``), flaky tests (``/flaky``) and the downstreams'
health (``/downstreams``). Each reads the same functions as its ``/api/v1/hud`` endpoint."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, PlainTextResponse

from relay.api import hud as api
from relay.api import hud_tests as tests_api
from relay.api.jobs import upstream_under_test
from relay.web import charts
from relay.web.authoring import spec_decision
from relay.web.render import asset, page_params, paging, render
from store import health as health_rows
from store import hud, results
from store import jobs as job_rows
from store.db import session_scope
from store.models import Job, TestResult, utcnow
from store.outcomes import Outcome
from wire.values import MAX_INT, Id, check_moment

router = APIRouter()

EMPTY_HINT = "relay submit --example pull_request.opened"


def _session(request: Request) -> Any:
    return session_scope(request.app.state.settings.database_url)


@router.get("/hud/assets/{name}")
def get_asset(name: str) -> FileResponse:
    return asset(name)


@router.get("/", response_class=HTMLResponse)
def overview(request: Request) -> HTMLResponse:
    """Downstreams with level and health verdict, what runs now, the latest results."""
    with _session(request) as session:
        jobs = job_rows.job_count(session)
        health = tests_api.health(session)
        running = [api.progress(session, j) for j in hud.running_jobs(session)]
        running_jobs = {j.id: j for j in hud.running_jobs(session)}
        recent = hud.recent_jobs(session, limit=10)
        grid = api.grid_page(session, page_params(request, limit=8), hud.GridFilters())
    return render(
        request,
        "overview.html",
        title="Overview",
        jobs=jobs,
        health=health,
        running=running,
        running_jobs=running_jobs,
        recent=recent,
        grid=grid,
        empty_hint=EMPTY_HINT,
    )


@router.get("/grid", response_class=HTMLResponse)
def grid(
    request: Request,
    repo: str | None = Query(default=None, max_length=200),
    branch: str | None = Query(default=None, max_length=200),
    event: str | None = Query(default=None, max_length=50),
    pr: str | None = Query(default=None, max_length=12),
    offset: int = Query(default=0, ge=0, le=10**9),
    limit: int = Query(default=50, ge=1, le=500),
) -> HTMLResponse:
    """Upstream commits down, jobs across; filters and pages in the URL."""
    errors = []
    event_value = None
    if event:
        try:
            event_value = api.EventType(event).value
        except ValueError:
            errors.append(f"unknown event type {event!r}")
    pr_number = None
    if pr:
        if pr.isascii() and pr.isdigit() and int(pr) <= MAX_INT:
            pr_number = int(pr)
        else:
            errors.append(f"PR must be a number, not {pr!r}")
    filters = hud.GridFilters(
        repo=repo or None, branch=branch or None, event=event_value, pr=pr_number
    )
    with _session(request) as session:
        page = api.grid_page(session, page_params(request, limit=limit, offset=offset), filters)
        choices = hud.grid_choices(session)
    return render(
        request,
        "grid.html",
        status_code=422 if errors else 200,
        title="Commits",
        page=page,
        paging=paging(request, page),
        choices=choices,
        filters=filters,
        errors=errors,
        events=[e.value for e in api.EventType],
        empty_hint=EMPTY_HINT,
    )


@router.get("/runs/{job_id}", response_class=HTMLResponse)
def run(
    request: Request,
    job_id: Id,
    outcome: str | None = Query(default=None, max_length=20),
    suite: str | None = Query(default=None, max_length=200),
    op: str | None = Query(default=None, max_length=200),
    tag: str | None = Query(default=None, max_length=100),
    mode: str | None = Query(default=None, max_length=30),
    offset: int = Query(default=0, ge=0, le=10**9),
    limit: int = Query(default=100, ge=1, le=1000),
) -> HTMLResponse:
    """One job: funnel, why each test was chosen, what was cut, shards (live), failures with
    the command that reproduces them, every result under filters."""
    errors = []
    if outcome and outcome not in {o.value for o in Outcome}:
        errors.append(f"unknown outcome {outcome!r}")
        outcome = None
    if mode and mode not in {m.value for m in api.SpecMode}:
        errors.append(f"unknown spec mode {mode!r}")
        mode = None
    filters = hud.ResultFilters(
        outcome=outcome or None,
        suite=suite or None,
        op=op or None,
        tag=tag or None,
        mode=mode or None,
    )
    with _session(request) as session:
        try:
            view = api.run_view(session, job_id)
        except HTTPException:
            return render(
                request,
                "missing.html",
                status_code=404,
                title="No such run",
                what=f"There is no job {job_id}.",
            )
        failures = api.results_page(
            session, job_id, hud.ResultFilters(failing=True), page_params(request, limit=50)
        )
        results = api.results_page(
            session, job_id, filters, page_params(request, limit=limit, offset=offset)
        )
        facets = hud.facets(session, job_pk=job_id)
        durations = hud.durations(session, job_pk=job_id)
        plan = api.plan_view(session, job_id)
        job_row = session.get(Job, job_id)
        tested = upstream_under_test(job_row.upstream_under_test if job_row else None)
        selected: list[Any] = hud.selection_tests(session, job_pk=job_id, kind="selected", limit=50)
        cut: list[Any] = hud.selection_tests(session, job_pk=job_id, kind="cut", limit=50)
        removed: list[Any] = hud.selection_tests(session, job_pk=job_id, kind="removed", limit=20)
        # plans stored before their variants became rows carry them inline
        selected, cut, removed = (
            selected or plan.selected[:50],
            cut or plan.cut[:50],
            removed or plan.removed[:20],
        )
    funnel = charts.funnel([(s.stage, s.count_in, s.count_out) for s in view.funnel])
    return render(
        request,
        "run.html",
        status_code=422 if errors else 200,
        title=f"Run {job_id}",
        run=view,
        failures=failures,
        results=results,
        paging=paging(request, results),
        facets=facets,
        filters=filters,
        errors=errors,
        funnel=funnel,
        histogram=charts.histogram(durations, label="test durations"),
        selected=selected,
        cut=cut,
        removed=removed,
        upstream=tested,
        outcomes=[o.value for o in Outcome],
        modes=[m.value for m in api.SpecMode],
    )


@router.get("/runs/{job_id}/artifacts/{result_id}", response_class=PlainTextResponse)
def artifact(request: Request, job_id: Id, result_id: Id) -> PlainTextResponse:
    """The full failure text a test left, stored with its result by the worker that ran it, on
    whichever host (capped at RELAY_FAILURE_TEXT_MAX_BYTES)."""
    with _session(request) as session:
        row = session.get(TestResult, result_id)
        if row is None or row.job_pk != job_id or not row.artifact_path:
            raise HTTPException(status_code=404, detail="no such artifact")
        if row.failure_text is None:  # a result stored before the database kept the text
            raise HTTPException(status_code=404, detail="the failure text was not stored")
        return PlainTextResponse(row.failure_text)


@router.get("/tests", response_class=HTMLResponse)
def test_page(
    request: Request,
    id: str = Query(default="", max_length=500),
    offset: int = Query(default=0, ge=0, le=10**9),
) -> HTMLResponse:
    """One test: its history (outcome strip, duration sparkline), spec entry and flakiness."""
    if not id:
        return render(
            request,
            "missing.html",
            status_code=404,
            title="No test",
            what="Give a test id: /tests?id=<node id> (every result links here).",
        )
    with _session(request) as session:
        history = tests_api.history_page(
            session, id, None, page_params(request, limit=50, offset=offset)
        )
        flaky = hud.is_flaky(session, test_id=id)
        latest = results.latest_of_test(session, test_id=id)
        op, dtype = (latest.op, latest.dtype) if latest is not None else (None, None)
    oldest_first = list(reversed(history.items))
    strip = charts.outcome_strip(
        [(h.outcome, f"{h.outcome} at {h.head_sha or '-'} (job {h.job_id})") for h in oldest_first]
    )
    spark = charts.sparkline([h.duration_s for h in oldest_first], label="duration")
    decision = spec_decision(request.app.state.settings, id, op=op, dtype=dtype)
    return render(
        request,
        "test.html",
        status_code=200 if history.total else 404,
        title="Test",
        test_id=id,
        history=history,
        paging=paging(request, history),
        strip=strip,
        spark=spark,
        flaky=flaky,
        decision=decision,
    )


@router.get("/flaky", response_class=HTMLResponse)
def flaky(
    request: Request,
    days: int = Query(default=14, ge=1, le=365),
    offset: int = Query(default=0, ge=0, le=10**9),
) -> HTMLResponse:
    with _session(request) as session:
        page = tests_api.flaky_page(
            session, days=days, repo=None, params=page_params(request, limit=50, offset=offset)
        )
    return render(
        request,
        "flaky.html",
        title="Flaky tests",
        page=page,
        paging=paging(request, page),
        days=days,
    )


@router.get("/downstreams", response_class=HTMLResponse)
def downstreams(
    request: Request, at: str | None = Query(default=None, max_length=40)
) -> HTMLResponse:
    """Each downstream against CRCR's L3 rules, with pass rate and queue time per day."""
    now = utcnow()
    if at:
        try:
            now = check_moment(datetime.fromisoformat(at))
        except ValueError:
            return render(
                request,
                "missing.html",
                status_code=422,
                title="Bad time",
                what=f"at={at!r} is not an ISO date-time from 1970 to 9000",
            )
    with _session(request) as session:
        health = tests_api.health(session, at=now)
        plots = {}
        for h in health:
            days = health_rows.daily_series(session, repo=h.repo, now=tests_api.aware(now), days=14)
            plots[h.repo] = (
                charts.series(
                    [
                        (d["day"], None if d["pass_rate"] is None else d["pass_rate"] * 100)
                        for d in days
                    ],
                    label="pass rate",
                    unit="%",
                    max_value=100.0,
                ),
                charts.series(
                    [
                        (d["day"], None if d["avg_queue_s"] is None else d["avg_queue_s"] / 60)
                        for d in days
                    ],
                    label="average queue",
                    unit="min",
                ),
            )
    return render(
        request, "downstreams.html", title="Downstreams", health=health, plots=plots, at=at
    )
