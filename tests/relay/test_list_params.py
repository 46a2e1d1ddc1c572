"""Every list endpoint of the API answers the same to a query parameter it does not declare or
cannot parse: 422 naming the parameter (issue #31: /api/v1/dispatches answered 200)."""

from __future__ import annotations

from typing import Any

import pytest


def _list_paths() -> list[str]:
    """The API's GET endpoints without path parameters (its lists and its single documents),
    from the app's OpenAPI document."""
    from config.settings import Settings
    from relay.app import create_app

    app = create_app(Settings(env="development", database_url="sqlite://", log_json=False))
    return sorted(
        path
        for path, operations in app.openapi()["paths"].items()
        if path.startswith("/api/v1/") and "get" in operations and "{" not in path
    )


LISTS = _list_paths()


def test_the_dispatches_are_among_the_lists() -> None:
    assert "/api/v1/dispatches" in LISTS and "/api/v1/jobs" in LISTS


@pytest.mark.parametrize("path", LISTS)
def test_an_unknown_parameter_is_named(client: Any, path: str) -> None:
    response = client.get(path, params={"bogus": "1"})
    assert response.status_code == 422, response.text
    assert "unknown query parameter(s) bogus" in response.json()["detail"]


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ({"offset": "abc"}, "query.offset"),
        ({"limit": "0"}, "query.limit"),
        ({"limit": "1e3"}, "query.limit"),
        ({"state": "nope"}, "query.state"),
        ({"cursor": "bm9wZQ"}, "cursor"),
        ({"repo": "a\x00b"}, "query.repo"),
    ],
)
def test_the_dispatches_refuse_malformed_parameters(
    client: Any, query: dict[str, str], named: str
) -> None:
    response = client.get("/api/v1/dispatches", params=query)
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith(named)


def test_the_dispatches_are_one_page_envelope(client: Any) -> None:
    response = client.get("/api/v1/dispatches", params={"limit": "5"})
    assert response.status_code == 200
    assert response.json() == {
        "items": [],
        "total": 0,
        "limit": 5,
        "offset": 0,
        "next_cursor": None,
    }
