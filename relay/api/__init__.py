"""The versioned status API (``/api/v1``), one router per area."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from relay.api import deliveries, hud, hud_tests, jobs
from relay.api.pagination import reject_unknown_params

# every endpoint refuses query parameters it does not declare (422 naming them)
router = APIRouter(prefix="/api/v1", dependencies=[Depends(reject_unknown_params)])
router.include_router(deliveries.router)
router.include_router(jobs.router)
router.include_router(hud.router)
router.include_router(hud_tests.router)
