"""``/api/v1/hud``: the HUD's status API, the data of every dashboard page.

The commit x job grid, one run (job) with its funnel, timings and shards, and its results under
filters (outcome, suite, op, tag, mode) with the command that reproduces each failure (one
test's history, flaky tests and each downstream's health: :mod:`relay.api.hud_tests`). Lists are
paged like every list of the API (:mod:`relay.api.pagination`).
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from pydantic import BaseModel
from sqlalchemy.orm import Session

from relay.api.hud_plan import PLANS, FunnelStage, PlanView, read_plan, reproduce_command
from relay.api.jobs import SpecMode
from relay.api.pagination import Page, PageParams, decode_cursor, page_of, page_params, paginate
from store import hud, results, selections
from store import jobs as job_rows
from store.db import session_scope
from store.jobs import seconds_between
from store.models import Job, TestResult, utcnow
from store.outcomes import Outcome
from store.results import live_counts
from wire.values import Id

router = APIRouter(prefix="/hud", tags=["hud"])


class EventType(enum.StrEnum):
    """The upstream event a job was planned for."""

    PULL_REQUEST = "pull_request"
    PUSH = "push"
    CHECK_RUN = "check_run"
    CHECK_SUITE = "check_suite"
    NIGHTLY = "nightly"
    PERIODIC = "periodic"


def _session(request: Request) -> Any:
    return session_scope(request.app.state.settings.database_url)


# ----------------------------------------------------------------------------- grid


class Counts(BaseModel):
    passed: int
    failed: int
    skipped: int
    total: int


class Cell(BaseModel):
    job_id: int
    status: str
    conclusion: str | None
    runs: int
    test_results: Counts
    dispatched_at: datetime
    page: str  # the run page
    api: str


class Column(BaseModel):
    repo: str
    job_name: str


class GridRow(BaseModel):
    head_sha: str
    last_at: datetime
    event_type: str | None
    pr_number: int | None
    branch: str | None
    cells: list[Cell | None]  # one per column, None where the commit has no job


class GridPage(Page[GridRow]):
    columns: list[Column]


def grid_page(session: Session, params: PageParams, filters: hud.GridFilters) -> GridPage:
    after = None
    if params.cursor is not None:
        raw = str(decode_cursor(params.cursor))
        at, _, sha = raw.partition("|")
        try:
            after = (datetime.fromisoformat(at), sha)
        except ValueError:
            raise HTTPException(422, "cursor: not a cursor this API issued") from None
    g = hud.grid(session, filters=filters, limit=params.limit, offset=params.offset, after=after)
    rows = [
        GridRow(
            head_sha=r.head_sha,
            last_at=r.last_at,
            event_type=r.event_type,
            pr_number=r.pr_number,
            branch=r.branch,
            cells=[
                None
                if c is None
                else Cell(
                    job_id=c.job_id,
                    status=c.status,
                    conclusion=c.conclusion,
                    runs=c.runs,
                    test_results=Counts(**c.counts),
                    dispatched_at=c.dispatched_at,
                    page=f"/runs/{c.job_id}",
                    api=f"/api/v1/hud/runs/{c.job_id}",
                )
                for c in r.cells
            ],
        )
        for r in g.rows
    ]
    page = page_of(rows, total=g.total, params=params, next_key=g.next_key)
    return GridPage(
        **page.model_dump(exclude={"items"}),
        items=rows,
        columns=[Column(repo=r, job_name=j) for r, j in g.columns],
    )


@router.get("/grid", response_model=GridPage)
def get_grid(
    request: Request,
    repo: str | None = Query(default=None, max_length=200, description="downstream repository"),
    branch: str | None = Query(
        default=None, max_length=200, description="branch (push ref or PR base)"
    ),
    event: EventType | None = Query(default=None, description="upstream event type"),
    pr: int | None = Query(default=None, ge=1, le=2**31 - 1, description="upstream PR number"),
    params: PageParams = Depends(page_params(default_limit=50, max_limit=500)),
) -> GridPage:
    """Upstream commits (newest first) down, downstream jobs across: each cell the commit's
    latest job in that column, with its conclusion and counts."""
    filters = hud.GridFilters(repo=repo, branch=branch, event=event.value if event else None, pr=pr)
    with _session(request) as session:
        return grid_page(session, params, filters)


# ----------------------------------------------------------------------------- one run


class ShardProgress(BaseModel):
    index: int
    state: str
    tests: int
    done: int
    attempts: int
    started_at: datetime | None
    finished_at: datetime | None


class Transition(BaseModel):
    from_status: str | None
    to_status: str
    conclusion: str | None
    at: datetime
    source: str | None


class RunProgress(BaseModel):
    job_id: int
    status: str
    conclusion: str | None
    planned: int
    test_results: Counts
    shards: list[ShardProgress]


class Run(RunProgress):
    delivery_id: str
    repo: str
    job_name: str
    run_id: str
    run_attempt: str
    event_type: str | None
    head_sha: str | None
    pr_number: int | None
    dispatched_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    queue_s: float | None  # dispatched -> started
    execution_s: float | None  # started -> completed (or now, while it runs)
    device_time_s: float | None  # simulated device time of the stored results (estimates)
    transitions: list[Transition]
    funnel: list[FunnelStage]
    universe_variants: int | None
    selected: int | None
    cut: int | None
    removed: int | None
    fallbacks: list[dict[str, Any]]
    costs: dict[str, float]  # the plan's *seconds* fields (estimates and budgets)
    plan: dict[str, Any]  # backend, source kind, base and head revisions
    failure_reason: str | None = None  # why it failed before tests ran, or had none to run
    failure_error: str | None = None  # the error's text behind it


def _job(session: Session, job_id: int) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise HTTPException(status_code=404, detail=f"no job {job_id}")
    return job


def plan_view(session: Session, job_id: int) -> PlanView:
    selection = selections.selection_of(session, job_pk=job_id)
    if selection is None:
        return PlanView()
    return PLANS.get(selection.id, lambda: read_plan(selection.plan, selection.stage_counts))


def progress(session: Session, job: Job) -> RunProgress:
    counts = live_counts(session, [job.id])[job.id]
    done = results.results_per_shard(session, job_pk=job.id)
    shards = job_rows.shards_of(session, job_pk=job.id)
    return RunProgress(
        job_id=job.id,
        status=job.status,
        conclusion=job.conclusion,
        planned=job.tests_total,
        test_results=Counts(**counts),
        shards=[
            ShardProgress(
                index=s.index,
                state=s.state,
                tests=len(s.test_ids),
                done=int(done.get(s.id, 0)),
                attempts=s.attempts,
                started_at=s.started_at,
                finished_at=s.finished_at,
            )
            for s in shards
        ],
    )


def run_view(session: Session, job_id: int) -> Run:
    job = _job(session, job_id)
    prog = progress(session, job)
    view = plan_view(session, job_id)
    device_us = results.device_time_us(session, job_pk=job_id)
    counts = view_counts(session, job_id, view)
    transitions = job_rows.transitions_of(session, job_pk=job_id)
    end = job.completed_at or (utcnow() if job.started_at else None)
    return Run(
        **prog.model_dump(),
        delivery_id=job.delivery_id,
        repo=job.repo,
        job_name=job.job_name,
        run_id=job.run_id,
        run_attempt=job.run_attempt,
        event_type=job.event_type,
        head_sha=job.head_sha,
        pr_number=job.pr_number,
        dispatched_at=job.dispatched_at,
        started_at=job.started_at,
        completed_at=job.completed_at,
        queue_s=seconds_between(job.dispatched_at, job.started_at),
        execution_s=seconds_between(job.started_at, end),
        device_time_s=None if device_us is None else float(device_us) / 1e6,
        transitions=[Transition.model_validate(t, from_attributes=True) for t in transitions],
        funnel=view.funnel,
        universe_variants=view.universe,
        selected=counts.get("selected"),
        cut=counts.get("cut"),
        removed=counts.get("removed"),
        fallbacks=view.fallbacks,
        costs=view.costs,
        plan=view.summary,
        failure_reason=job.failure_reason,
        failure_error=job.failure_error,
    )


def view_counts(session: Session, job_id: int, view: PlanView) -> dict[str, int]:
    """How many variants the plan selected, cut and removed (its ``counts``, else its lists)."""
    selection = selections.plan_of(session, job_pk=job_id)
    stored = (selection or {}).get("counts") if isinstance(selection, dict) else None
    if isinstance(stored, dict):
        return {k: int(v) for k, v in stored.items() if isinstance(v, int)}
    if not view.funnel and not view.selected:
        return {}
    return {"selected": len(view.selected), "cut": len(view.cut), "removed": len(view.removed)}


@router.get("/runs/{job_id}", response_model=Run, responses={404: {"description": "no such job"}})
def get_run(request: Request, job_id: Id) -> Run:
    """One job: status, timings (queue, execution, simulated device time), shards with their
    progress, status transitions and the selection funnel."""
    with _session(request) as session:
        return run_view(session, job_id)


@router.get(
    "/runs/{job_id}/progress",
    response_model=RunProgress,
    responses={404: {"description": "no such job"}},
)
def get_progress(request: Request, job_id: Id) -> RunProgress:
    """What the run page polls while the job runs: status, live counts and shards."""
    with _session(request) as session:
        return progress(session, _job(session, job_id))


class RunResult(BaseModel):
    id: int
    test_id: str
    suite: str
    outcome: str
    duration_s: float | None
    device_time_us: float | None
    message: str | None
    spec_mode: str | None
    op: str | None
    dtype: str | None
    tags: list[Any]
    created_at: datetime
    artifact: str | None  # the full failure text, served by the app
    reproduce: str | None  # the command that runs this test as the runner did
    history: str  # the test page


def result_item(r: TestResult, runner: dict[str, Any]) -> RunResult:
    failed = Outcome(r.outcome).bucket == "failed" or r.outcome == Outcome.XFAILED.value
    return RunResult(
        id=r.id,
        test_id=r.test_id,
        suite=hud.suite_of(r.test_id),
        outcome=r.outcome,
        duration_s=r.duration_s,
        device_time_us=r.device_time_us,
        message=r.message,
        spec_mode=r.spec_mode,
        op=r.op,
        dtype=r.dtype,
        tags=list(r.tags or []),
        created_at=r.created_at,
        artifact=f"/runs/{r.job_pk}/artifacts/{r.id}" if r.artifact_path else None,
        reproduce=reproduce_command(runner, r.test_id) if failed else None,
        history=f"/tests?id={r.test_id}",
    )


def results_page(
    session: Session, job_id: int, filters: hud.ResultFilters, params: PageParams
) -> Page[RunResult]:
    _job(session, job_id)
    runner = plan_view(session, job_id).runner
    return paginate(
        session,
        hud.results_query(job_id, filters),
        key=TestResult.id,
        params=params,
        descending=False,
        public=lambda r: result_item(r, runner),
    )


@router.get(
    "/runs/{job_id}/results",
    response_model=Page[RunResult],
    responses={404: {"description": "no such job"}},
)
def get_results(
    request: Request,
    job_id: Id,
    outcome: Outcome | None = Query(default=None),
    suite: str | None = Query(
        default=None, max_length=200, description="test file stem without test_: common, out"
    ),
    op: str | None = Query(default=None, max_length=200, description="OpInfo / ModuleInfo name"),
    tag: str | None = Query(default=None, max_length=100, description="spec tag"),
    mode: SpecMode | None = Query(default=None, description="spec mode"),
    failing: bool = Query(default=False, description="only failed, error, crashed and timeout"),
    params: PageParams = Depends(page_params(default_limit=100, max_limit=1000)),
) -> Page[RunResult]:
    """A job's results in the order they finished, under filters; a failing one carries the
    command that reproduces it and its artifact link."""
    filters = hud.ResultFilters(
        outcome=outcome.value if outcome else None,
        suite=suite,
        op=op,
        tag=tag,
        mode=mode.value if mode else None,
        failing=failing,
    )
    with _session(request) as session:
        return results_page(session, job_id, filters, params)
