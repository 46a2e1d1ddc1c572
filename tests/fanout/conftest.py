"""Fixtures of the relay role's tests: the fake GitHub API over HTTP on loopback, a local OIDC
issuer, and ``bench(...)``: the app in process with an allowlist, a policy and a migrated
database (SQLite, or PostgreSQL with ``database="postgres"``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.support.fake_github import FakeGitHub
    from tests.support.relay_role import Bench


@pytest.fixture
def fake_github() -> Iterator[FakeGitHub]:
    from tests.support.fake_github import FakeGitHub, serve

    with serve(FakeGitHub()) as fake:
        yield fake


@pytest.fixture
def github_answers() -> Any:
    """Scripted answers of the fake GitHub: ``server_error(status)``, ``rate_limited(retry_after,
    reset_in)``, ``slow(seconds)``."""
    from tests.support import fake_github

    return fake_github


@pytest.fixture
def serve_app() -> Any:
    """``with serve_app(app) as url``: the app under uvicorn on loopback."""
    from tests.support.relay_role import serve_app

    return serve_app


@pytest.fixture
def issuer() -> Iterator[Any]:
    """A local OIDC issuer (JWKS over HTTP) whose tokens the bench's app accepts."""
    from tests.support.oidc_issuer import serve_issuer

    with serve_issuer() as running:
        yield running


@pytest.fixture
def bench(
    issuer: Any,
    tmp_path: Path,
    fake_github: FakeGitHub,
    fresh_postgres_database: Callable[[], Any],
) -> Iterator[Callable[..., Bench]]:
    """``bench(repos, policy="", database="sqlite", **settings)``."""
    from pydantic import SecretStr

    from config.settings import Settings
    from relay.app import create_app
    from store import migrate
    from store.db import dispose_engines
    from tests.support import relay_role as support

    stack = ExitStack()
    clients: list[Any] = []

    def make(
        repos: dict[str, list[str]], policy: str = "", database: str = "sqlite", **extra: Any
    ) -> Bench:
        if database == "postgres":
            url = stack.enter_context(fresh_postgres_database())
        else:
            url = f"sqlite:///{tmp_path}/relay-{len(clients)}.sqlite"
        migrate.upgrade(url)
        allow = tmp_path / f"allowlist-{len(clients)}.yml"
        allow.write_text(support.allowlist_text(repos))
        policy_path = tmp_path / f"policy-{len(clients)}.yml"
        policy_path.write_text(policy)
        values: dict[str, Any] = {
            "env": "development",
            "database_url": url,
            "broker_url": f"sqla+sqlite:///{tmp_path}/broker.sqlite",
            "webhook_secrets": [SecretStr(support.SECRET)],
            "upstream_repo": support.UPSTREAM,
            "runner_enabled": False,
            "allowlist_source": str(allow),
            "policy_path": policy_path,
            "allowlist_reload_seconds": 0,
            "github_api_url": fake_github.url,
            "github_app_id": fake_github.app_id,
            "github_app_private_key": SecretStr(fake_github.private_key_pem),
            "dispatch_backoff_seconds": 0.05,
            "dispatch_backoff_max_seconds": 0.2,
            "dispatch_max_attempts": 4,
            "log_json": False,
            "oidc_issuers": {issuer.url: issuer.jwks_url},
            **extra,
        }
        settings = Settings(**values)
        client = support.client_class()(create_app(settings))
        clients.append(client)
        made = support.Bench(
            settings=settings,
            github=fake_github,
            client=client,
            allowlist=allow,
            policy=policy_path,
        )
        benches.append(made)
        return made

    benches: list[Bench] = []
    yield make
    for client in clients:
        client.close()
    for made in benches:
        if made.api is not None:
            made.api.close()
    dispose_engines()
    stack.close()
