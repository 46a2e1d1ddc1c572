"""Data access for a job's stored selection: the plan, its per-test records, and what it says
about its change."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from store.models import Job, Selection, SelectionTest


def nothing_to_test(session: Session, *, job: Job) -> bool:
    """Whether the job planned no test because its change has no change unit at all (files
    changed, but only comments or formatting: no definition's AST differs) and its plan is no
    fallback."""
    if job.tests_total:
        return False
    stored = session.scalar(select(Selection).where(Selection.job_pk == job.id).limit(1))
    if stored is None or stored.fallbacks or (stored.plan or {}).get("fallback"):
        return False
    changes = (stored.stage_counts or {}).get("changes") or {}
    return changes.get("in", 0) > 0 and changes.get("out") == 0


def selection_of(session: Session, *, job_pk: int) -> Selection | None:
    """The job's stored selection (None before it is planned)."""
    return session.scalar(select(Selection).where(Selection.job_pk == job_pk))


def plan_of(session: Session, *, job_pk: int) -> Any:
    """The job's stored plan (its JSON column alone), None without a selection."""
    return session.scalar(select(Selection.plan).where(Selection.job_pk == job_pk))


def tests_query(
    *, job_pk: int, kind: str | None = None, shard: int | None = None, mode: str | None = None
) -> Select[Any]:
    """The per-test records of the job's selection, optionally one kind (selected, cut,
    removed), one shard, one spec mode; unordered (the caller pages it)."""
    query = select(SelectionTest).where(SelectionTest.job_pk == job_pk)
    if kind is not None:
        query = query.where(SelectionTest.kind == kind)
    if shard is not None:
        query = query.where(SelectionTest.shard == shard)
    if mode is not None:
        query = query.where(SelectionTest.mode == mode)
    return query
