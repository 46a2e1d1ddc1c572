"""``/api/v1/deliveries``: the stored webhook deliveries, newest first, each with the jobs it
started (and each job links back to its delivery)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request
from pydantic import BaseModel

from relay.api.pagination import MAX_INT, NO_NUL, Page, PageParams, page_params, paginate
from store import deliveries
from store import jobs as job_rows
from store.db import session_scope
from store.models import Delivery, DeliveryState
from wire.github.events import MAX_DELIVERY_ID

router = APIRouter(tags=["api"])


class DeliveryEvent(enum.StrEnum):
    """The upstream events a delivery can be stored as."""

    PULL_REQUEST = "pull_request"
    PUSH = "push"
    CHECK_RUN = "check_run"
    CHECK_SUITE = "check_suite"
    NIGHTLY = "nightly"
    PERIODIC = "periodic"


class DeliveryLinks(BaseModel):
    self: str
    jobs: list[str]  # /api/v1/jobs/{id} of every job this delivery started


class DeliveryPublic(BaseModel):
    delivery_id: str
    event: str
    action: str | None
    repo: str | None
    source: str
    upstream_delivery_id: str | None
    pr_number: int | None
    head_sha: str | None
    base_sha: str | None
    received_at: datetime
    state: str
    attempts: int
    last_error: str | None
    processed_at: datetime | None
    body_sha256: str
    normalized: dict[str, Any] | None
    job_ids: list[int]  # the jobs this delivery started (one per downstream run)
    links: DeliveryLinks


def _public(row: Delivery, job_ids: list[int]) -> DeliveryPublic:
    fields = {k: getattr(row, k) for k in DeliveryPublic.model_fields if hasattr(row, k)}
    base = "/api/v1"
    return DeliveryPublic.model_validate(
        {
            **fields,
            "job_ids": job_ids,
            "links": {
                "self": f"{base}/deliveries/{row.delivery_id}",
                "jobs": [f"{base}/jobs/{pk}" for pk in job_ids],
            },
        }
    )


@router.get(
    "/deliveries",
    response_model=Page[DeliveryPublic],
    responses={422: {"description": "unknown filter value or query parameter, bad paging"}},
)
def list_deliveries(
    request: Request,
    state: DeliveryState | None = None,
    event: DeliveryEvent | None = None,
    pr: int | None = Query(default=None, ge=0, le=MAX_INT, description="upstream PR number"),
    params: PageParams = Depends(page_params(default_limit=50, max_limit=500)),
) -> Page[DeliveryPublic]:
    """Most recent deliveries first, optionally filtered by state, event and PR."""
    query = deliveries.deliveries_query(
        state=None if state is None else state.value,
        event=None if event is None else event.value,
        pr_number=pr,
    )
    with session_scope(request.app.state.settings.database_url) as session:

        def public(rows: Sequence[Delivery]) -> list[DeliveryPublic]:
            jobs = job_rows.jobs_of_deliveries(session, [r.id for r in rows])
            return [_public(r, jobs.get(r.id, [])) for r in rows]

        return paginate(session, query, key=Delivery.id, params=params, public_rows=public)


@router.get(
    "/deliveries/{delivery_id}",
    response_model=DeliveryPublic,
    responses={404: {"description": "no such delivery"}},
)
def get_delivery(
    request: Request,
    delivery_id: str = Path(
        max_length=MAX_DELIVERY_ID, pattern=NO_NUL, description="X-GitHub-Delivery"
    ),
) -> DeliveryPublic:
    with session_scope(request.app.state.settings.database_url) as session:
        row = deliveries.by_delivery_id(session, delivery_id=delivery_id)
        if row is None:
            raise HTTPException(status_code=404, detail=f"no delivery {delivery_id}")
        return _public(row, job_rows.jobs_of_deliveries(session, [row.id]).get(row.id, []))
