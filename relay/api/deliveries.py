"""``/api/v1/deliveries``: the stored webhook deliveries, newest first."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request
from pydantic import BaseModel
from sqlalchemy import select

from store.db import session_scope
from store.models import Delivery, DeliveryState

router = APIRouter(tags=["api"])


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


def _public(row: Delivery) -> DeliveryPublic:
    return DeliveryPublic.model_validate(row, from_attributes=True)


@router.get("/deliveries", response_model=list[DeliveryPublic])
def list_deliveries(
    request: Request,
    state: DeliveryState | None = None,
    limit: int = Query(default=50, ge=1, le=500),
) -> list[DeliveryPublic]:
    """Most recent deliveries first, optionally filtered by state."""
    query = select(Delivery).order_by(Delivery.id.desc()).limit(limit)
    if state is not None:
        query = query.where(Delivery.state == state.value)
    with session_scope(request.app.state.settings.database_url) as session:
        return [_public(r) for r in session.scalars(query)]


@router.get(
    "/deliveries/{delivery_id}",
    response_model=DeliveryPublic,
    responses={404: {"description": "no such delivery"}},
)
def get_delivery(request: Request, delivery_id: str) -> DeliveryPublic:
    with session_scope(request.app.state.settings.database_url) as session:
        row = session.scalar(select(Delivery).where(Delivery.delivery_id == delivery_id))
        if row is None:
            raise HTTPException(status_code=404, detail=f"no delivery {delivery_id}")
        return _public(row)
