"""The HUD's two heaviest pages against a real `relay up` (SQLite + embedded broker; PostgreSQL +
Redis too when RELAY_TEST_POSTGRES_URL and RELAY_TEST_REDIS_URL are set): the commit
grid showing 500 commits on one page, and the run page of a job with 10,000 results, each
against the same page over 10x fewer rows measured in the same run (how it grows).

Server time: the full HTML response over HTTP on loopback (median of ``ROUNDS`` after a warm-up).
Browser time: Debian's chromium through Playwright (``executable_path``), navigation start to
the ``load`` event, assets cached (median of ``ROUNDS``). The status API's JSON for the same
views is timed beside them. ``BENCH_HUD_SCALE`` scales the large side (default 1: 500 commits,
10,000 results).
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.report import Report
from store.models import utcnow
from tests.support.hud_seed import seed_runs
from tests.support.hud_seed_live import seed_big_run
from tests.support.stack import start_local_stack, start_stack

ROUNDS = int(os.environ.get("BENCH_HUD_ROUNDS", "9"))
SCALE = float(os.environ.get("BENCH_HUD_SCALE", "1"))
LARGE = (int(500 * SCALE), int(10_000 * SCALE))  # commits, results of one run
SMALL = (LARGE[0] // 10, LARGE[1] // 10)


@dataclass
class Timing:
    server_ms: float
    kbytes: float
    browser_ms: float | None


def _server(client: httpx.Client, url: str) -> tuple[float, float]:
    client.get(url).raise_for_status()  # warm-up (caches, connection)
    times = []
    size = 0
    for _ in range(ROUNDS):
        start = time.perf_counter()
        response = client.get(url)
        response.raise_for_status()
        size = len(response.content)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), size / 1024


def _browser(page: Any, url: str) -> float:
    page.goto(url, wait_until="load")  # warm-up: assets into the cache
    times = []
    for _ in range(ROUNDS):
        page.goto(url, wait_until="load")
        times.append(
            page.evaluate(
                "() => { const n = performance.getEntriesByType('navigation')[0];"
                " return n.loadEventEnd - n.startTime; }"
            )
        )
    return float(statistics.median(times))


def _stack(kind: str, tmp: Path, exits: ExitStack) -> Any:
    """`relay up` on SQLite + the embedded broker, or on a fresh PostgreSQL database + Redis."""
    if kind == "SQLite":
        return start_local_stack(tmp)
    from tests.support.services import fresh_postgres_database, fresh_redis_url

    url = exits.enter_context(fresh_postgres_database())
    return start_stack(tmp=tmp, database_url=url, broker_url=fresh_redis_url())


def _measure(kind: str, size: tuple[int, int], tmp: Path, browser: Any) -> dict[str, Timing]:
    commits, results = size
    exits = ExitStack()
    stack = _stack(kind, tmp, exits)
    try:
        now = utcnow()
        seed_runs(
            stack.database_url, now=now, var_dir=tmp, commits=commits, results_per_job=10, prs=0
        )
        job = seed_big_run(
            stack.database_url, now=now, results=results, key="bench-run", var_dir=tmp
        )
        urls = {
            f"grid page, {commits} commits": f"/grid?limit={commits}",
            f"grid API, {commits} commits": f"/api/v1/hud/grid?limit={commits}",
            f"run page, {results:,} results": f"/runs/{job}",
            f"run API, {results:,} results": f"/api/v1/hud/runs/{job}",
        }
        out = {}
        page = None
        if browser is not None:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
        with httpx.Client(base_url=stack.base_url, timeout=120) as client:
            for name, url in urls.items():
                server_ms, kbytes = _server(client, url)
                browser_ms = None
                if page is not None and "page" in name:
                    browser_ms = _browser(page, f"{stack.base_url}{url}")
                out[name] = Timing(server_ms, kbytes, browser_ms)
        if page is not None:
            page.context.close()
        return out
    finally:
        stack.stop()
        exits.close()


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def run(report: Report) -> None:
    chromium = os.environ.get("HUD_CHROMIUM") or shutil.which("chromium")
    kinds = ["SQLite"]
    if os.environ.get("RELAY_TEST_POSTGRES_URL") and os.environ.get("RELAY_TEST_REDIS_URL"):
        kinds.append("PostgreSQL")
    note = (
        f"relay up on {' and on '.join(kinds)}, loopback; medians of {ROUNDS} after a warm-up. "
        f"Small: {SMALL[0]} commits and a run of {SMALL[1]:,} results; large: {LARGE[0]} commits "
        f"and {LARGE[1]:,} results. Browser: chromium, navigation start to the load event."
    )
    if len(kinds) == 1:
        note += " PostgreSQL not run: set RELAY_TEST_POSTGRES_URL and RELAY_TEST_REDIS_URL."
    if chromium is None:
        note += " Browser times not measured: chromium is not installed (apt-get install chromium)."
    headers = [
        "database",
        "view",
        "small: server ms",
        "small: KB",
        "small: browser ms",
        "large: server ms",
        "large: KB",
        "large: browser ms",
        "server x",
        "browser x",
    ]
    table = report.table("HUD pages: 10x the rows", headers, note=note)
    with tempfile.TemporaryDirectory(prefix="bench-hud-") as d, ExitStack() as stack:
        browser = None
        if chromium is not None:
            from playwright.sync_api import sync_playwright

            p = stack.enter_context(sync_playwright())
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            stack.callback(browser.close)
        for kind in kinds:
            (Path(d) / kind / "small").mkdir(parents=True)
            (Path(d) / kind / "large").mkdir(parents=True)
            small = _measure(kind, SMALL, Path(d) / kind / "small", browser)
            large = _measure(kind, LARGE, Path(d) / kind / "large", browser)
            for (name, s), (_, big) in zip(small.items(), large.items(), strict=True):
                browser_x = (
                    f"{big.browser_ms / s.browser_ms:.1f}"
                    if big.browser_ms and s.browser_ms
                    else "-"
                )
                table.rows.append(
                    [
                        kind,
                        name.split(",")[0],
                        _ms(s.server_ms),
                        f"{s.kbytes:.0f}",
                        _ms(s.browser_ms),
                        _ms(big.server_ms),
                        f"{big.kbytes:.0f}",
                        _ms(big.browser_ms),
                        f"{big.server_ms / s.server_ms:.1f}",
                        browser_x,
                    ]
                )
