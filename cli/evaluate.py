"""`relay eval`: recall and cost of the selector against ground truth, beside its baselines."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer

from cli import options as opt
from cli.event_selection import select_event
from evaluation.release import RUNS_PER_TORCH
from inventory.build import universe_from_inventory
from planner.durations import base_run_history, costs_for, estimator_for

KIND = typer.Option(
    "mutation",
    "--kind",
    help="mutation: sampled source mutants of upstream files (the catch evaluation's sampler), "
    "each laid over the base torch as a pull request's head, ground truth restricted to the "
    "variants whose traced run reached the mutated function; release: full runs under the "
    "base and the head torch; both score the selector against that ground truth. catch: the "
    "same sampled mutants as pull requests on a local upstream repository through a real "
    "relay (default planner, overlay environment) must conclude failure naming a gating test, "
    "their comment-only twins success",
)

SUITE = typer.Option(
    [],
    "--suite",
    "-s",
    help="mutation: restrict the universe (its runs and plans) to these suites; "
    "catch: the universe of the observability probe",
)

RUN = typer.Option(
    False,
    "--run",
    help="run missing ground truth (long; mutation: each sampled mutant's restricted runs and "
    "the restriction check, stored per mutant in RELAY_VAR_DIR/eval/mutation, so a killed run "
    "resumes; release: each torch's missing full runs, stored in evaluation/data/groundtruth)",
)

TORCH_RUNS = typer.Option(
    RUNS_PER_TORCH,
    "--torch-runs",
    min=0,
    max=2,
    help="release: full runs per torch --run makes (two show the flaky variants; 0: --run "
    "stores the step's inputs only)",
)

CHECK = typer.Option(
    10,
    "--check-restriction",
    min=0,
    help="mutation: how many sampled mutants (drawn at random, seeded) run again over the "
    "whole runnable universe (or --check-cap's set) to check the restriction",
)

CHECK_CAP = typer.Option(
    0,
    "--check-cap",
    min=0,
    help="mutation: the restriction check runs the restricted set and a seeded sample of this "
    "many other runnable variants, not the whole universe (0 = the whole universe)",
)

STORED_DIR_OPTION = typer.Option(
    None,
    "--stored-dir",
    help="release: the folder of the stored runs and step inputs (default: the repository's "
    "evaluation/data/groundtruth)",
)

ALL_STEPS = typer.Option(
    False,
    "--all",
    help="release: every step stored (runs and inputs), each step's tables, then the "
    "leave-one-step-out table once (--from and --to are not read)",
)

RESTRICTED_CAP = typer.Option(
    300,
    "--restricted-cap",
    min=1,
    help="mutation: at most this many variants in a mutant's restricted set (an even stride)",
)


def evaluate(
    kind: str = KIND,
    suite: list[str] = SUITE,
    run: bool = RUN,
    torch_runs: int = TORCH_RUNS,
    sample: int | None = typer.Option(
        None, "--sample", min=1, help="mutation, catch: how many mutants (default 150, 60)"
    ),
    seed: int = typer.Option(0, "--seed", help="mutation, catch: the sampler's seed"),
    minutes: float = typer.Option(
        0,
        "--minutes",
        help="mutation, catch: start no mutant after this many minutes (0 = no limit)",
    ),
    check: int = CHECK,
    check_cap: int = CHECK_CAP,
    restricted_cap: int = RESTRICTED_CAP,
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
    stored_dir: Path | None = STORED_DIR_OPTION,
    all_steps: bool = ALL_STEPS,
) -> None:
    """Recall and cost of the selector against ground truth, beside run-all, random at equal
    cost and PyTorch's file-level target determination."""
    if kind not in ("mutation", "release", "catch"):
        typer.echo(f"error: --kind is mutation, release or catch, not {kind!r}", err=True)
        raise typer.Exit(2)
    if kind == "catch":
        _catch(suite, sample=sample or 60, seed=seed, budget=budget, minutes=minutes, report=report)
        return
    knobs: dict[str, Any] = {
        "budget": budget,
        "profiling_map": profiling_map,
        "no_import_map": no_import_map,
        "focus": focus,
        "budget_share": budget_share or None,
    }
    step, extra = None, ""
    if kind == "release" and all_steps:
        _all_steps(stored_dir, torch_runs=torch_runs, report=report, knobs=knobs)
        return
    if ground_truth is not None:
        truth, universe, plans, more = _given_plans(suite, ground_truth, knobs=knobs)
    elif kind == "mutation":
        truth, universe, plans, extra = _sampled(
            suite,
            sample=sample or 150,
            seed=seed,
            run=run,
            cap=restricted_cap,
            check=check,
            check_cap=check_cap,
            budget=budget,
            minutes=minutes,
        )
        more = {}
    else:
        from cli.evaluate_release import release_step

        where: dict[str, Any] = dict(upstream=upstream, offline=offline, cache_dir=cache_dir)
        step = release_step(
            from_, to, run=run, torch_runs=torch_runs, stored_dir=stored_dir, **where, **knobs
        )
        truth, universe, plans, more = _release_plans(step)
    _print_scores(kind, truth, universe, plans, more, step, profiling_map, report, extra)


