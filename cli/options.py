"""Options shared by `relay select`, `relay replay` and `relay eval`, and opening the upstream."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer

from planner.release import DEFAULT_RELEASE_SHARE, open_release
from planner.revisions import default_profiling_map
from upstream import UpstreamError, UpstreamSource, default_cache_dir
from upstream.changes import ChangeFacts


def plan_dir() -> Path:
    """Where plans are written unless told: ``RELAY_VAR_DIR/plans``."""
    from config.settings import get_settings

    return get_settings().var_dir / "plans"


UPSTREAM = typer.Option(
    None,
    "--upstream",
    envvar="RELAY_UPSTREAM_PATH",
    help="a PyTorch checkout (revisions are commits); default: released "
    "wheels (revisions are versions)",
)
BUDGET = typer.Option(
    None,
    "--budget",
    help="budget in runner-seconds (setup + call + teardown on a runner; simulated device "
    "time is shown beside it)",
)
BUDGET_SHARE = typer.Option(
    DEFAULT_RELEASE_SHARE,
    "--budget-share",
    help="release step without --budget: the budget is this share of the applicable "
    "universe's runner-seconds as the plan estimates them (0: no cut)",
)
WORKERS = typer.Option(
    1,
    "--workers",
    "-n",
    help="shard workers running at once: the runner's split is estimated on that many "
    "(RELAY_RUNNER_PARALLEL)",
)
HISTORY = typer.Option(
    None,
    "--history",
    help="JSON {test id: runner-seconds | {seconds, runs, failures, flaky, device_seconds}}",
)
SPECS = typer.Option(
    [],
    "--specs",
    help="spec file or folder; repeatable (default: the backend's own, as the runner)",
)
PROFILING = typer.Option(
    default_profiling_map(),
    "--profiling-map",
    help="PyTorch's td_heuristic_profiling.json (coverage prior; optional; the folder is RELAY_CI_STATS)",
)
COVERAGE = typer.Option(None, "--coverage-map", help="our coverage map JSON {source: [tests]}")
OFFLINE = typer.Option(
    False,
    "--offline",
    help="never ask the package index: released wheels come from the cache only",
)
CACHE = typer.Option(
    None,
    "--cache-dir",
    envvar="RELAY_UPSTREAM_CACHE",
    help=f"wheel and change-facts cache folder [default: {default_cache_dir()}]",
)
FOCUS = typer.Option(
    0.0,
    "--focus",
    help="cut variants only broad signals chose (closeness "
    "below this, e.g. 0.5: common code, file-level "
    "coverage, fallback); they are listed as cut",
)
NO_IMPORTS = typer.Option(
    False, "--no-import-map", help="do not use (or learn) the import map of our own runs"
)


class Progress:
    """Progress lines on stderr, each with the seconds since the command started."""

    def __init__(self, *, quiet: bool = False) -> None:
        self.start = time.perf_counter()
        self.quiet = quiet

    def __call__(self, message: str) -> None:
        if not self.quiet:
            print(
                f"[{time.perf_counter() - self.start:6.1f} s] {message}",
                file=sys.stderr,
                flush=True,
            )


def open_facts(
    upstream: Path | None,
    offline: bool,
    cache_dir: Path | None,
    base: str,
    head: str,
    progress: Progress | None = None,
) -> tuple[UpstreamSource, ChangeFacts]:
    """The upstream source and the change facts base..head, or exit 2 with the error."""
    try:
        return open_release(
            base,
            head,
            upstream=upstream,
            cache_dir=cache_dir,
            offline=offline,
            progress=progress or Progress(quiet=True),
        )
    except UpstreamError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
