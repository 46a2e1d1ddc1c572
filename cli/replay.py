"""`relay replay`: a release step through the four stages (and, with --run, on the workers), or
recorded webhook events through a running relay (--events)."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from cli import options as opt
from cli.select import print_plan
from planner.release import ReleasePlan, head_env_for, plan_release
from selector import History
from upstream import UpstreamError
from upstream.changes import ChangeFacts
from upstream.headenv import HeadEnv, HeadEnvError, ensure_env


def replay(
    from_: str | None = typer.Option(
        None, "--from", help="base release (2.13) or revision (not with --events)"
    ),
    to: str | None = typer.Option(
        None, "--to", help="head release (2.14) or revision (not with --events)"
    ),
    budget: float | None = opt.BUDGET,
    budget_share: float = opt.BUDGET_SHARE,
    upstream: Path | None = opt.UPSTREAM,
    workers: int = opt.WORKERS,
    history: Path | None = opt.HISTORY,
    specs: list[Path] = opt.SPECS,
    profiling_map: Path | None = opt.PROFILING,
    offline: bool = opt.OFFLINE,
    cache_dir: Path | None = opt.CACHE,
    out: Path | None = typer.Option(
        None, "--out", help="plan JSON (default RELAY_VAR_DIR/plans/replay-FROM-TO.json)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the plan JSON instead"),
    no_import_map: bool = opt.NO_IMPORTS,
    focus: float = opt.FOCUS,
    events: Path | None = typer.Option(
        None,
        "--events",
        help="replay recorded webhook events (JSON Lines, or a folder "
        "<event>/*.json) in order through a running relay",
    ),
    run: bool = typer.Option(False, "--run", help="then send the release step to the workers"),
    url: str | None = typer.Option(None, "--url", help="the relay (default RELAY_HOST:PORT)"),
    rate: str | None = typer.Option(None, "--rate", help="events per second, e.g. 20/s"),
    wait: float | None = typer.Option(
        None,
        "--wait",
        help="seconds to wait for plans (--events, default 60) or the run's "
        "conclusion (--run, default 0)",
    ),
    as_upstream: bool = typer.Option(
        False, "--as-upstream", help="--events: rewrite repository.full_name to RELAY_UPSTREAM_REPO"
    ),
    head_env: bool | None = typer.Option(
        None,
        "--head-env/--estimate-head",
        help="--head-env: collect the head universe for real in a virtual environment with the "
        "head torch (RELAY_VAR_DIR/envs, made once; the backend built there); the default when "
        "RELAY_RELEASE_FINGERPRINTS is on, which makes that environment anyway. --estimate-head: "
        "the installed universe adjusted by the change facts (no environment for the universe)",
    ),
) -> None:
    """The whole release step through the four stages; prints the funnel, writes the plan.
    With --run also runs it on the workers; with --events replays recorded webhook events."""
    from cli.replay_events import events_command, run_command

    _refuse_mixed(events, from_, to, run)
    if events is not None:
        events_command(
            events, url=url, rate=rate, wait=wait, as_json=as_json, as_upstream=as_upstream
        )
        return
    assert from_ is not None and to is not None
    release = _plan_step(
        from_,
        to,
        specs=specs,
        upstream=upstream,
        cache_dir=cache_dir,
        offline=offline,
        head_env=head_env,
        budget=budget,
        budget_share=budget_share,
        history=history,
        profiling_map=profiling_map,
        no_import_map=no_import_map,
        focus=focus,
        quiet=as_json,
    )
    _write_and_print(release, out or opt.plan_dir() / f"replay-{from_}-{to}.json", as_json, workers)
    if run:
        run_command(from_, to, url=url, wait=wait, err=as_json)


def _plan_step(
    from_: str,
    to: str,
    *,
    specs: list[Path],
    upstream: Path | None,
    cache_dir: Path | None,
    offline: bool,
    head_env: bool | None,
    budget: float | None,
    budget_share: float,
    history: Path | None,
    profiling_map: Path | None,
    no_import_map: bool,
    focus: float,
    quiet: bool,
) -> ReleasePlan:
    """The release step's plan (:func:`planner.release.plan_release`) with the seconds it took;
    exit 2 with the reason when an upstream or its head environment cannot be read."""
    start = time.perf_counter()
    progress = opt.Progress(quiet=quiet)
    try:
        release = plan_release(
            from_,
            to,
            specs=specs,
            upstream=upstream,
            cache_dir=cache_dir,
            offline=offline,
            head_env=head_env,
            budget_seconds=budget,
            budget_share=budget_share or None,
            history=History.load(history),
            profiling_map=profiling_map,
            import_map=not no_import_map,
            min_closeness=focus,
            progress=progress,
        )
    except (UpstreamError, HeadEnvError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    release.plan.decision_seconds = round(time.perf_counter() - start, 4)
    return release


def _refuse_mixed(events: Path | None, from_: str | None, to: str | None, run: bool) -> None:
    """Exit 2 unless the command is a release step (--from and --to) or recorded events alone."""
    if events is not None and (from_ or to or run):
        typer.echo("error: --events replays recorded events: without --from/--to/--run", err=True)
        raise typer.Exit(2)
    if events is None and (from_ is None or to is None):
        typer.echo(
            "error: give --from and --to (a release step, e.g. --from 2.13 --to 2.14), "
            "or --events FILE (recorded webhook events)",
            err=True,
        )
        raise typer.Exit(2)


def _write_and_print(release: ReleasePlan, path: Path, as_json: bool, workers: int) -> None:
    """Write the step's plan to ``path``; print it (its JSON, or the funnel and notes)."""
    plan = release.plan
    plan.write(path)
    if as_json:
        typer.echo(plan.to_json())
    else:
        print_plan(plan, show=10, workers=workers)
        for note in release.notes:
            typer.echo(f"note: {note}")
        typer.echo(f"plan written to {path} (fingerprint {plan.fingerprint()})")


def make_head_env(facts: ChangeFacts, offline: bool) -> HeadEnv:
    try:
        return head_env_for(facts, offline=offline)
    except HeadEnvError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc


def make_env(version: str, offline: bool) -> HeadEnv:
    """The environment of torch ``version`` (``2.12.1+cpu``: made once, like a head one)."""
    try:
        return ensure_env(version.split("+", 1)[0], offline=offline)
    except HeadEnvError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
