"""Fixtures of the HUD's tests.

In process: ``hud`` (per module, once on SQLite and once on PostgreSQL): a migrated database
seeded with the runner's history and the health cases (:mod:`tests.support.hud_seed`), and a
TestClient on ``create_app`` over it.

In a browser: ``browser`` (Debian's chromium driven by Playwright through ``executable_path``;
nothing is downloaded; one per session), ``hud_stack``: `relay up` on SQLite + the embedded broker
with the same seeded history and a release replay, per module; ``tab``: a fresh browser context
on that stack (desktop size) that records console errors, failed requests and any request that
leaves the stack's origin; ``live_run``: a new running job in that stack whose results a test
stores while the page watches.
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

from tests.support.hud_seed import SeededRuns, seed_runs
from tests.support.hud_seed_health import HEALTH_CASES, seed_health
from tests.support.hud_seed_live import LiveRun, seed_live_run, seed_replay

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
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    relay_up: Any,
    fresh_postgres_database: Any,
) -> Iterator[Hud]:
    from config.settings import Settings
    from relay.app import create_app
    from store import migrate
    from store.db import dispose_engines

    tmp = tmp_path_factory.mktemp(f"hud-{request.param}")
    with fresh_postgres_database() if request.param == "postgres" else _sqlite(tmp) as database_url:
        migrate.upgrade(database_url)
        runs = seed_runs(database_url, now=NOW, var_dir=tmp)
        health = seed_health(database_url, now=NOW)
        settings = Settings(
            env="development",
            database_url=database_url,
            var_dir=str(tmp),
            broker_url=f"sqla+sqlite:///{tmp}/broker.sqlite",
            webhook_secrets=relay_up.SECRETS,
            upstream_repo=relay_up.UPSTREAM,
            log_json=False,
        )
        client = _test_client()(create_app(settings))
        try:
            yield Hud(
                client=client, settings=settings, runs=runs, health=health, cases=HEALTH_CASES
            )
        finally:
            client.close()
            dispose_engines()


@pytest.fixture
def empty_hud(tmp_path: Path, relay_up: Any) -> Iterator[Any]:
    """A TestClient on a freshly migrated database: no delivery, no job, no downstream."""
    from config.settings import Settings
    from relay.app import create_app
    from store import migrate
    from store.db import dispose_engines

    url = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    migrate.upgrade(url)
    settings = Settings(
        env="development",
        database_url=url,
        var_dir=str(tmp_path),
        broker_url=f"sqla+sqlite:///{tmp_path}/broker.sqlite",
        webhook_secrets=relay_up.SECRETS,
        upstream_repo=relay_up.UPSTREAM,
        log_json=False,
    )
    client = _test_client()(create_app(settings))
    try:
        yield client
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


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless chromium through Playwright, the system binary (never a downloaded build).
    One per module: while Playwright's sync API is open its event loop runs in the main thread,
    so a test of another module that calls ``asyncio.run`` on the same xdist worker would fail."""
    path = chromium_path()
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (.ci/run installs Debian's package)")
        pytest.skip("chromium is not installed: apt-get install chromium")
    from playwright.sync_api import expect, sync_playwright

    # the machine may be busy: a poll every 2 s must not race expect's default 5 s
    expect.set_options(timeout=20_000)
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
    replay_job: int
    now: datetime = NOW

    @property
    def url(self) -> str:
        return self.stack.base_url

    def api(self, path: str, **params: Any) -> Any:
        """The JSON the status API answers (what the pages must agree with)."""
        import httpx

        response = httpx.get(f"{self.url}{path}", params=params, timeout=30)
        response.raise_for_status()
        return response.json()


@pytest.fixture(scope="module")
def hud_stack(tmp_path_factory: pytest.TempPathFactory, relay_up: Any) -> Iterator[HudStack]:
    """`relay up` (SQLite + embedded broker, runner off) with the seeded history."""
    tmp = tmp_path_factory.mktemp("hud-stack")
    stack = relay_up.local(tmp)
    try:
        runs = seed_runs(stack.database_url, now=NOW, var_dir=tmp)
        health = seed_health(stack.database_url, now=NOW)
        replay = seed_replay(stack.database_url, now=NOW, var_dir=tmp)
        yield HudStack(stack=stack, runs=runs, health=health, replay_job=replay)
    finally:
        stack.stop()


@dataclass
class Tab:
    """One page of a fresh browser context, and what went wrong while it was open."""

    page: Any
    origin: str
    console_errors: list[str]
    failed: list[str]
    foreign: list[str]

    def goto(self, path: str) -> Any:
        response = self.page.goto(f"{self.origin}{path}")
        assert response is not None, path
        return response

    def clean(self) -> None:
        """Nothing failed to load, nothing was logged as an error, nothing left the origin."""
        assert not self.console_errors, self.console_errors
        assert not self.failed, self.failed
        assert not self.foreign, self.foreign


DESKTOP = {"width": 1280, "height": 900}
NARROW = {"width": 360, "height": 740}


def open_tab(browser: Any, origin: str, viewport: dict[str, int]) -> tuple[Any, Tab]:
    context = browser.new_context(viewport=viewport, locale="en-GB", timezone_id="UTC")
    context.set_default_timeout(15_000)
    page = context.new_page()
    tab = Tab(page=page, origin=origin, console_errors=[], failed=[], foreign=[])
    # a resource that fails is recorded with its URL below (the console repeats it without one)
    page.on(
        "console",
        lambda m: (
            tab.console_errors.append(m.text)
            if m.type == "error" and not m.text.startswith("Failed to load resource")
            else None
        ),
    )
    page.on("pageerror", lambda e: tab.console_errors.append(str(e)))
    page.on("requestfailed", lambda r: tab.failed.append(f"{r.url}: {r.failure}"))
    page.on(
        "response",
        lambda r: (
            tab.failed.append(f"{r.url}: {r.status}")
            if r.status >= 400 and r.request.resource_type != "document"
            else None
        ),
    )
    page.on(
        "request",
        lambda r: None if r.url.startswith((origin, "data:")) else tab.foreign.append(r.url),
    )
    return context, tab


@pytest.fixture
def tab(browser: Any, hud_stack: HudStack) -> Iterator[Tab]:
    """A fresh context (desktop size, UTC) on the seeded stack."""
    context, t = open_tab(browser, hud_stack.url, DESKTOP)
    try:
        yield t
    finally:
        context.close()


@pytest.fixture
def narrow_tab(browser: Any, hud_stack: HudStack) -> Iterator[Tab]:
    """A fresh context as narrow as a phone (360 px)."""
    context, t = open_tab(browser, hud_stack.url, NARROW)
    try:
        yield t
    finally:
        context.close()


_LIVE = iter(range(1, 10**6))


@pytest.fixture
def live_run(hud_stack: HudStack) -> LiveRun:
    """A new job running in the stack now (two shards of 10 tests, nothing stored yet)."""
    return seed_live_run(hud_stack.stack.database_url, key=f"push-live-{next(_LIVE)}")


@pytest.fixture(scope="session")
def test_client_class() -> type:
    """Starlette's TestClient (imported without its deprecation warnings)."""
    return _test_client()


@pytest.fixture
def tab_on(browser: Any) -> Iterator[Any]:
    """``tab_on(origin)``: a fresh desktop tab on a stack the test started itself."""
    contexts: list[Any] = []

    def make(origin: str) -> Tab:
        context, t = open_tab(browser, origin, DESKTOP)
        contexts.append(context)
        return t

    try:
        yield make
    finally:
        for context in contexts:
            context.close()
