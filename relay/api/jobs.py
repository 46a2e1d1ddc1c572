"""``/api/v1/jobs``: the runner's jobs with their live counts, shards, status history, selection
summary, the selection's variants (paged) and per-test results (paged)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request
from pydantic import BaseModel
from sqlalchemy.orm import Session

from planner import StoredPlan
from relay.api.pagination import MAX_INT, Page, PageParams, page_params, paginate, row_model
from store import jobs as job_rows
from store import results, selections
from store.db import session_scope
from store.models import (
    Conclusion,
    Job,
    JobStatus,
    Selection,
    SelectionKind,
    SelectionTest,
    TestResult,
)
from store.outcomes import Outcome
from testspecs.vocabulary import MODES
from upstream.undertest import UpstreamUnderTest

router = APIRouter(tags=["api"])

#: a job id: an integer primary key (PostgreSQL's INTEGER range; larger ones are refused)
JobId = Annotated[int, Path(ge=1, le=MAX_INT, description="the job's id")]

#: a selected variant's mode: its spec's (testspecs.vocabulary.MODES), or "run" without a spec
SpecMode = enum.StrEnum("SpecMode", {m: m for m in ("run", *MODES)})  # type: ignore[misc]

BASE = "/api/v1"
#: fallback units listed in a job's detail (all of them: GET .../selection)
FALLBACK_UNITS_SHOWN = 20
BAD_QUERY: dict[int | str, dict[str, Any]] = {
    422: {"description": "unknown filter value or query parameter, bad paging"}
}
NO_JOB: dict[int | str, dict[str, Any]] = {404: {"description": "no such job"}}


class TestCountsPublic(BaseModel):
    """Live counts of a job's stored results. Unlike CRCR's three buckets (which the callbacks
    send: xpassed counted as passed, xfailed as skipped), expected failures are kept apart:
    ``passed + failed + skipped + xfailed + xpassed == total``."""

    __test__ = False

    passed: int
    failed: int  # failed, error, crashed, timeout
    skipped: int  # skipped, not run
    xfailed: int
    xpassed: int
    total: int


class UpstreamUnderTestPublic(UpstreamUnderTest):
    """The PyTorch the job tests (named by the planner, completed by the shard worker):
    ``kind`` installed | release | head-wheel | overlay | none (nothing could test the change,
    the job concludes neutral), the torch version and build, the overlay's head SHA and files
    laid over, the compiled files no overlay covers, and ``summary``, the line the check run and
    the callback carry."""

    summary: str


def upstream_under_test(stored: dict[str, Any] | None) -> UpstreamUnderTestPublic | None:
    """A job's stored ``upstream_under_test`` for the API (None for jobs planned before it)."""
    if not stored:
        return None
    known = UpstreamUnderTest.model_validate(stored)
    return UpstreamUnderTestPublic(**known.model_dump(), summary=known.describe())


class JobLinks(BaseModel):
    self: str
    delivery: str | None  # /api/v1/deliveries/{delivery_id}
    results: str
    selection: str
    selection_tests: str


class JobPublic(BaseModel):
    id: int
    delivery_id: str | None  # the delivery this job was planned for (/api/v1/deliveries/{id})
    crcr_delivery_id: str  # the CRCR key's delivery id (its callbacks carry this one)
    repo: str
    run_id: str
    run_attempt: str
    job_name: str
    workflow_name: str | None
    event_type: str | None
    head_sha: str | None
    pr_number: int | None
    status: str
    conclusion: str | None
    planning_started_at: datetime | None  # status "planning": its tests are being selected
    dispatched_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    url: str | None
    superseded: bool
    # why it failed before it ran tests (planning error, environment error, nothing selected),
    # or, on a success, why it had nothing to test (store.selections.nothing_to_test)
    failure_reason: str | None = None
    planned: int  # tests in the plan
    test_results: TestCountsPublic  # live while the job runs
    upstream_under_test: UpstreamUnderTestPublic | None  # which PyTorch it tests
    links: JobLinks


class ShardPublic(BaseModel):
    index: int
    state: str
    tests: int
    attempts: int
    started_at: datetime | None
    finished_at: datetime | None


class TransitionPublic(BaseModel):
    from_status: str | None
    to_status: str
    conclusion: str | None
    at: datetime
    source: str | None


class SelectionSummary(BaseModel):
    base_rev: str | None
    head_rev: str | None
    stage_counts: dict[str, Any]
    fallbacks: list[dict[str, Any]]  # each fallback's units cut to FALLBACK_UNITS_SHOWN
    estimated_device_seconds: float | None  # simulated, shown beside the runner cost
    universe_variants: int | None  # "N of M variants": the universe the plan chose from
    selected: int | None
    cut: int | None
    removed: int | None
    # the plan's cost: runner-minutes of its tests (setup + call + teardown on a runner), of the
    # applicable universe's, its budget, and when it should finish on its ``workers`` runners
    cost_runner_minutes: float | None = None
    universe_runner_minutes: float | None = None
    budget_runner_minutes: float | None = None
    budget_reason: str = ""
    workers: int | None = None
    estimated_finish_minutes: float | None = None  # wall minutes on the workers
    estimated_finish_at: datetime | None = None  # dispatched (or started) + the wall minutes