def _all_steps(
    stored_dir: Path | None, *, torch_runs: int, report: Path | None, knobs: dict[str, Any]
) -> None:
    """``--all``: every stored step's tables (nothing made or fetched), then the
    leave-one-step-out table over them once."""
    from cli.evaluate_release import release_step, stored_loso
    from evaluation.stepinputs import stored_steps
    from planner.release import DEFAULT_RELEASE_SHARE

    steps = stored_steps(stored_dir)
    if not steps:
        typer.echo("error: no stored step (evaluation/data/groundtruth or --stored-dir)", err=True)
        raise typer.Exit(1)
    scored: dict[str, Any] = {}
    texts = []
    for base, head in steps:
        typer.echo(f"## {base} -> {head}")
        step = release_step(
            base,
            head,
            upstream=None,
            offline=True,
            cache_dir=None,
            run=False,
            torch_runs=torch_runs,
            stored_dir=stored_dir,
            **knobs,
        )
        truth, universe, plans, more = _release_plans(step)
        texts.append(
            _print_scores(
                "release",
                truth,
                universe,
                plans,
                more,
                step,
                knobs["profiling_map"],
                None,
                loso=False,
                scored=scored,
            )
        )
    options = dict(
        budget_seconds=knobs["budget"],
        profiling_map=knobs["profiling_map"],
        import_map=not knobs["no_import_map"],
        min_closeness=knobs["focus"],
        budget_share=knobs["budget_share"],
    )
    loso = stored_loso(options, stored_dir, shipped=DEFAULT_RELEASE_SHARE, scored=scored)
    typer.echo("\n" + loso)
    text = "\n\n".join([*texts, loso])
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(text + "\n", encoding="utf-8")
    store_report(report, "release", text)


def _sampled(suite: list[str], **options: Any) -> tuple[Any, Any, dict[str, Any], str]:
    """``--kind mutation``: the sampled mutants' truths (stored or run), the product's plan of
    each, and the text on the sample and the restriction check (cli.mutation)."""
    from cli.mutation import mutation_command

    found, universe = mutation_command(suites=suite, log=typer.echo, **options)
    if not found.truth.events:
        typer.echo(found.text.splitlines()[0], err=True)
        typer.echo("no ground truth yet: add --run (runs each sampled mutant)", err=True)
        raise typer.Exit(1)
    return found.truth, universe, found.plans, found.text


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


def _given_plans(
    suite: list[str], ground_truth: Path, *, knobs: dict[str, Any]
) -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    """A given ground truth (``--ground-truth``), its universe, our plan per event and, with
    a budget share, the same ranking uncut (the recall-cost curve)."""
    from evaluation.scores import GroundTruth

    universe = universe_from_inventory(suites=suite)
    truth = GroundTruth.load(ground_truth)
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
    extra: str = "",
    *,
    loso: bool = True,
    scored: dict[str, Any] | None = None,
) -> str:
    """Score every plan, print the table (then ``extra``, and the release step's report:
    with ``loso`` the leave-one-step-out table; ``scored`` collects its results), write and
    store it (not under ``--all``: ``scored`` given); the text."""
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
    if extra:
        text += "\n\n" + extra
    if step is not None:
        from cli.evaluate_release import step_report
        from planner.release import DEFAULT_RELEASE_SHARE

        text += "\n\n" + step_report(
            step,
            profiling_map=profiling_map,
            estimator=estimator,
            shipped=DEFAULT_RELEASE_SHARE,
            loso=loso,
            scored=scored,
        )
    typer.echo(text)
    for event in truth.events:
        if event.kind == "release":
            typer.echo(f"{event.name}: {len(event.failing)} variants; {event.detail}")
    unobservable = [e.name for e in truth.events if not e.failing]
    if unobservable:
        typer.echo(f"unobservable ({len(unobservable)}): {', '.join(unobservable)}")
    if scored is not None:
        return text
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(text + "\n", encoding="utf-8")
        report.with_suffix(".json").write_text(scores_json(scores), encoding="utf-8")
    store_report(report, kind, text, json.loads(scores_json(scores)))
    return text


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
