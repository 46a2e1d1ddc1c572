"""``/docs`` (Swagger UI) and ``/redoc`` served with their assets from the app itself, so they
work on a machine without the internet. The assets come from a package installed with the
project (``fastapi-offline``, whose static folder ships Swagger UI's bundle and stylesheet and
ReDoc's standalone script); only its files are used."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

#: where the app serves the documentation assets
ASSETS_URL = "/static/docs"


def assets_dir() -> Path:
    import fastapi_offline

    return Path(fastapi_offline.__file__).resolve().parent / "static"


def add_docs(app: FastAPI) -> None:
    """Mount the assets and add ``/docs``, its OAuth2 redirect and ``/redoc`` to ``app`` (built
    with ``docs_url=None, redoc_url=None``)."""
    app.mount(ASSETS_URL, StaticFiles(directory=assets_dir()), name="docs-assets")
    title = app.title
    openapi_url = app.openapi_url or "/openapi.json"
    redirect_url = "/docs/oauth2-redirect"

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{title} - Swagger UI",
            oauth2_redirect_url=redirect_url,
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
        )

    @app.get(redirect_url, include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{title} - ReDoc",
            redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        )
