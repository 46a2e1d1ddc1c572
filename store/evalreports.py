"""The reports of ``relay eval`` in the database: written by the command, read by the replay
pages of any API host (no file of the machine that ran the evaluation is needed)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from store.models import EvalReport

#: a report's Markdown is cut to this many characters (the tables are a few kB)
MAX_TEXT = 1_000_000


def save(
    session: Session, *, name: str, kind: str, text: str, scores: Any | None = None
) -> int:
    """Store one report (commits); its id."""
    row = EvalReport(name=name[:200], kind=kind[:20], text=text[:MAX_TEXT], scores=scores)
    session.add(row)
    session.commit()
    return row.id


def newest(session: Session) -> list[EvalReport]:
    """The newest report of each name, by name."""
    last = select(func.max(EvalReport.id)).group_by(EvalReport.name)
    return list(
        session.scalars(select(EvalReport).where(EvalReport.id.in_(last)).order_by(EvalReport.name))
    )
