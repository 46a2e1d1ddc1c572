"""Every HUD page in one router, included by :func:`relay.app.create_app`."""

from __future__ import annotations

from fastapi import APIRouter

from relay.web import authoring, pages

# in the OpenAPI document (tag "pages") so that the schema's fuzz reaches them too
router = APIRouter(
    tags=["pages"],
    responses={
        404: {"description": "no such job, test or asset"},
        422: {"description": "a filter or parameter out of range (an HTML page saying which)"},
    },
)
router.include_router(pages.router)
router.include_router(authoring.router)
