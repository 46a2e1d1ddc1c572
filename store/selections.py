"""What a job's stored selection says about its change."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.models import Job, Selection


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
