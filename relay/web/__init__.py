"""The HUD's pages: server-rendered HTML from the same data the ``/api/v1/hud`` endpoints serve,
with a little hand-written JavaScript for live progress and keyboard navigation (the pages work
without it). Charts are inline SVG drawn on the server; every asset is in this package, nothing
is fetched from elsewhere.

:data:`relay.web.routes.router` (every page) is included by :func:`relay.app.create_app`; the
package imports nothing itself, so its modules can import each other without a cycle.
"""
