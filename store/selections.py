"""Data access for a job's stored selection: the plan, its per-test records, and what it says
about its change."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from store.models import Job, Selection, SelectionTest


def nothing_to_test(session: Session, *, job: Job) -> str | None:
    """Why the job planned no test although nothing stopped it, or None when it did not: its
    files changed but no definition's AST differs (only comments or formatting), or every
    change unit was accounted for by a signal and reaches no variant this backend runs (a
    helper of an op the universe has no variant of, code for other devices only, a spec's
    ``skip``). Not when its plan is a fallback or its budget cut what the change reaches."""
    if job.tests_total:
        return None
    stored = session.scalar(select(Selection).where(Selection.job_pk == job.id).limit(1))
    if stored is None or stored.fallbacks:
        return None
    plan, counts = stored.plan or {}, stored.stage_counts or {}
    changes, budget = counts.get("changes") or {}, counts.get("budget") or {}
    cut = (plan.get("counts") or {}).get("cut") or budget.get("in", 0) - budget.get("out", 0)
    if plan.get("fallback") or plan.get("unexplained") or cut or not changes.get("in"):
        return None
    if changes.get("out") == 0:
        return "nothing to test: only comments or formatting changed (no definition's AST differs)"
    explained = plan.get("explained") or {}
    shown = "; ".join(
        f"{unit.rpartition('::')[2] or unit} ({str(why[0]) if why else 'accounted for'})"
        for unit, why in sorted(explained.items())[:2]
    )
    more = f" (+{len(explained) - 2} more)" if len(explained) > 2 else ""
    return (
        f"nothing to test: the change's {changes['out']} unit(s) reach no variant this backend "
        f"runs: {shown}{more}"
    )


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
