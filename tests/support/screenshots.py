"""`make screenshots`: every HUD page at a desktop and a narrow width, as PNG files.

Starts `relay up` (SQLite + embedded broker, runner off) in a temporary folder, writes the seeded
history of the HUD's tests into it (times relative to now, so the relative hints read naturally),
and drives Debian's chromium through Playwright (``executable_path``; ``HUD_CHROMIUM`` or
``chromium`` on the PATH; nothing is downloaded). Each shot is the top of the page, cut to a
fixed height so the files stay small.

    python -m tests.support.screenshots [--out docs/screenshots]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

from store.models import utcnow
from tests.support.hud_seed import seed_runs
from tests.support.hud_seed_health import seed_health
from tests.support.hud_seed_live import seed_live_run, seed_replay
from tests.support.stack import start_local_stack

#: name -> (width, height) of the window; the shot is the window's content
SIZES = {"desktop": (1280, 860), "narrow": (390, 844)}


def chromium() -> str:
    path = os.environ.get("HUD_CHROMIUM") or shutil.which("chromium")
    if not path:
        raise SystemExit(
            "screenshots: chromium is not installed (apt-get install chromium, or set HUD_CHROMIUM)"
        )
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots"))
    args = parser.parse_args(argv)
    browser_path = chromium()
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hud-shots-") as folder:
        tmp = Path(folder)
        print("starting relay up with a seeded history...", file=sys.stderr, flush=True)
        stack = start_local_stack(tmp)
        try:
            now = utcnow().replace(microsecond=0)
            runs = seed_runs(stack.database_url, now=now, var_dir=tmp)
            seed_health(stack.database_url, now=now)
            replay = seed_replay(stack.database_url, now=now, var_dir=tmp)
            live = seed_live_run(stack.database_url, key="push-live-shot", tests=40)
            live.advance(0, 14)
            live.advance(1, 9)
            pages = {
                "overview": "/",
                "grid": "/grid",
                "run": f"/runs/{runs.failing_job}",
                "run-live": f"/runs/{live.job_id}",
                "test": f"/tests?id={quote(runs.flaky_test)}",
                "flaky": "/flaky",
                "downstreams": "/downstreams",
                "replay": f"/replays/{replay}",
                "specs": "/specs",
                "deliveries": "/deliveries",
            }
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
                try:
                    for size, (width, height) in SIZES.items():
                        context = browser.new_context(
                            viewport={"width": width, "height": height},
                            timezone_id="UTC",
                            locale="en-GB",
                            reduced_motion="reduce",
                        )
                        page = context.new_page()
                        for name, path in pages.items():
                            response = page.goto(f"{stack.base_url}{path}")
                            if response is None or response.status != 200:
                                status = None if response is None else response.status
                                raise SystemExit(f"screenshots: {path} answered {status}")
                            page.wait_for_load_state("networkidle")
                            target = args.out / f"{name}-{size}.png"
                            page.screenshot(path=str(target), full_page=False)
                            print(f"{target} ({target.stat().st_size // 1024} KB)", flush=True)
                        context.close()
                finally:
                    browser.close()
        finally:
            stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