class JobDetail(JobPublic):
    failure_error: str | None = None  # the error's text behind ``failure_reason`` (its end)
    shards: list[ShardPublic]
    transitions: list[TransitionPublic]
    selection: SelectionSummary | None


class ResultPublic(BaseModel):
    id: int
    test_id: str
    outcome: str
    duration_s: float | None
    device_time_us: float | None
    message: str | None
    spec_mode: str | None
    tags: list[Any]
    shard: int | None
    created_at: datetime


class SelectionPublic(BaseModel):
    """A job's stored selection without its per-variant lists (``.../selection/tests``)."""

    base_rev: str | None
    head_rev: str | None
    stage_counts: dict[str, Any]
    fallbacks: list[dict[str, Any]]
    estimated_device_seconds: float | None
    plan: dict[str, Any]  # the SelectionPlan's other fields, the list sizes under "counts"


#: a variant of a stored selection: the ``selection_test`` row as it is (the selector's
#: per-test record, ``selector.model.Ranked``, with ``kind``, the runner's ``shard`` and its id)
SelectionTestPublic = row_model(SelectionTest, "SelectionTestPublic", exclude=("job_pk",))


def _links(job_pk: int, delivery_id: str | None) -> JobLinks:
    me = f"{BASE}/jobs/{job_pk}"
    return JobLinks(
        self=me,
        delivery=f"{BASE}/deliveries/{delivery_id}" if delivery_id is not None else None,
        results=f"{me}/results",
        selection=f"{me}/selection",
        selection_tests=f"{me}/selection/tests",
    )


def _job_public(session: Session, rows: Sequence[Job]) -> list[dict[str, Any]]:
    pks = [j.id for j in rows]
    counts = results.live_counts(session, pks, apart=True)
    deliveries = job_rows.deliveries_of_jobs(session, pks)
    out = []
    for job in rows:
        data = {k: getattr(job, k) for k in JobPublic.model_fields if hasattr(job, k)}
        delivery_id = deliveries.get(job.id)
        data.update(
            delivery_id=delivery_id,
            crcr_delivery_id=job.delivery_id,
            superseded=job.superseded_by_pk is not None,
            planned=job.tests_total,
            test_results=TestCountsPublic(**counts[job.id]),
            links=_links(job.id, delivery_id),
            upstream_under_test=upstream_under_test(job.upstream_under_test),
        )
        out.append(data)
    return out


@router.get("/jobs", response_model=Page[JobPublic], responses=BAD_QUERY)
def list_jobs(
    request: Request,
    status: JobStatus | None = None,
    conclusion: Conclusion | None = None,
    pr: int | None = Query(default=None, ge=0, le=MAX_INT, description="upstream PR number"),
    params: PageParams = Depends(page_params(default_limit=50, max_limit=500)),
) -> Page[JobPublic]:
    """Jobs, newest first, with live test counts."""
    query = job_rows.jobs_query(
        status=None if status is None else status.value,
        conclusion=None if conclusion is None else conclusion.value,
        pr_number=pr,
    )
    with session_scope(request.app.state.settings.database_url) as session:
        return paginate(
            session,
            query,
            key=Job.id,
            params=params,
            public_rows=lambda rows: [
                JobPublic.model_validate(d) for d in _job_public(session, rows)
            ],
        )


def _job_or_404(session: Session, job_id: int) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise HTTPException(status_code=404, detail=f"no job {job_id}")
    return job


def _minutes(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds / 60, 2)


def _summary(selection: Selection, job: Job) -> SelectionSummary:
    stored = StoredPlan.model_validate(selection.plan)
    finish = stored.estimated_finish_seconds
    since = job.started_at or job.dispatched_at
    fallbacks = []
    for f in selection.fallbacks or []:
        units = list(f.get("units") or []) if isinstance(f, dict) else []
        shown = {**f, "units": units[:FALLBACK_UNITS_SHOWN], "units_total": len(units)}
        fallbacks.append(shown)
    counts = stored.counts
    return SelectionSummary(
        base_rev=selection.base_rev,
        head_rev=selection.head_rev,
        stage_counts=selection.stage_counts,
        fallbacks=fallbacks,
        estimated_device_seconds=selection.estimated_device_seconds,
        universe_variants=stored.universe.variants if stored.universe is not None else None,
        selected=counts.selected if counts is not None else None,
        cut=counts.cut if counts is not None else None,
        removed=counts.removed if counts is not None else None,
        cost_runner_minutes=_minutes(stored.estimated_runner_seconds),
        universe_runner_minutes=_minutes(stored.full_runner_seconds),
        budget_runner_minutes=_minutes(stored.budget_seconds),
        budget_reason=stored.budget_reason,
        workers=stored.workers,
        estimated_finish_minutes=_minutes(finish),
        estimated_finish_at=None
        if finish is None or since is None
        else since + timedelta(seconds=finish),
    )


