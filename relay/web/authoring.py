"""The pages behind a run: release replays (``/replays``), the spec authoring view (``/specs``)
and the raw delivery log (``/deliveries``, "why wasn't my repo triggered?"); and what the test
page shows of a test's spec entry.

Spec files are read from the runner's backend (``RELAY_RUNNER_SPECS``, else the backend's own),
and parsed, linted and resolved once per change of their files (a small cache keyed by their
modification times); nothing here collects or runs tests.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from threading import Lock
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from backends import get_backend
from backends.base import PROJECT_ROOT
from relay.api import hud as api
from relay.api.pagination import Page
from relay.web import charts
from relay.web.render import paging, render
from store import deliveries as delivery_rows
from store import evalreports, hud, outbox, results
from store import jobs as job_rows
from store.db import session_scope
from store.models import Delivery, DeliveryState
from store.paging import page_rows
from wire.values import Id

router = APIRouter()


# ----------------------------------------------------------------------------- specs


@dataclass
class EntryView:
    index: int
    names: list[str]
    mode: str
    tags: list[str]
    owner: str | None
    expires: dt.date | None
    reason: str | None
    expired: bool
    decided: dict[str, int] = field(default_factory=dict)  # outcome -> results it decided


@dataclass
class FileView:
    path: str
    unlisted_mode: str
    entries: list[EntryView]


@dataclass
class SpecView:
    files: list[Path]
    compiled: Any = None
    document: Any = None
    file_views: list[FileView] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    error: str | None = None


_LOCK = Lock()
_SPECS: dict[tuple[Any, ...], SpecView] = {}


def spec_files(settings: Any) -> list[Path]:
    configured = [Path(p) for p in getattr(settings, "runner_specs", []) or []]
    backend = get_backend(getattr(settings, "runner_backend", "spyre"))
    roots = configured or list(backend.default_specs)
    out: list[Path] = []
    for root in roots:
        out += sorted(root.rglob("*.y*ml")) if root.is_dir() else [root]
    return [p for p in out if p.is_file()]


def load_specs(settings: Any) -> SpecView:
    """The runner's spec files loaded, merged, compiled and linted (cached by mtime)."""
    files = spec_files(settings)
    key = tuple((str(p), p.stat().st_mtime_ns) for p in files)
    with _LOCK:
        if key in _SPECS:
            return _SPECS[key]
    view = SpecView(files=files)
    try:
        from testspecs.compiled import compile_spec
        from testspecs.lint import lint
        from testspecs.loader import load_files
        from testspecs.merge import merge

        merged = merge(load_files(files))
        view.document = merged.document
        view.compiled = compile_spec(
            merged.document,
            device=getattr(settings, "runner_backend", "spyre"),
            device_root=str(PROJECT_ROOT),
        )
        today = dt.date.today()
        for f in merged.document.files:
            entries = []
            for i, t in enumerate(f.tests):
                ext = t.ext
                expires = ext.expires if ext else None
                entries.append(
                    EntryView(
                        index=i,
                        names=list(t.names),
                        mode=t.effective_mode,
                        tags=list(t.tags),
                        owner=ext.owner if ext else None,
                        expires=expires,
                        reason=ext.reason if ext else None,
                        expired=bool(
                            expires and expires < today and t.effective_mode.startswith("xfail")
                        ),
                    )
                )
            view.file_views.append(FileView(f.path, f.unlisted_test_mode, entries))
        view.findings = [str(x) for x in lint(list(files), device_root=PROJECT_ROOT)]
    except Exception as exc:  # a spec that does not load is shown, not raised
        view.error = f"{type(exc).__name__}: {exc}"
    with _LOCK:
        _SPECS[key] = view
    return view


def spec_decision(
    settings: Any, test_id: str, *, op: str | None, dtype: str | None
) -> dict[str, Any] | None:
    """How the runner's spec decides ``test_id``: mode, rule, reason, the deciding entry and its
    owner and expiry (None without a spec)."""
    view = load_specs(settings)
    if view.compiled is None:
        return None if view.error is None else {"error": view.error}
    from testspecs.resolve import resolve

    try:
        d = resolve(view.compiled, test_id, op=op, dtype=dtype)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    entry = None
    if d.entry is not None:
        for f in view.file_views:
            if f.path == d.entry.spec_path and d.entry.index < len(f.entries):
                entry = f.entries[d.entry.index]
    return {"decision": d, "entry": entry, "where": str(d.entry) if d.entry else None}


