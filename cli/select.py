"""`relay select`: the variants one upstream change (base..head) can affect on the backend."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import typer

from cli import options as opt
from config.settings import get_settings
from inventory.build import universe_from_inventory
from inventory.importmap import import_map_for
from planner import ShardPolicy, source_reader, split_summary
from planner.durations import costs_for
from planner.release import backend_specs
from selector import History, SelectionPlan, SelectionRequest, SignalConfig
from selector import select as run_select


def print_plan(plan: SelectionPlan, *, show: int = 20, workers: int = 1) -> None:
    """The plan for a reader, with the split the runner would make of it on ``workers`` shard
    workers (RELAY_RUNNER_SHARD_SECONDS, RELAY_RUNNER_SHARDS)."""
    typer.echo(
        f"# {plan.backend}: {plan.base} ({plan.base_resolved[:12]}) -> {plan.head} "
        f"({plan.head_resolved[:12]}), universe {plan.universe.label}"
    )
    if plan.universe.new_at_head or plan.universe.removed_at_head:
        typer.echo(
            f"  universe: {plan.universe.variants} variants, "
            f"{plan.universe.new_at_head} flagged new-at-head, "
            f"{plan.universe.removed_at_head} flagged removed-at-head"
        )
    typer.echo("funnel:")
    for step in plan.funnel:
        typer.echo(
            f"  {step.stage:<14} {step.count_in:>8} -> {step.count_out:<8} {step.unit}"
            f"  ({step.seconds:.3f} s)"
        )
    typer.echo("signals: " + ", ".join(f"{k} {v}" for k, v in plan.signals.items()))
    if plan.fallback:
        for fb in plan.fallbacks:
            typer.echo(f"FALLBACK {fb.scope}: {fb.reason} [{fb.tests} variants]")
    else:
        typer.echo("fallback: none (every change was mapped by a signal)")
    for t in plan.tests[:show]:
        typer.echo(
            f"  #{t.rank:<5} {t.test_id}  [{t.mode}{'' if t.gating else ', non-gating'}]"
            f"  {t.reasons[0][:110]}"
        )
    if len(plan.tests) > show:
        typer.echo(f"  ... {len(plan.tests) - show} more (see the plan JSON)")
    if plan.cut:
        typer.echo(
            f"cut by focus/budget: {len(plan.cut)} (first: #{plan.cut[0].rank} "
            f"{plan.cut[0].test_id}: {plan.cut[0].reason})"
        )
    if plan.budget_seconds is not None:
        why = f" ({plan.budget_reason})" if plan.budget_reason else ""
        typer.echo(f"budget: {plan.budget_seconds / 60:,.1f} runner-minutes{why}")
    sources = ", ".join(f"{k} {v}" for k, v in plan.duration_sources.items())
    typer.echo(f"runner-seconds from: {sources or 'nothing selected'}")
    typer.echo(plan.summary())
    policy = replace(ShardPolicy.from_settings(get_settings()), parallel=max(1, workers))
    typer.echo(split_summary(plan, policy))


def select(
    base: str = typer.Option(..., "--base", help="base revision"),
    head: str = typer.Option(..., "--head", help="head revision"),
    budget: float | None = opt.BUDGET,
    as_json: bool = typer.Option(False, "--json", help="print the SelectionPlan JSON"),
    upstream: Path | None = opt.UPSTREAM,
    workers: int = opt.WORKERS,
    history: Path | None = opt.HISTORY,
    specs: list[Path] = opt.SPECS,
    profiling_map: Path | None = opt.PROFILING,
    coverage_map: Path | None = opt.COVERAGE,
    offline: bool = opt.OFFLINE,
    cache_dir: Path | None = opt.CACHE,
    out: Path | None = typer.Option(None, "--out", help="also write the plan JSON here"),
    no_import_map: bool = opt.NO_IMPORTS,
    focus: float = opt.FOCUS,
) -> None:
    """Select the variants one upstream change (base..head) can affect on the backend."""
    start = time.perf_counter()
    source, facts = opt.open_facts(
        upstream, offline, cache_dir, base, head, opt.Progress(quiet=as_json)
    )
    universe = universe_from_inventory(specs=backend_specs("spyre", specs))
    hist = History.load(history)
    plan = run_select(
        SelectionRequest(
            facts=facts,
            universe=universe,
            costs=costs_for(universe, history=hist),
            reader=source_reader(source, facts),
            config=SignalConfig(
                profiling_map=profiling_map,
                coverage_map=coverage_map,
                import_map=None if no_import_map else import_map_for(universe),
            ),
            budget_seconds=budget,
            min_closeness=focus,
        )
    )
    plan.decision_seconds = round(time.perf_counter() - start, 4)
    if out is not None:
        plan.write(out)
    if as_json:
        typer.echo(plan.to_json())
    else:
        print_plan(plan, workers=workers)
