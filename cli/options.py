"""Options shared by `relay select`, `relay replay` and `relay eval`, and opening the upstream."""

from __future__ import annotations

from pathlib import Path

import typer

from selector import DEFAULT_PROFILING_MAP
from upstream import UpstreamError, UpstreamSource, open_source
from upstream.changes import ChangeFacts, compute_change_facts

DEFAULT_PLAN_DIR = Path("var/plans")

UPSTREAM = typer.Option(
    None,
    "--upstream",
    envvar="RELAY_UPSTREAM_PATH",
    help="a PyTorch checkout (revisions are commits); default: released "
    "wheels (revisions are versions)",
)
BUDGET = typer.Option(None, "--budget", help="budget in simulated device-seconds")
WORKERS = typer.Option(1, "--workers", "-n", help="shards to split the selection into")
HISTORY = typer.Option(
    None, "--history", help="JSON {test id: seconds | {seconds, runs, failures, flaky}}"
)
SPECS = typer.Option([], "--specs", help="spec file or folder; repeatable")
PROFILING = typer.Option(
    DEFAULT_PROFILING_MAP,
    "--profiling-map",
    help="PyTorch's td_heuristic_profiling.json (coverage prior)",
)
COVERAGE = typer.Option(None, "--coverage-map", help="our coverage map JSON {source: [tests]}")
ONLINE = typer.Option(False, "--online", help="let the wheel source download missing releases")
CACHE = typer.Option(None, "--cache-dir", help="wheel and change-facts cache folder")
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


def open_facts(
    upstream: Path | None, online: bool, cache_dir: Path | None, base: str, head: str
) -> tuple[UpstreamSource, ChangeFacts]:
    """The upstream source and the change facts base..head, or exit 2 with the error."""
    try:
        source = open_source(upstream, cache_dir=cache_dir, offline=not online)
        b, h = source.resolve(base), source.resolve(head)
        cache = cache_dir or getattr(source, "cache_dir", None) or Path("var/upstream")
        facts = compute_change_facts(source, b, h, cache_dir=cache)
    except UpstreamError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    return source, facts
