"""The HUD's queries: the commit x job grid, a job's results under filters, one test's history
across upstream commits, flaky tests, the overview's jobs (a downstream's health:
:mod:`store.health`).

Read only. Every query is served by an index of migration 0003 (the grid by ``dispatched_at`` and
``head_sha``, a test's history by ``test_id``, a job's results by ``(job_pk, outcome)``); lists
are cut to a page by the caller's limit and offset or key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, String, and_, case, cast, func, or_, select
from sqlalchemy.orm import Session

from store.models import (
    Delivery,
    Dispatch,
    Job,
    JobStatus,
    SelectionTest,
    TestResult,
    utcnow,
)
from store.outcomes import FAILED, PASSED, Outcome
from store.results import live_counts

#: outcomes in which the test body passed / failed (a flaky test shows both on one commit)
BODY_PASSED = sorted(o.value for o in PASSED)
BODY_FAILED = sorted({o.value for o in FAILED} | {Outcome.XFAILED.value})
FAILED_VALUES = sorted(o.value for o in FAILED)


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


# ----------------------------------------------------------------------------- grid


def branch_of() -> ColumnElement[Any]:
    """The branch a job's commit is on or targets: a pull request's base ref, a push's ref
    without ``refs/heads/`` (from the delivery's normalized event)."""
    norm = Delivery.normalized
    return func.coalesce(
        norm["base_ref"].as_string(), func.replace(norm["ref"].as_string(), "refs/heads/", "")
    )


@dataclass(frozen=True)
class GridFilters:
    repo: str | None = None
    branch: str | None = None
    event: str | None = None
    pr: int | None = None


def _grid_where(query: Select, f: GridFilters) -> Select:
    query = query.where(Job.head_sha.is_not(None))
    if f.repo is not None:
        query = query.where(Job.repo == f.repo)
    if f.event is not None:
        query = query.where(Job.event_type == f.event)
    if f.pr is not None:
        query = query.where(Job.pr_number == f.pr)
    if f.branch is not None:
        query = (
            query.join(Dispatch, Dispatch.id == Job.dispatch_pk)
            .join(Delivery, Delivery.id == Dispatch.delivery_pk)
            .where(branch_of() == f.branch)
        )
    return query


@dataclass
class GridCell:
    job_id: int
    status: str
    conclusion: str | None
    runs: int  # jobs of this commit and column (re-runs, attempts)
    counts: dict[str, int]
    dispatched_at: datetime


@dataclass
class CommitRow:
    """One upstream commit's row of the grid: its jobs' cells, one per column."""

    head_sha: str
    last_at: datetime
    event_type: str | None
    pr_number: int | None
    branch: str | None
    cells: list[GridCell | None]


@dataclass
class Grid:
    columns: list[tuple[str, str]]  # (downstream repo, job name)
    rows: list[CommitRow]
    total: int
    next_key: str | None  # "<last_at iso>|<sha>" of the last row when more follow


def grid(
    session: Session,
    *,
    filters: GridFilters,
    limit: int,
    offset: int = 0,
    after: tuple[datetime, str] | None = None,
) -> Grid:
    """Upstream commits (newest job first) down, (repo, job name) across; each cell the commit's
    latest job in that column. ``after`` pages by key: the (last_at, sha) of the previous page's
    last row."""
    last = func.max(Job.dispatched_at).label("last_at")
    commits = _grid_where(select(Job.head_sha, last), filters).group_by(Job.head_sha)
    total = int(session.scalar(select(func.count()).select_from(commits.subquery())) or 0)
    page = commits.order_by(last.desc(), Job.head_sha.desc())
    if after is not None:
        at, sha = after
        page = page.having(
            or_(
                func.max(Job.dispatched_at) < at,
                and_(func.max(Job.dispatched_at) == at, Job.head_sha < sha),
            )
        )
    else:
        page = page.offset(offset)
    found = session.execute(page.limit(limit + 1)).all()
    more = len(found) > limit
    found = found[:limit]
    shas = [r.head_sha for r in found]
    jobs_q = _grid_where(select(Job, branch_of().label("branch")), filters).where(
        Job.head_sha.in_(shas)
    )
    if filters.branch is None:
        jobs_q = jobs_q.outerjoin(Dispatch, Dispatch.id == Job.dispatch_pk).outerjoin(
            Delivery, Delivery.id == Dispatch.delivery_pk
        )
    jobs = session.execute(jobs_q.order_by(Job.id)).all()
    running = [j.id for j, _ in jobs if j.status != JobStatus.COMPLETED.value]
    live = live_counts(session, running)
    columns = sorted({(j.repo, j.job_name) for j, _ in jobs})
    index = {c: i for i, c in enumerate(columns)}
    rows = {
        r.head_sha: CommitRow(r.head_sha, r.last_at, None, None, None, [None] * len(columns))
        for r in found
    }
    for job, branch in jobs:  # oldest first: the latest job of a cell wins
        row = rows[job.head_sha]
        col = index[(job.repo, job.job_name)]
        prev = row.cells[col]
        counts = live.get(job.id) or {
            "passed": job.tests_passed,
            "failed": job.tests_failed,
            "skipped": job.tests_skipped,
            "total": job.tests_passed + job.tests_failed + job.tests_skipped,
        }
        row.cells[col] = GridCell(
            job.id,
            job.status,
            job.conclusion,
            (prev.runs if prev else 0) + 1,
            counts,
            job.dispatched_at,
        )
        row.event_type, row.pr_number = job.event_type, job.pr_number
        row.branch = branch or row.branch
    ordered = [rows[s] for s in shas]
    next_key = None
    if more and ordered:
        tail = ordered[-1]
        next_key = f"{tail.last_at.isoformat()}|{tail.head_sha}"
    return Grid(columns=columns, rows=ordered, total=total, next_key=next_key)


def grid_choices(session: Session) -> dict[str, list[str]]:
    """The values the grid's filters can take (for the page's menus)."""
    repos = sorted(r for r in session.scalars(select(Job.repo).distinct()) if r)
    events = sorted(e for e in session.scalars(select(Job.event_type).distinct()) if e)
    branches = session.scalars(
        select(branch_of())
        .select_from(Job)
        .join(Dispatch, Dispatch.id == Job.dispatch_pk)
        .join(Delivery, Delivery.id == Dispatch.delivery_pk)
        .distinct()
    )
    return {"repo": repos, "event": events, "branch": sorted(b for b in branches if b)}


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class ResultFilters:
    outcome: str | None = None
    suite: str | None = None  # a test file's stem without "test_": common, out, binary_ufuncs
    op: str | None = None
    tag: str | None = None
    mode: str | None = None
    failing: bool = False  # only outcomes that count as failed


def results_query(job_pk: int, f: ResultFilters) -> Select:
    query = select(TestResult).where(TestResult.job_pk == job_pk)
    if f.outcome is not None:
        query = query.where(TestResult.outcome == f.outcome)
    if f.failing:
        query = query.where(TestResult.outcome.in_(FAILED_VALUES))
    if f.suite is not None:
        name = _like_escape(f"test_{f.suite}.py::")
        query = query.where(
            or_(
                TestResult.test_id.like(f"{name}%", escape="\\"),
                TestResult.test_id.like(f"%/{name}%", escape="\\"),
            )
        )
    if f.op is not None:
        query = query.where(TestResult.op == f.op)
    if f.tag is not None:
        text = _like_escape(f'"{f.tag}"')
        query = query.where(cast(TestResult.tags, String).like(f"%{text}%", escape="\\"))
    if f.mode is not None:
        query = query.where(TestResult.spec_mode == f.mode)
    return query


def suite_of(test_id: str) -> str:
    """``spyre_stack/conformance/test_common.py::...`` -> ``common``."""
    stem = test_id.partition("::")[0].rsplit("/", 1)[-1].removesuffix(".py")
    return stem.removeprefix("test_")


@dataclass
class Facets:
    """A job's results counted by outcome, suite, op, tag and mode (the filters' menus)."""

    outcome: dict[str, int] = field(default_factory=dict)
    suite: dict[str, dict[str, int]] = field(default_factory=dict)  # suite -> outcome -> n
    op: dict[str, dict[str, int]] = field(default_factory=dict)
    tag: dict[str, int] = field(default_factory=dict)
    mode: dict[str, int] = field(default_factory=dict)


def facets(session: Session, *, job_pk: int) -> Facets:
    """Counted in the database, grouped by (test file, outcome, op, mode, tags): a job of 30,000
    results comes back as a few hundred groups."""
    out = Facets()
    where = func.instr if session.get_bind().dialect.name == "sqlite" else func.strpos
    cut = where(TestResult.test_id, "::")
    test_file = case(
        (cut > 0, func.substr(TestResult.test_id, 1, cut - 1)), else_=TestResult.test_id
    )
    tags = cast(TestResult.tags, String)
    rows = session.execute(
        select(
            test_file, TestResult.outcome, TestResult.op, TestResult.spec_mode, tags, func.count()
        )
        .where(TestResult.job_pk == job_pk)
        .group_by(test_file, TestResult.outcome, TestResult.op, TestResult.spec_mode, tags)
    )
    for path, outcome, op, mode, tag_text, n in rows:
        n = int(n)
        out.outcome[outcome] = out.outcome.get(outcome, 0) + n
        by_suite = out.suite.setdefault(suite_of(path or ""), {})
        by_suite[outcome] = by_suite.get(outcome, 0) + n
        if op:
            by_op = out.op.setdefault(op, {})
            by_op[outcome] = by_op.get(outcome, 0) + n
        if mode:
            out.mode[mode] = out.mode.get(mode, 0) + n
        for tag in json.loads(tag_text) if tag_text else []:
            out.tag[str(tag)] = out.tag.get(str(tag), 0) + n
    return out


def durations(session: Session, *, job_pk: int) -> list[float]:
    """Wall seconds of a job's tests that ran (the run page's distribution)."""
    ran = sorted(o.value for o in Outcome if o.ran)
    return [
        float(d or 0.0)
        for d in session.scalars(
            select(TestResult.duration_s).where(
                TestResult.job_pk == job_pk,
                TestResult.outcome.in_(ran),
                TestResult.duration_s.is_not(None),
            )
        )
    ]


def selection_tests(session: Session, *, job_pk: int, kind: str, limit: int) -> list[SelectionTest]:
    """The first ``limit`` variants of a stored selection of one kind (selected in rank order,
    cut, removed)."""
    return list(
        session.scalars(
            select(SelectionTest)
            .where(SelectionTest.job_pk == job_pk, SelectionTest.kind == kind)
            .order_by(SelectionTest.id)
            .limit(limit)
        )
    )


# ----------------------------------------------------------------------------- history


def history_query(test_id: str, *, repo: str | None = None) -> Select:
    """One test id's results across jobs, with each job (newest first by result id)."""
    query = (
        select(TestResult, Job)
        .join(Job, Job.id == TestResult.job_pk)
        .where(TestResult.test_id == test_id)
    )
    if repo is not None:
        query = query.where(Job.repo == repo)
    return query


@dataclass
class FlakyTest:
    test_id: str
    commits: int  # upstream commits on which it both passed and failed
    passed: int
    failed: int
    last_sha: str
    last_at: datetime


def flaky_query(*, since: datetime, repo: str | None = None, test_id: str | None = None) -> Select:
    """Tests that both passed and failed on the same upstream SHA (one row per test)."""
    passed = func.sum(case((TestResult.outcome.in_(BODY_PASSED), 1), else_=0))
    failed = func.sum(case((TestResult.outcome.in_(BODY_FAILED), 1), else_=0))
    per_sha = (
        select(
            TestResult.test_id.label("test_id"),
            Job.head_sha.label("head_sha"),
            passed.label("passed"),
            failed.label("failed"),
            func.max(Job.dispatched_at).label("last_at"),
        )
        .join(Job, Job.id == TestResult.job_pk)
        .where(Job.dispatched_at >= since, Job.head_sha.is_not(None))
        .group_by(TestResult.test_id, Job.head_sha)
        .having(and_(passed > 0, failed > 0))
    )
    if repo is not None:
        per_sha = per_sha.where(Job.repo == repo)
    if test_id is not None:
        per_sha = per_sha.where(TestResult.test_id == test_id)
    sub = per_sha.subquery()
    return select(
        sub.c.test_id,
        func.count().label("commits"),
        func.sum(sub.c.passed).label("passed"),
        func.sum(sub.c.failed).label("failed"),
        func.max(sub.c.head_sha).label("last_sha"),
        func.max(sub.c.last_at).label("last_at"),
    ).group_by(sub.c.test_id)


def flaky(
    session: Session,
    *,
    since: datetime,
    repo: str | None,
    limit: int,
    offset: int = 0,
    after: str | None = None,
) -> tuple[list[FlakyTest], int, str | None]:
    """(flaky tests by test id, total, the key of the last one when more follow)."""
    query = flaky_query(since=since, repo=repo)
    total = int(session.scalar(select(func.count()).select_from(query.subquery())) or 0)
    sub = query.subquery()
    page = select(sub).order_by(sub.c.test_id)
    page = page.where(sub.c.test_id > after) if after is not None else page.offset(offset)
    rows = session.execute(page.limit(limit + 1)).all()
    more = len(rows) > limit
    items = [
        FlakyTest(r.test_id, int(r.commits), int(r.passed), int(r.failed), r.last_sha, r.last_at)
        for r in rows[:limit]
    ]
    return items, total, (items[-1].test_id if more and items else None)


def is_flaky(session: Session, *, test_id: str) -> FlakyTest | None:
    since = datetime(1970, 1, 1, tzinfo=utcnow().tzinfo)
    row = session.execute(flaky_query(since=since, test_id=test_id)).first()
    if row is None:
        return None
    return FlakyTest(
        row.test_id, int(row.commits), int(row.passed), int(row.failed), row.last_sha, row.last_at
    )


# ----------------------------------------------------------------------------- overview


def running_jobs(session: Session, *, limit: int = 20) -> list[Job]:
    return list(
        session.scalars(
            select(Job)
            .where(Job.status != JobStatus.COMPLETED.value)
            .order_by(Job.id.desc())
            .limit(limit)
        )
    )


def recent_jobs(session: Session, *, limit: int = 10, repo: str | None = None) -> list[Job]:
    query = select(Job).where(Job.status == JobStatus.COMPLETED.value)
    if repo is not None:
        query = query.where(Job.repo == repo)
    return list(session.scalars(query.order_by(Job.id.desc()).limit(limit)))
