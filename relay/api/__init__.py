"""The versioned status API (``/api/v1``), one router per area."""

from __future__ import annotations

from fastapi import APIRouter

from relay.api import deliveries, hud, jobs

router = APIRouter(prefix="/api/v1")
router.include_router(deliveries.router)
router.include_router(jobs.router)
router.include_router(hud.router)
