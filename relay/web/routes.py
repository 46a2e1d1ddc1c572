"""Every HUD page in one router, included by :func:`relay.app.create_app`."""

from __future__ import annotations

from fastapi import APIRouter

from relay.web import authoring, pages

router = APIRouter(include_in_schema=False)
router.include_router(pages.router)
router.include_router(authoring.router)
