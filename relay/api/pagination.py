"""One way to page every list endpoint of the API.

Every list answers the same envelope, :class:`Page`: ``{"items": [...], "total": N, "limit": L,
"offset": O, "next_cursor": C}`` (``total`` counts every row the filters match, not the page),
with a ``Link: <...>; rel="next"`` header while there is a next page. A client pages either by
``offset`` (jump anywhere; rows inserted meanwhile shift the pages) or by ``cursor`` (the
``next_cursor`` of the previous page: keyset paging on the list's key, stable while rows are
added). Both at once, a cursor this API did not issue, a query parameter the endpoint does not
declare, or a filter value outside its vocabulary (declare it as an enum) are 422 with a
one-line reason, never an empty 200.

An endpoint declares ``params: PageParams = Depends(page_params())`` (with its own default and
maximum limit) and returns :func:`paginate` of its filtered, unordered query (the key orders
it), or builds a :class:`Page` itself with :func:`page_of` when its rows do not come from one
query.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, get_args, get_type_hints

from fastapi import HTTPException, Query, Request, Response
from fastapi.dependencies.models import Dependant
from pydantic import BaseModel, Field, create_model
from sqlalchemy import Select
from sqlalchemy.orm import InstrumentedAttribute, Session

from store.paging import page_rows

T = TypeVar("T")

CURSOR_PREFIX = "c1:"  # the cursor format's version
#: the largest id or number a query may name (PostgreSQL's INTEGER; larger is refused, 422)
MAX_INT = 2**31 - 1
#: a string parameter without NUL characters (PostgreSQL refuses them in text)
NO_NUL = r"^[^\x00]*$"


class Page(BaseModel, Generic[T]):
    """One page of a list: the items, how many rows match in all, and how to get the next."""

    items: list[T]
    total: int = Field(description="rows matching the filters, on every page")
    limit: int
    offset: int = Field(description="rows before this page (0 when paged by cursor)")
    next_cursor: str | None = Field(
        default=None, description="pass as ?cursor= for the next page; null on the last page"
    )


@dataclass(frozen=True)
class PageParams:
    limit: int
    offset: int
    cursor: str | None  # the key of the last row of the previous page
    request: Request
    response: Response


def encode_cursor(key: int | str) -> str:
    raw = f"{CURSOR_PREFIX}{type(key).__name__[0]}:{key}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> int | str:
    """The key inside a cursor (422 when it is not one this API issued)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raw = ""
    if raw.startswith(CURSOR_PREFIX):
        kind, _, value = raw[len(CURSOR_PREFIX) :].partition(":")
        if kind == "s" and "\x00" not in value:
            return value
        if kind == "i" and re.fullmatch(r"-?[0-9]{1,18}", value):
            return int(value)
    raise HTTPException(status_code=422, detail="cursor: not a cursor this API issued")


def page_params(*, default_limit: int = 50, max_limit: int = 500) -> Callable[..., PageParams]:
    """The dependency of a list endpoint: ``limit`` (1..max_limit), ``offset`` or ``cursor``;
    it also refuses query parameters the endpoint does not declare."""

    def dependency(
        request: Request,
        response: Response,
        limit: int = Query(default=default_limit, ge=1, le=max_limit, description="page size"),
        offset: int | None = Query(default=None, ge=0, le=10**9, description="rows to skip"),
        cursor: str | None = Query(
            default=None, max_length=200, description="next_cursor of the previous page"
        ),
    ) -> PageParams:
        if offset is not None and cursor is not None:
            raise HTTPException(status_code=422, detail="offset and cursor: give one, not both")
        reject_unknown_params(request)
        return PageParams(
            limit=limit, offset=offset or 0, cursor=cursor, request=request, response=response
        )

    return dependency


def reject_unknown_params(request: Request) -> None:
    """422 naming the query parameters the matched endpoint does not declare (a misspelt filter
    would otherwise be ignored and answer everything)."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    unknown = sorted(set(request.query_params) - _declared(dependant))
    if unknown:
        allowed = ", ".join(sorted(_declared(dependant))) or "none"
        raise HTTPException(
            status_code=422,
            detail=f"unknown query parameter(s) {', '.join(unknown)}; this endpoint takes: {allowed}",
        )


def _declared(dependant: Dependant) -> set[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _declared(sub)
    return names


def paginate(
    session: Session,
    query: Select[Any],
    *,
    key: InstrumentedAttribute[Any],
    params: PageParams,
    descending: bool = True,
    public: Callable[[Any], T] | None = None,
    public_rows: Callable[[Sequence[Any]], Sequence[T]] | None = None,
) -> Page[T]:
    """One page of ``query`` (filtered, not ordered or limited) ordered by ``key`` (unique:
    a primary key), newest first when ``descending``. ``public`` turns a row into its item;
    or ``public_rows`` turns the page's rows into their items all at once (to look up what
    they link to in one query)."""
    after = decode_cursor(params.cursor) if params.cursor is not None else None
    page = page_rows(
        session,
        query,
        key=key,
        limit=params.limit,
        offset=params.offset,
        after=after,
        descending=descending,
    )
    rows = page.rows
    next_key = getattr(rows[-1], key.key) if page.more and rows else None
    if public_rows is not None:
        items = list(public_rows(rows))
    elif public is not None:
        items = [public(r) for r in rows]
    else:
        items = rows
    return page_of(items, total=page.total, params=params, next_key=next_key)


def page_of(
    items: Sequence[T], *, total: int, params: PageParams, next_key: int | str | None
) -> Page[T]:
    """The Page of ``items`` (already cut to ``params.limit``); ``next_key``: the key of the last
    item when more rows follow, else None. Sets the ``Link`` header of the next page."""
    cursor = encode_cursor(next_key) if next_key is not None else None
    if cursor is not None:
        url = params.request.url.remove_query_params("offset").include_query_params(cursor=cursor)
        params.response.headers["Link"] = f'<{url}>; rel="next"'
    return Page(
        items=list(items),
        total=total,
        limit=params.limit,
        offset=0 if params.cursor is not None else params.offset,
        next_cursor=cursor,
    )


def row_model(orm: type[Any], name: str, *, exclude: Sequence[str] = ()) -> type[BaseModel]:
    """The public model of a table's row, derived from its mapped columns (their order, Python
    types and nullability) instead of restated: a column the store adds or renames shows in the
    API and its schema, and nothing else has to follow."""
    hints = get_type_hints(orm)
    fields: dict[str, Any] = {
        column.key: (get_args(hints[column.key])[0], ...)
        for column in orm.__table__.columns
        if column.key not in exclude
    }
    return create_model(name, **fields)
