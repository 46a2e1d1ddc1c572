"""``/api/v1/jobs``: the runner's jobs with their live counts, shards, status history, selection
summary and per-test results."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request
from pydantic import BaseModel
from sqlalchemy import select

from planner import StoredPlan
from store import jobs as job_rows
from store.db import session_scope
from store.models import Job, JobTransition, Selection, Shard, TestResult
from wire.crcr.callback import TestCounts

router = APIRouter(tags=["api"])

TestCountsPublic = TestCounts  # CRCR's test_results {passed, failed, skipped, total}


class JobPublic(BaseModel):
    id: int
    delivery_id: str
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
    dispatched_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    url: str | None
    superseded: bool
    planned: int  # tests in the plan
    test_results: TestCountsPublic  # live while the job runs


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


class JobDetail(JobPublic):
    shards: list[ShardPublic]
    transitions: list[TransitionPublic]
    selection: dict[str, Any] | None


class ResultPublic(BaseModel):
    test_id: str
    outcome: str
    duration_s: float | None
    device_time_us: float | None
    message: str | None
    spec_mode: str | None
    tags: list[Any]


def _live_counts(session: Any, job_pks: list[int]) -> dict[int, TestCountsPublic]:
    return {
        pk: TestCountsPublic(**counts)
        for pk, counts in job_rows.live_counts(session, job_pks).items()
    }


def _job_public(job: Any, counts: TestCountsPublic) -> dict[str, Any]:
    data = {k: getattr(job, k) for k in JobPublic.model_fields if hasattr(job, k)}
    data.update(
        superseded=job.superseded_by_pk is not None, planned=job.tests_total, test_results=counts
    )
    return data


@router.get("/jobs", response_model=list[JobPublic])
def list_jobs(
    request: Request,
    status: str | None = Query(default=None, description="dispatched, in_progress or completed"),
    pr: int | None = Query(default=None, description="upstream PR number"),
    limit: int = Query(default=50, ge=1, le=500),
) -> list[JobPublic]:
    """Jobs, newest first, with live test counts {passed, failed, skipped, total}."""
    query = select(Job).order_by(Job.id.desc()).limit(limit)
    if status is not None:
        query = query.where(Job.status == status)
    if pr is not None:
        query = query.where(Job.pr_number == pr)
    with session_scope(request.app.state.settings.database_url) as session:
        rows = list(session.scalars(query))
        counts = _live_counts(session, [j.id for j in rows])
        return [JobPublic.model_validate(_job_public(j, counts[j.id])) for j in rows]


@router.get(
    "/jobs/{job_id}", response_model=JobDetail, responses={404: {"description": "no such job"}}
)
def get_job(request: Request, job_id: int) -> JobDetail:
    """One job with its shards, status history and selection summary."""
    with session_scope(request.app.state.settings.database_url) as session:
        job = session.get(Job, job_id)
        if job is None:
            raise HTTPException(status_code=404, detail=f"no job {job_id}")
        counts = _live_counts(session, [job.id])[job.id]
        shards = session.scalars(select(Shard).where(Shard.job_pk == job.id).order_by(Shard.index))
        transitions = session.scalars(
            select(JobTransition).where(JobTransition.job_pk == job.id).order_by(JobTransition.id)
        )
        selection = session.scalar(select(Selection).where(Selection.job_pk == job.id))
        return JobDetail.model_validate(
            {
                **_job_public(job, counts),
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
                "selection": None
                if selection is None
                else {
                    "base_rev": selection.base_rev,
                    "head_rev": selection.head_rev,
                    "stage_counts": selection.stage_counts,
                    "fallbacks": selection.fallbacks,
                    "estimated_device_seconds": selection.estimated_device_seconds,
                    # "N of M variants": the size of the universe the plan chose from
                    "universe_variants": _universe_variants(selection.plan),
                },
            }
        )


@router.get(
    "/jobs/{job_id}/results",
    response_model=list[ResultPublic],
    responses={404: {"description": "no such job"}},
)
def job_results(
    request: Request,
    job_id: int,
    outcome: str | None = None,
    limit: int = Query(default=1000, ge=1, le=100_000),
) -> list[ResultPublic]:
    """Per-test results of one job (optionally one outcome)."""
    with session_scope(request.app.state.settings.database_url) as session:
        if session.get(Job, job_id) is None:
            raise HTTPException(status_code=404, detail=f"no job {job_id}")
        query = (
            select(TestResult)
            .where(TestResult.job_pk == job_id)
            .order_by(TestResult.id)
            .limit(limit)
        )
        if outcome is not None:
            query = query.where(TestResult.outcome == outcome)
        return [
            ResultPublic.model_validate(r, from_attributes=True) for r in session.scalars(query)
        ]


def _universe_variants(plan: dict[str, Any]) -> int | None:
    stored = StoredPlan.model_validate(plan)
    return stored.universe.variants if stored.universe is not None else None