@router.get("/jobs/{job_id}", response_model=JobDetail, responses=NO_JOB)
def get_job(request: Request, job_id: JobId) -> JobDetail:
    """One job with its shards, status history and selection summary (the selected variants
    and their reasons: ``/jobs/{id}/selection/tests``)."""
    with session_scope(request.app.state.settings.database_url) as session:
        job = _job_or_404(session, job_id)
        shards = job_rows.shards_of(session, job_pk=job.id)
        transitions = job_rows.transitions_of(session, job_pk=job.id)
        selection = selections.selection_of(session, job_pk=job.id)
        return JobDetail.model_validate(
            {
                **_job_public(session, [job])[0],
                "failure_error": job.failure_error,
                "shards": [
                    ShardPublic(
                        index=s.index,
                        state=s.state,
                        tests=len(s.test_ids),
                        attempts=s.attempts,
                        started_at=s.started_at,
                        finished_at=s.finished_at,
                    )
                    for s in shards
                ],
                "transitions": [
                    TransitionPublic.model_validate(t, from_attributes=True) for t in transitions
                ],
                "selection": None if selection is None else _summary(selection, job),
            }
        )


@router.get(
    "/jobs/{job_id}/results", response_model=Page[ResultPublic], responses={**NO_JOB, **BAD_QUERY}
)
def job_results(
    request: Request,
    job_id: JobId,
    outcome: Outcome | None = None,
    shard: int | None = Query(default=None, ge=0, le=100_000, description="shard index"),
    params: PageParams = Depends(page_params(default_limit=1000, max_limit=5000)),
) -> Page[ResultPublic]:
    """Per-test results of one job in the order they were stored (optionally one outcome, one
    shard: the same shard as the selection's ``.../selection/tests?shard=N``)."""
    with session_scope(request.app.state.settings.database_url) as session:
        _job_or_404(session, job_id)
        query = results.results_query(
            job_pk=job_id, outcome=None if outcome is None else outcome.value, shard_index=shard
        )

        def public(rows: Sequence[TestResult]) -> list[ResultPublic]:
            shard_index = job_rows.shard_indexes(session, job_pk=job_id)
            return [
                ResultPublic.model_validate(
                    {
                        **{k: getattr(r, k) for k in ResultPublic.model_fields if hasattr(r, k)},
                        "shard": shard_index.get(r.shard_pk) if r.shard_pk is not None else None,
                    }
                )
                for r in rows
            ]

        return paginate(
            session, query, key=TestResult.id, params=params, descending=False, public_rows=public
        )


@router.get("/jobs/{job_id}/selection", response_model=SelectionPublic, responses=NO_JOB)
def job_selection(request: Request, job_id: JobId) -> SelectionPublic:
    """The job's stored SelectionPlan without its per-variant lists: funnel, fallbacks with all
    their units, signals, budget, universe and the lists' sizes (``plan.counts``)."""
    with session_scope(request.app.state.settings.database_url) as session:
        _job_or_404(session, job_id)
        selection = selections.selection_of(session, job_pk=job_id)
        if selection is None:
            raise HTTPException(status_code=404, detail=f"job {job_id} has no stored selection")
        return SelectionPublic.model_validate(selection, from_attributes=True)


@router.get(
    "/jobs/{job_id}/selection/tests",
    response_model=Page[SelectionTestPublic],  # type: ignore[valid-type]
    responses={**NO_JOB, **BAD_QUERY},
)
def job_selection_tests(
    request: Request,
    job_id: JobId,
    kind: SelectionKind | None = Query(default=None, description="selected, cut or removed"),
    shard: int | None = Query(default=None, ge=0, le=100_000),
    mode: SpecMode | None = Query(default=None, description="spec mode"),
    params: PageParams = Depends(page_params(default_limit=500, max_limit=5000)),
) -> Page[BaseModel]:
    """The variants of the job's selection with their rank, shard, mode, signals and reasons:
    selected ones in rank order, then the ones the budget cut, then the ones removed at head."""
    with session_scope(request.app.state.settings.database_url) as session:
        _job_or_404(session, job_id)
        query = selections.tests_query(
            job_pk=job_id,
            kind=None if kind is None else kind.value,
            shard=shard,
            mode=None if mode is None else mode.value,
        )
        return paginate(
            session,
            query,
            key=SelectionTest.id,
            params=params,
            descending=False,
            public_rows=lambda rows: [
                SelectionTestPublic.model_validate(r, from_attributes=True) for r in rows
            ],
        )
