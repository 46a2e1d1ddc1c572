"""``/docs`` and ``/redoc`` work offline: every script, stylesheet and icon they load is served
by the app itself (no URL to another host in the pages), and the assets are real."""

from __future__ import annotations

import re
from typing import Any

import pytest


@pytest.mark.parametrize(
    ("page", "assets"),
    [
        ("/docs", {"swagger-ui-bundle.js", "swagger-ui.css", "favicon.png"}),
        ("/redoc", {"redoc.standalone.js", "favicon.png"}),
    ],
)
def test_the_docs_load_everything_from_the_app(client: Any, page: str, assets: set[str]) -> None:
    response = client.get(page)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    html = response.text
    assert "/openapi.json" in html
    # nothing from another host: every URL the page names is a path on this app
    assert re.findall(r"https?://", html) == []
    loaded = set(re.findall(r"""(?:src|href)=["']([^"']+)["']""", html))
    loaded |= set(re.findall(r"""url: ?["']([^"']+\.(?:js|css))["']""", html))
    assert {u.rsplit("/", 1)[-1] for u in loaded if u.startswith("/static/docs/")} == assets
    for name in assets:
        asset = client.get(f"/static/docs/{name}")
        assert asset.status_code == 200, name
        assert len(asset.content) > 4_000, name  # the real bundle, not a placeholder


def test_the_openapi_document_and_the_oauth2_redirect(client: Any) -> None:
    assert client.get("/openapi.json").json()["info"]["title"] == "crcr-relay"
    assert client.get("/docs/oauth2-redirect").status_code == 200
    assert client.get("/static/docs/nope.js").status_code == 404
