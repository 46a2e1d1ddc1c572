"""The HUD side of CRCR: result rows from relay envelopes (``POST /api/crcr/results``), keyed
like the PyTorch HUD (``repo/delivery_id/workflow/job/check_run_id``). A later envelope writes
only its non-null fields, so ``completed`` does not erase the ``queue_time`` of ``in_progress``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from store.models import CrcrResult


def upsert(session: Session, *, row_key: str, values: dict[str, Any]) -> tuple[int, bool]:
    """Insert or fill the row (commits); returns (pk, created)."""
    for _ in range(3):
        row = session.scalar(select(CrcrResult).where(CrcrResult.row_key == row_key))
        if row is None:
            row = CrcrResult(row_key=row_key, **{k: v for k, v in values.items() if v is not None})
            session.add(row)
            try:
                session.commit()
                return row.id, True
            except IntegrityError:
                session.rollback()
                continue
        for name, value in values.items():
            if value is not None:
                setattr(row, name, value)
        session.commit()
        return row.id, False
    raise RuntimeError(f"result {row_key} changed under three attempts in a row")


def listing(session: Session, *, repo: str | None = None, limit: int = 100) -> list[CrcrResult]:
    query = select(CrcrResult).order_by(CrcrResult.id.desc()).limit(limit)
    if repo is not None:
        query = query.where(CrcrResult.downstream_repo == repo)
    return list(session.scalars(query))
