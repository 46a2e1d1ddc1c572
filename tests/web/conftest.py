"""Fixtures of the HUD's tests.

In process: ``hud`` (per module, once on SQLite and once on PostgreSQL): a migrated database
seeded with the runner's history and the health cases (:mod:`tests.support.hud_seed`), and a
TestClient on ``create_app`` over it.

In a browser: ``browser`` (Debian's chromium driven by Playwright through ``executable_path``;
nothing is downloaded) and ``hud_stack``: `relay up` on SQLite + the embedded broker with the same
seeded history, per module.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.hud_seed import HEALTH_CASES, SeededRuns, seed_health, seed_runs

#: every seeded time is relative to this instant (the health verdicts are evaluated at it)
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@dataclass
class Hud:
    client: Any
    settings: Any
    runs: SeededRuns
    health: dict[str, tuple[str, set[str]]]
    now: datetime = NOW
    cases: Any = None


def _test_client() -> type:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        from starlette.testclient import TestClient
    return TestClient


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def hud(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, relay_up: Any,
    fresh_postgres_database: Any,
) -> Iterator[Hud]:  # fmt: skip
    from relay.app import create_app
    from store import migrate
    from store.db import dispose_engines
    from store.settings import Settings

    tmp = tmp_path_factory.mktemp(f"hud-{request.param}")
    with (
        fresh_postgres_database()
        if request.param == "postgres"
        else _sqlite(tmp)
    ) as database_url:  # fmt: skip
        migrate.upgrade(database_url)
        runs = seed_runs(database_url, now=NOW, var_dir=tmp)
        health = seed_health(database_url, now=NOW)
        settings = Settings(
            env="development", database_url=database_url, var_dir=str(tmp),
            broker_url=f"sqla+sqlite:///{tmp}/broker.sqlite", webhook_secrets=relay_up.SECRETS,
            upstream_repo=relay_up.UPSTREAM, log_json=False,
        )  # fmt: skip
        client = _test_client()(create_app(settings, enqueue=lambda pk, delivery_id: True))
        try:
            yield Hud(client=client, settings=settings, runs=runs, health=health,
                      cases=HEALTH_CASES)  # fmt: skip
        finally:
            client.close()
            dispose_engines()


class _sqlite:
    def __init__(self, tmp: Path) -> None:
        self.url = f"sqlite:///{tmp / 'hud.sqlite'}"

    def __enter__(self) -> str:
        return self.url

    def __exit__(self, *exc: object) -> None:
        return None


def chromium_path() -> str | None:
    """Debian's chromium (``apt-get install chromium``; ``.ci/run`` installs it)."""
    return os.environ.get("HUD_CHROMIUM") or shutil.which("chromium")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Headless chromium through Playwright, the system binary (never a downloaded build)."""
    path = chromium_path()
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (.ci/run installs Debian's package)")
        pytest.skip("chromium is not installed: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class HudStack:
    stack: Any
    runs: SeededRuns
    health: dict[str, tuple[str, set[str]]]
    now: datetime = NOW

    @property
    def url(self) -> str:
        return self.stack.base_url


@pytest.fixture(scope="module")
def hud_stack(tmp_path_factory: pytest.TempPathFactory, relay_up: Any) -> Iterator[HudStack]:
    """`relay up` (SQLite + embedded broker, runner off) with the seeded history."""
    tmp = tmp_path_factory.mktemp("hud-stack")
    stack = relay_up.local(tmp)
    try:
        runs = seed_runs(stack.database_url, now=NOW, var_dir=tmp)
        health = seed_health(stack.database_url, now=NOW)
        yield HudStack(stack=stack, runs=runs, health=health)
    finally:
        stack.stop()
