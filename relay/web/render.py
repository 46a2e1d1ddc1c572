"""Rendering for the pages: the Jinja2 environment with its filters (UTC times with a relative
hint, durations, shares), the paging links every list shares, and the package's own assets."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import HTTPException, Request, Response
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.templating import Jinja2Templates
from markupsafe import Markup, escape

from relay.api.hud_health import criterion_parts
from relay.api.pagination import Page, PageParams
from store.models import utcnow

HERE = Path(__file__).parent
STATIC = HERE / "static"
ASSETS = {"hud.css": "text/css", "hud.js": "text/javascript", "favicon.svg": "image/svg+xml"}

templates = Jinja2Templates(directory=HERE / "templates")


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def relative(at: datetime | None, now: datetime | None = None) -> str:
    if at is None:
        return ""
    seconds = ((now or utcnow()) - _aware(at)).total_seconds()
    ahead = seconds < 0
    seconds = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            text = f"{seconds / size:.0f} {unit}"
            break
    else:
        text = f"{seconds:.0f} s"
    return f"in {text}" if ahead else f"{text} ago"


def when(at: datetime | None) -> Markup:
    """``<time>`` in UTC with a relative hint (the exact instant in ``datetime``)."""
    if at is None:
        return Markup('<span class="muted">-</span>')
    at = _aware(at)
    return Markup(
        f'<time datetime="{at.isoformat()}" title="{at.isoformat()}">'
        f"{at.strftime('%Y-%m-%d %H:%M')} UTC</time> "
        f'<span class="rel">({escape(relative(at))})</span>'
    )


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3 or seconds == 0:
        return f"{seconds * 1000:.1f} ms"
    return f"{seconds * 1e6:.1f} µs"  # simulated device times of small kernels


def pct(share: float | None) -> str:
    return "-" if share is None else f"{share * 100:.1f} %"


def short(sha: str | None) -> str:
    return "-" if not sha else (sha[:10] if len(sha) == 40 else sha)


def cell_class(status: str | None, conclusion: str | None) -> str:
    if conclusion:
        return f"c-{conclusion}"
    return f"s-{status or 'unknown'}"


templates.env.filters.update(when=when, duration=duration, pct=pct, short=short)
templates.env.globals.update(cell_class=cell_class, criterion_parts=criterion_parts)


def render(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, name, context, status_code=status_code)


def page_params(
    request: Request, *, limit: int, offset: int = 0, cursor: str | None = None
) -> PageParams:
    return PageParams(
        limit=limit, offset=max(offset, 0), cursor=cursor, request=request, response=Response()
    )


def paging(request: Request, page: Page[Any]) -> dict[str, Any]:
    """Links to the previous and next pages of ``page`` (by offset: stable URLs to paste)."""
    params = {k: v for k, v in request.query_params.items() if k not in ("offset", "cursor")}
    first = page.offset + 1 if page.items else 0
    last = page.offset + len(page.items)

    def link(offset: int) -> str:
        query = urlencode({**params, "offset": offset}) if offset else urlencode(params)
        return f"{request.url.path}?{query}" if query else request.url.path

    return {
        "first": first,
        "last": last,
        "total": page.total,
        "prev": link(max(page.offset - page.limit, 0)) if page.offset > 0 else None,
        "next": link(page.offset + page.limit) if last < page.total else None,
    }


def asset(name: str) -> FileResponse:
    if name not in ASSETS:
        raise HTTPException(status_code=404, detail=f"no asset {name}")
    return FileResponse(
        STATIC / name, media_type=ASSETS[name], headers={"Cache-Control": "public, max-age=300"}
    )
