"""`relay eval`: recall and cost of the selector against ground truth, beside its baselines."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer

from cli import options as opt
from cli.event_selection import select_event
from cli.progress import ProgressBar
from evaluation.release import RUNS_PER_TORCH
from inventory.build import universe_from_inventory
from planner.durations import base_run_history, costs_for, estimator_for

KIND = typer.Option(
    "mutation",
    "--kind",
    help="mutation (single-function faults) or release (full runs under the base and the "
    "head torch): the selector against that ground truth; catch: sampled source mutants of "
    "upstream files as pull requests on a local upstream repository through a real relay "
    "(default planner, overlay environment) must conclude failure naming a gating test, "
    "their comment-only twins success",
)

SUITE = typer.Option(
    [],
    "--suite",
    "-s",
    help="mutation: restrict the universe (and its runs) to these suites; "
    "catch: the universe of the observability probe",
)

RUN = typer.Option(
    False,
    "--run",
    help="run missing ground truth (long: the full universe, then each mutant, cached in "
    "RELAY_VAR_DIR/eval; release: each torch's missing full runs, stored in "
    "evaluation/data/groundtruth)",
)

TORCH_RUNS = typer.Option(
    RUNS_PER_TORCH,
    "--torch-runs",
    min=1,
    max=2,
    help="release: full runs per torch --run makes (two show the flaky variants)",
)

FULL = typer.Option(
    False,
    "--full",
    help="mutation: run the whole universe per mutant, not only the variants the traced "
    "baseline shows calling the mutated function on the device (same result, hours longer)",
)


def evaluate(
    kind: str = KIND,
    suite: list[str] = SUITE,
    limit: int = typer.Option(0, "--limit", help="first N mutants of the catalogue (0 = all)"),
    run: bool = RUN,
    torch_runs: int = TORCH_RUNS,
    full: bool = FULL,
    sample: int = typer.Option(60, "--sample", help="catch: how many mutants to sample"),
    seed: int = typer.Option(0, "--seed", help="catch: the sampler's seed"),
    minutes: float = typer.Option(
        0, "--minutes", help="catch: start no mutant after this many minutes (0 = no limit)"
    ),
    from_: str = typer.Option("2.13", "--from", help="release: the base release"),
    to: str = typer.Option("2.14", "--to", help="release: the head release"),
    upstream: Path | None = opt.UPSTREAM,
    offline: bool = opt.OFFLINE,
    cache_dir: Path | None = opt.CACHE,
    ground_truth: Path | None = typer.Option(
        None, "--ground-truth", help="a GroundTruth JSON to score instead"
    ),
    budget: float | None = opt.BUDGET,
    budget_share: float = opt.BUDGET_SHARE,
    profiling_map: Path | None = opt.PROFILING,
    no_import_map: bool = opt.NO_IMPORTS,
    focus: float = opt.FOCUS,
    report: Path | None = typer.Option(None, "--report", help="write the table (Markdown) here"),
) -> None:
    """Recall and cost of the selector against ground truth, beside run-all, random at equal
    cost and PyTorch's file-level target determination."""
    if kind not in ("mutation", "release", "catch"):
        typer.echo(f"error: --kind is mutation, release or catch, not {kind!r}", err=True)
        raise typer.Exit(2)
    if kind == "catch":
        _catch(suite, sample=sample, seed=seed, budget=budget, minutes=minutes, report=report)
        return
    knobs: dict[str, Any] = {
        "budget": budget,
        "profiling_map": profiling_map,
        "no_import_map": no_import_map,
        "focus": focus,
        "budget_share": budget_share or None,
    }
    step = None
    if kind == "release" and ground_truth is None:
        from cli.evaluate_release import release_step

        step = release_step(
            from_,
            to,
            upstream=upstream,
            offline=offline,
            cache_dir=cache_dir,
            run=run,
            torch_runs=torch_runs,
            **knobs,
        )
        truth, universe, plans, more = _release_plans(step)
    else:
        truth, universe, plans, more = _mutation_plans(
            suite, ground_truth, limit=limit, run=run, full=full, knobs=knobs
        )
    _print_scores(kind, truth, universe, plans, more, step, profiling_map, report)


def _release_plans(step: Any) -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    """The release step's ground truth, head universe, our plan per event and the others."""
    truth, universe = step.truth, step.head
    names = [e.name for e in truth.events]
    plans = dict.fromkeys(names, step.plans["ours"])
    estimated = "ours, head estimated (--estimate-head)"
    more = {
        estimated: dict.fromkeys(names, step.plans[estimated]),
        "ours, no budget cut": dict.fromkeys(names, step.uncut),
    }
    return truth, universe, plans, more


def _mutation_plans(
    suite: list[str],
    ground_truth: Path | None,
    *,
    limit: int,
    run: bool,
    full: bool,
    knobs: dict[str, Any],
) -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    """The mutation ground truth (or a given one), its universe, our plan per event and, with
    a budget share, the same ranking uncut (the recall-cost curve)."""
    from evaluation.scores import GroundTruth

    universe = universe_from_inventory(suites=suite)
    truth = (
        GroundTruth.load(ground_truth)
        if ground_truth is not None
        else _mutation_truth(universe, limit=limit, run=run, full=full)
    )
    plans = _event_plans(truth, universe, **knobs)
    more = {}
    if knobs["budget_share"]:
        more["ours, no budget cut"] = _event_plans(
            truth, universe, **{**knobs, "budget": None, "budget_share": None}
        )
    return truth, universe, plans, more