@router.get("/specs", response_class=HTMLResponse)
def specs(request: Request) -> HTMLResponse:
    """The authoring view: each spec entry with what it decided in the latest run, expired
    xfails and lint findings."""
    settings = request.app.state.settings
    view = load_specs(settings)
    job_id = None
    with session_scope(settings.database_url) as session:
        job_id, rows = results.latest_job_results(session)
    decided_by = _decided(view, job_id, rows)
    shown = [
        str(p.relative_to(PROJECT_ROOT)) if p.is_relative_to(PROJECT_ROOT) else str(p)
        for p in view.files
    ]
    return render(
        request,
        "specs.html",
        title="Specs",
        view=view,
        job_id=job_id,
        decided=decided_by,
        results=len(rows),
        files=shown,
    )


_DECIDED: dict[tuple[Any, ...], dict[tuple[str, int], dict[str, int]]] = {}


def _decided(
    view: SpecView, job_id: int | None, rows: list[Any]
) -> dict[tuple[str, int], dict[str, int]]:
    """(file path, entry index) -> outcome -> results of the run that entry decided."""
    if view.compiled is None or job_id is None:
        return {}
    key = (id(view), job_id, len(rows))
    if key in _DECIDED:
        return _DECIDED[key]
    from testspecs.resolve import resolve

    out: dict[tuple[str, int], dict[str, int]] = {}
    for test_id, outcome, op, dtype in rows:
        try:
            d = resolve(view.compiled, test_id, op=op, dtype=dtype)
        except Exception:
            continue
        where = (
            (d.entry.spec_path, d.entry.index) if d.entry else ("(no entry: " + d.rule + ")", -1)
        )
        bucket = out.setdefault(where, {})
        bucket[outcome] = bucket.get(outcome, 0) + 1
    _DECIDED.clear()
    _DECIDED[key] = out
    return out


# ----------------------------------------------------------------------------- replays


def recall_tables(session: Session) -> list[tuple[str, list[list[str]]]]:
    """The Markdown tables of the newest ``relay eval`` report of each name (stored in the
    database by the command, so any API host shows them)."""
    out = []
    for report in evalreports.newest(session):
        rows = [
            [c.strip() for c in line.strip().strip("|").split("|")]
            for line in report.text.splitlines()
            if line.startswith("|") and not re.fullmatch(r"\|[\s|:-]+\|", line.strip())
        ]
        if rows:
            out.append((report.name, rows))
    return out


@router.get("/replays", response_class=HTMLResponse)
def replays(request: Request) -> HTMLResponse:
    settings = request.app.state.settings
    with session_scope(settings.database_url) as session:
        jobs = job_rows.jobs_of_event_type(session, event_type="periodic", limit=50)
        recall = recall_tables(session)
    return render(
        request,
        "replays.html",
        title="Release replays",
        jobs=jobs,
        recall=recall,
    )


@router.get("/replays/{job_id}", response_class=HTMLResponse)
def replay(request: Request, job_id: Id) -> HTMLResponse:
    """A release replay: its funnel, counts per suite and per op, and the recall tables of
    ``relay eval`` when they were made."""
    settings = request.app.state.settings
    with session_scope(settings.database_url) as session:
        try:
            view = api.run_view(session, job_id)
        except Exception:
            return render(
                request,
                "missing.html",
                status_code=404,
                title="No such replay",
                what=f"There is no job {job_id}.",
            )
        facets = hud.facets(session, job_pk=job_id)
        recall = recall_tables(session)
    return render(
        request,
        "replay.html",
        title=f"Replay {job_id}",
        run=view,
        facets=facets,
        funnel=charts.funnel([(s.stage, s.count_in, s.count_out) for s in view.funnel]),
        recall=recall,
    )


# ----------------------------------------------------------------------------- deliveries


@router.get("/deliveries", response_class=HTMLResponse)
def deliveries(
    request: Request,
    state: str | None = Query(default=None, max_length=20),
    offset: int = Query(default=0, ge=0, le=10**9),
) -> HTMLResponse:
    """Every delivery as it arrived, its state, why it was ignored or failed, and what each
    downstream's dispatch became."""
    states = [s.value for s in DeliveryState]
    errors = [] if not state or state in states else [f"unknown state {state!r}"]
    with session_scope(request.app.state.settings.database_url) as session:
        query = delivery_rows.deliveries_query(state=state if state and not errors else None)
        found = page_rows(session, query, key=Delivery.id, limit=50, offset=offset)
        rows = found.rows
        dispatches = outbox.dispatches_of_deliveries(session, delivery_pks=[r.id for r in rows])
        listed = outbox.all_downstreams(session)
    page: Page[Any] = Page(items=rows, total=found.total, limit=50, offset=offset)
    return render(
        request,
        "deliveries.html",
        status_code=422 if errors else 200,
        title="Deliveries",
        rows=rows,
        dispatches=dispatches,
        paging=paging(request, page),
        states=states,
        state=state,
        errors=errors,
        downstreams=listed,
    )
