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


def evaluate(
    kind: str = typer.Option(
        "mutation",
        "--kind",
        help="mutation (single-function faults) or release (full runs under the base and the "
        "head torch): the selector against that ground truth; catch: sampled source mutants of "
        "upstream files as pull requests on a local upstream repository through a real relay "
        "(default planner, overlay environment) must conclude failure naming a gating test, "
        "their comment-only twins success",
    ),
    suite: list[str] = typer.Option(
        [],
        "--suite",
        "-s",
        help="mutation: restrict the universe (and its runs) to these suites; "
        "catch: the universe of the observability probe",
    ),
    limit: int = typer.Option(0, "--limit", help="first N mutants of the catalogue (0 = all)"),
    run: bool = typer.Option(
        False,
        "--run",
        help="run missing ground truth (long: the full universe, then each mutant, cached in "
        "RELAY_VAR_DIR/eval; release: each torch's missing full runs, stored in "
        "evaluation/data/groundtruth)",
    ),
    torch_runs: int = typer.Option(
        RUNS_PER_TORCH,
        "--torch-runs",
        min=1,
        max=2,
        help="release: full runs per torch --run makes (two show the flaky variants)",
    ),
    full: bool = typer.Option(
        False,
        "--full",
        help="mutation: run the whole universe per mutant, not only the variants the traced "
        "baseline shows calling the mutated function on the device (same result, hours longer)",
    ),
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
    from evaluation.scores import GroundTruth, recall_curve, scores_json, table
    from evaluation.scores import evaluate as score_all

    if kind not in ("mutation", "release", "catch"):
        typer.echo(f"error: --kind is mutation, release or catch, not {kind!r}", err=True)
        raise typer.Exit(2)
    if kind == "catch":
        _catch(suite, sample=sample, seed=seed, budget=budget, minutes=minutes, report=report)
        return
    step = None
    if kind == "release" and ground_truth is None:
        from cli.evaluate_release import release_step

        step = release_step(
            from_, to, upstream=upstream, offline=offline, cache_dir=cache_dir, run=run,
            torch_runs=torch_runs, budget=budget, profiling_map=profiling_map,
            no_import_map=no_import_map, focus=focus, budget_share=budget_share or None,
        )  # fmt: skip
        truth, universe = step.truth, step.head
        names = [e.name for e in truth.events]
        plans = dict.fromkeys(names, step.plans["ours"])
        more = {
            "ours, head estimated (--estimate-head)": dict.fromkeys(
                names, step.plans["ours, head estimated (--estimate-head)"]
            ),
            "ours, no budget cut": dict.fromkeys(names, step.uncut),
        }
    else:
        universe = universe_from_inventory(suites=suite)
        truth = (
            GroundTruth.load(ground_truth)
            if ground_truth is not None
            else _mutation_truth(universe, limit=limit, run=run, full=full)
        )
        plans = _event_plans(
            truth, universe, budget=budget, profiling_map=profiling_map,
            no_import_map=no_import_map, focus=focus, budget_share=budget_share or None,
        )  # fmt: skip
        more = {}
        if budget_share:  # the same ranking without a budget: the recall-cost curve
            more["ours, no budget cut"] = _event_plans(
                truth, universe, budget=None, profiling_map=profiling_map,
                no_import_map=no_import_map, focus=focus, budget_share=None,
            )  # fmt: skip
    estimator = estimator_for(universe)
    scores = score_all(
        truth, universe, plans, profiling_map=profiling_map, more_plans=more,
        estimator=estimator,
    )  # fmt: skip
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
    catches, text = catch_command(
        sample=sample, seed=seed, suites=suites, budget=budget,
        var_root=get_settings().var_dir, minutes=minutes, log=typer.echo,
    )  # fmt: skip
    text += f"\n\nwall time {time.perf_counter() - start:.0f} s (repository, relay start included)"
    typer.echo(text)
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(text + "\n", encoding="utf-8")
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
        typer.echo("no ground truth yet: add --run (runs the full universe, then each mutant)",
                   err=True)  # fmt: skip
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
            event, universe, budget=budget, profiling_map=profiling_map,
            no_import_map=no_import_map, focus=focus, budget_share=budget_share,
            costs=costs,
        )  # fmt: skip
    return plans