def _print_scores(
    kind: str,
    truth: Any,
    universe: Any,
    plans: dict[str, Any],
    more: dict[str, Any],
    step: Any,
    profiling_map: Path | None,
    report: Path | None,
) -> None:
    """Score every plan, print the table (and the release step's report), write and store it."""
    from evaluation.scores import evaluate as score_all
    from evaluation.scores import recall_curve, scores_json, table

    estimator = estimator_for(universe)
    scores = score_all(
        truth, universe, plans, profiling_map=profiling_map, more_plans=more, estimator=estimator
    )
    text = table(scores, truth)
    uncut = more.get("ours, no budget cut")
    if uncut:
        text += "\nrecall-cost curve (the uncut ranking; share of the applicable runner-s):\n"
        text += "\n".join(recall_curve(truth, uncut, universe, estimator=estimator))
    if step is not None:
        from cli.evaluate_release import step_report
        from planner.release import DEFAULT_RELEASE_SHARE

        text += "\n\n" + step_report(
            step, profiling_map=profiling_map, estimator=estimator, shipped=DEFAULT_RELEASE_SHARE
        )
    typer.echo(text)
    for event in truth.events:
        if event.kind == "release":
            typer.echo(f"{event.name}: {len(event.failing)} variants; {event.detail}")
    unobservable = [e.name for e in truth.events if not e.failing]
    if unobservable:
        typer.echo(f"unobservable ({len(unobservable)}): {', '.join(unobservable)}")
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(text + "\n", encoding="utf-8")
        report.with_suffix(".json").write_text(scores_json(scores), encoding="utf-8")
    store_report(report, kind, text, json.loads(scores_json(scores)))


def store_report(report: Path | None, kind: str, text: str, scores: Any = None) -> None:
    """Store the report in the database (migrated first), where the replay pages of every API
    host read it: named like its ``--report`` file, else ``report-KIND.md``."""
    from config.settings import get_settings
    from store import evalreports, migrate
    from store.db import session_scope

    settings = get_settings()
    settings.var_dir.mkdir(parents=True, exist_ok=True)
    migrate.upgrade(settings.database_url)
    name = report.name if report is not None else f"report-{kind}.md"
    with session_scope(settings.database_url) as session:
        evalreports.save(session, name=name, kind=kind, text=text, scores=scores)
    typer.echo(f"report {name} stored in the database", err=True)


def _catch(suites, *, sample, seed, budget, minutes, report) -> None:
    """``--kind catch``: sampled mutants of upstream files as pull requests through a real
    ``relay up`` (cli.catch)."""
    from cli.catch import catch_command
    from config.settings import get_settings

    start = time.perf_counter()

    def write(text: str) -> None:  # the report as it stands, after every verdict
        if report is not None:
            report.parent.mkdir(parents=True, exist_ok=True)
            report.write_text(text + "\n", encoding="utf-8")

    catches, text = catch_command(
        sample=sample,
        seed=seed,
        suites=suites,
        budget=budget,
        var_root=get_settings().var_dir,
        minutes=minutes,
        log=typer.echo,
        write=write,
    )
    text += f"\n\nwall time {time.perf_counter() - start:.0f} s (repository, relay start included)"
    typer.echo(text)
    write(text)
    store_report(report, "catch", text)
    if any(c.verdict.startswith("missed") or c.false_red for c in catches):
        raise typer.Exit(1)


def _mutation_truth(universe, *, limit: int, run: bool, full: bool):
    from evaluation.groundtruth import check_trace, mutation_ground_truth
    from evaluation.mutations import MUTANTS

    names = list(MUTANTS)[: limit or None]
    with ProgressBar("ground-truth runs") as bar:
        truth = mutation_ground_truth(
            universe, names, run=run, traced=not full, log=typer.echo, progress=bar.update
        )
    if not truth.events:
        typer.echo(
            "no ground truth yet: add --run (runs the full universe, then each mutant)", err=True
        )
        raise typer.Exit(1)
    checked = check_trace(universe, names)
    if checked:
        outside = sum(1 for _, _, out in checked if out)
        typer.echo(
            f"trace check: {len(checked)} mutant(s) also have an unrestricted full run; "
            f"{outside} changed a variant outside its trace"
            + "".join(f"\n  {n}: {o} of {c} outside" for n, c, o in checked if o)
        )
    return truth


def _event_plans(truth, universe, *, budget, profiling_map, no_import_map, focus, budget_share):
    # failures and runner-seconds of the base's full run; the universe priced once for every event
    costs = costs_for(universe, history=base_run_history(universe))
    plans = {}
    for event in truth.events:
        plans[event.name] = select_event(
            event,
            universe,
            budget=budget,
            profiling_map=profiling_map,
            no_import_map=no_import_map,
            focus=focus,
            budget_share=budget_share,
            costs=costs,
        )
    return plans
