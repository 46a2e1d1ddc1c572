"""``relay eval --kind release``: a release step scored from its stored ground truth.

The step's full runs are stored in the repository (``evaluation/data/groundtruth``, run 1 and
run 2 of each torch); without them the command says which are missing and the ``--run``
command that makes them, before anything heavy starts. The tables: the variant-level one of
:func:`evaluation.scores.table`, the events per OpInfo / ModuleInfo entry
(:mod:`evaluation.events`) and the leave-one-step-out choice of the budget share over every
step scored on this host (:mod:`evaluation.loso`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import typer

from backends.base import torch_build
from cli import options as opt
from cli.progress import ProgressBar
from cli.replay import make_env, make_head_env
from evaluation.events import (
    StepEvents,
    cut_at,
    score_step,
    step_selections,
    step_table,
    unit_costs,
)
from evaluation.groundtruth import eval_dir
from evaluation.loso import (
    SHARES,
    leave_one_step_out,
    load_steps,
    loso_table,
    save_step,
    setting_results,
)
from evaluation.release import (
    Side,
    StepRuns,
    make_runs,
    missing_error,
    notes,
    seed_cache,
    step_truth,
    stored_step,
)
from evaluation.scores import GroundTruth
from inventory.build import universe_from_inventory
from selector import History, SelectionPlan, Universe
from upstream.headenv import HeadEnv


@dataclass
class ReleaseStep:
    name: str
    truth: GroundTruth
    events: StepEvents
    runs: StepRuns
    head: Universe
    changed_files: list[str]
    plans: dict[str, SelectionPlan]  # ours, and ours with the head estimated
    uncut: SelectionPlan


def _version(resolved: str) -> str:
    return resolved.split("+", 1)[0]


def release_step(
    from_: str,
    to: str,
    *,
    upstream: Any,
    offline: bool,
    cache_dir: Any,
    run: bool,
    torch_runs: int,
    budget: Any,
    profiling_map: Any,
    no_import_map: bool,
    focus: float,
    budget_share: float | None,
) -> ReleaseStep:
    """The step's stored ground truth (made first with ``run``) and its plans: the one ``relay
    replay`` makes by default (the head universe collected in the head environment), the one
    over the installed universe adjusted by the facts (``--estimate-head``), and the same
    ranking uncut."""
    progress = opt.Progress()
    source, facts = opt.open_facts(upstream, offline, cache_dir, from_, to, progress)
    name = f"{facts.base.resolved} -> {facts.head.resolved}"
    base_v, head_v = _version(facts.base.resolved), _version(facts.head.resolved)
    step = stored_step(base_v, head_v, runs=torch_runs)
    error = missing_error(step, f"relay eval --kind release --from {from_} --to {to} --run")
    if error and not run:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1)
    base, head, envs = _sides(facts, base_v, head_v, offline=offline, progress=progress)
    if run and step.missing:
        with ProgressBar("ground-truth runs (base and head)") as bar:
            step = make_runs(
                step, [base, head], runs=torch_runs, log=typer.echo, progress=bar.update
            )
    typer.echo(step.describe())
    for note in notes(step, {base_v: base.torch_build, head_v: head.torch_build}):
        typer.echo(f"note: {note}")
    # the selector's base history and the measured seconds read this host's cache of the runs
    seed_cache(base.universe, step.runs[base_v][0])
    seed_cache(head.universe, step.runs[head_v][0])
    changed = [f.path for f in facts.files]
    truth, events = step_truth(
        step, name=name, changed_files=changed, base=base.universe, head=head.universe
    )
    options = dict(
        budget_seconds=budget,
        profiling_map=profiling_map,
        import_map=not no_import_map,
        min_closeness=focus,
        budget_share=budget_share,
    )
    plans, uncut = _plans(
        source,
        facts,
        base,
        head,
        options,
        envs=envs,
        cache_dir=cache_dir,
        offline=offline,
        progress=progress,
    )
    return ReleaseStep(
        name=name,
        truth=truth,
        events=events,
        runs=step,
        head=head.universe,
        changed_files=changed,
        plans=plans,
        uncut=uncut,
    )


def _sides(
    facts: Any, base_v: str, head_v: str, *, offline: bool, progress: Any
) -> tuple[Side, Side, tuple[HeadEnv | None, HeadEnv]]:
    """Both torches of the step, each in its own environment (the base in this interpreter
    when it is the installed torch), with the universe collected under it; and the two
    environments (None: the installed torch)."""
    from planner.release import collected_universe, is_installed

    base_env = None
    if is_installed(facts.base.resolved):
        base = Side(base_v, torch_build(), universe_from_inventory())
    else:
        base_env = make_env(facts.base.resolved, offline)
        progress(f"base environment: {base_env.directory} (torch {base_env.torch_build})")
        base = Side(
            base_v,
            base_env.torch_build,
            collected_universe(base_env),
            str(base_env.python),
            base_env.env,
        )
    env = make_head_env(facts, offline)
    head = Side(head_v, env.torch_build, collected_universe(env), str(env.python), env.env)
    return base, head, (base_env, env)


def _plans(
    source: Any,
    facts: Any,
    base: Side,
    head: Side,
    options: dict[str, Any],
    *,
    envs: tuple[HeadEnv | None, HeadEnv],
    cache_dir: Any,
    offline: bool,
    progress: Any,
) -> tuple[dict[str, SelectionPlan], SelectionPlan]:
    """Ours (the head collected, and the head estimated) and the same ranking uncut, with the
    behaviour fingerprints of both torches (``envs``: their environments)."""
    from planner.release import facts_cache_dir, release_plan, with_behaviour

    plan_notes: list[str] = []
    facts = with_behaviour(
        facts,
        cache_dir=facts_cache_dir(source, cache_dir),
        offline=offline,
        notes=plan_notes,
        progress=progress,
        base_env=envs[0],
        head_env=envs[1],
    )
    for note in plan_notes:
        progress(note)
    installed = base.universe
    collected = release_plan(source, facts, installed=installed, head=head.universe, **options)
    estimated = release_plan(source, facts, installed=installed, **options)
    options = {**options, "budget_seconds": None, "budget_share": None}
    uncut = release_plan(source, facts, installed=installed, head=head.universe, **options)
    plans = {"ours": collected.plan, "ours, head estimated (--estimate-head)": estimated.plan}
    return plans, uncut.plan


def step_report(step: ReleaseStep, *, profiling_map: Any, estimator: Any, shipped: float) -> str:
    """The per-event table of the step, and the leave-one-step-out table over every step this
    host has scored (this one recorded first, at every share of :data:`SHARES`)."""
    costs, full = unit_costs(step.head, history=History(), estimator=estimator)
    selections = step_selections(
        step.name,
        step.head,
        costs,
        ours=step.plans,
        changed_files=step.changed_files,
        profiling_map=profiling_map,
        estimator=estimator,
    )
    text = step_table(score_step(step.events, selections, full))
    kept = {share: cut_at(step.uncut, share) for share in SHARES}
    folder = eval_dir() / "steps"
    save_step(
        folder,
        step.name,
        setting_results(step.events, kept, costs, full),
        runs=[p.name for p in step.runs.used],
    )
    return text + "\n\n" + loso_table(leave_one_step_out(load_steps(folder)), shipped=shipped)
