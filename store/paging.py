"""One page of a filtered query, by offset or by keyset (the rows after a key), with the count
of every row the filters match: the query side of the API's pages (``relay.api.pagination``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.orm import InstrumentedAttribute, Session


@dataclass(frozen=True)
class Rows:
    """The rows of one page, how many rows match in all, and whether more follow."""

    rows: list[Any]
    total: int
    more: bool


def page_rows(
    session: Session,
    query: Select[Any],
    *,
    key: InstrumentedAttribute[Any],
    limit: int,
    offset: int = 0,
    after: int | str | None = None,
    descending: bool = True,
    scalars: bool = True,
) -> Rows:
    """Up to ``limit`` rows of ``query`` (filtered, not ordered or limited) ordered by ``key``
    (unique: a primary key), newest first when ``descending``; after the key ``after`` when
    given (keyset), else after ``offset`` rows. ``scalars``: the first entity of each row, else
    whole rows (tuples)."""
    counted = select(func.count()).select_from(query.order_by(None).subquery())
    total = int(session.scalar(counted) or 0)
    ordered = query.order_by(key.desc() if descending else key.asc())
    if after is not None:
        ordered = ordered.where(key < after if descending else key > after)
    else:
        ordered = ordered.offset(offset)
    limited = ordered.limit(limit + 1)
    rows = list(session.scalars(limited)) if scalars else list(session.execute(limited).all())
    return Rows(rows=rows[:limit], total=total, more=len(rows) > limit)
