"""The HUD's pages: server-rendered HTML from the same data the ``/api/v1/hud`` endpoints serve,
with a little hand-written JavaScript for live progress and keyboard navigation (the pages work
without it). Charts are inline SVG drawn on the server; every asset is in this package, nothing
is fetched from elsewhere.

``router`` is included by :func:`relay.app.create_app`.
"""

from __future__ import annotations

from fastapi import APIRouter

from relay.web import authoring, pages

router = APIRouter(include_in_schema=False)
router.include_router(pages.router)
router.include_router(authoring.router)
