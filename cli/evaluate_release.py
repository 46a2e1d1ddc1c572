"""``relay eval --kind release``: a release step scored from its stored ground truth.

The step's full runs and the inputs of its plans are stored in the repository
(``evaluation/data/groundtruth``: run 1 and run 2 of each torch, each torch's collected
universe, the step's change facts and the upstream files its plans read;
:mod:`evaluation.stepinputs`). With all of them stored the command makes no environment,
downloads and collects nothing: the product's planner runs over the stored inputs. Without
them it says which are missing and the ``--run`` command that makes them, before anything
heavy starts. The tables: the variant-level one of :func:`evaluation.scores.table`, the events
per OpInfo / ModuleInfo entry (:mod:`evaluation.events`) and the leave-one-step-out choice of
the budget share over every step stored beside it (:mod:`evaluation.loso`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer

from backends import get_backend
from backends.base import torch_build
from cli import options as opt
from cli.progress import ProgressBar
from cli.replay import make_env, make_head_env
from evaluation.events import (
    StepEvents,
    cut_at,
    entry_curve,
    score_step,
    step_selections,
    step_table,
    unit_costs,
)
from evaluation.loso import SHARES, StepResults, leave_one_step_out, loso_table, setting_results
from evaluation.release import (
    Side,
    StepInputs,
    StepRuns,
    make_runs,
    missing_error,
    notes,
    read_stored_universe,
    seed_cache,
    step_truth,
    stored_inputs,
    stored_step,
)
from evaluation.scores import GroundTruth
from evaluation.stepinputs import (
    RecordingSource,
    StepInputError,
    StoredSource,
    StoredStepInput,
    StoredUniverse,
    import_map_data,
    input_notes,
    read_step_input,
    resolve_stored,
    seed_import_map,
    step_file,
    stored_steps,
    stored_versions,
    universe_file,
    write_step_input,
    write_universe,
)
from evaluation.stepinputs import make_header as make_input_header
from evaluation.storedruns import STORED_DIR, load_run
from inventory.build import universe_from_inventory
from inventory.sources import BundledSuites
from planner.durations import estimator_for
from planner.filefacts import FileFactsStore
from selector import History, SelectionPlan, Universe
from store import caches
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
    options: dict[str, Any] = field(default_factory=dict)  # the plans' (leave-one-step-out's)
    folder: Path | None = None  # where its runs and inputs are stored (None: the repository's)


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
    stored_dir: Path | None = None,
) -> ReleaseStep:
    """The step's stored ground truth and its plans: the one ``relay replay`` makes by default
    (the head universe collected in the head environment), the one over the installed universe
    adjusted by the facts (``--estimate-head``), and the same ranking uncut. With its runs and
    inputs stored (``stored_dir``, default ``evaluation/data/groundtruth``) nothing is made,
    fetched or collected: the plans read the stored inputs; ``run`` makes what is missing."""
    options = dict(
        budget_seconds=budget,
        profiling_map=profiling_map,
        import_map=not no_import_map,
        min_closeness=focus,
        budget_share=budget_share,
    )
    command = f"relay eval --kind release --from {from_} --to {to} --run"
    base_v, head_v = resolve_stored(from_, stored_dir), resolve_stored(to, stored_dir)
    if base_v and head_v:
        step = stored_step(base_v, head_v, runs=torch_runs, folder=stored_dir)
        inputs = _inputs(base_v, head_v, stored_dir)
        if step.complete and not inputs.missing and not (run and step.missing):
            return stored_release_step(step, inputs, options, folder=stored_dir)
        error = missing_error(step, command, inputs, stored_dir)
    else:
        error = (
            f"no stored ground truth for {from_} -> {to} "
            f"({(stored_dir or STORED_DIR).resolve()}): make it with `{command}`"
        )
    if not run:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1)
    return _made_release_step(
        from_,
        to,
        upstream=upstream,
        offline=offline,
        cache_dir=cache_dir,
        torch_runs=torch_runs,
        options=options,
        stored_dir=stored_dir,
    )


def _inputs(base_v: str, head_v: str, folder: Path | None) -> StepInputs:
    try:
        return stored_inputs(base_v, head_v, folder)
    except StepInputError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


def stored_release_step(
    step: StepRuns,
    inputs: StepInputs,
    options: dict[str, Any],
    *,
    folder: Path | None = None,
    say: Callable[[str], None] = typer.echo,
    uncut_only: bool = False,
) -> ReleaseStep:
    """A step scored from its stored runs and inputs alone: no environment, no wheel, no
    collection; the plans are the product's (:func:`planner.release.release_plan`) over the
    stored universes, facts and upstream files, without learning an import map."""
    from planner.release import not_queued

    assert inputs.base and inputs.head and inputs.step
    say(step.describe())
    say(inputs.describe())
    seed_stored(folder)
    builds = {
        step.base_version: inputs.base.header.torch_build,
        step.head_version: inputs.head.header.torch_build,
    }
    headers = [inputs.base.header, inputs.head.header, inputs.step.header]
    here = input_notes(
        headers, backend_version=get_backend("spyre").version(), suites=BundledSuites().revision()
    )
    for note in [*notes(step, builds), *here]:
        say(f"note: {note}")
    facts = inputs.step.facts
    seed_import_map(inputs.base.universe, inputs.base.import_map)
    cache = (
        caches.cache_dir("eval") / "stored-steps" / f"{step.base_version}_to_{step.head_version}"
    )
    try:
        stale = seed_file_facts(cache, inputs.step, step.base_version, step.head_version)
    except StepInputError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    if stale:
        say(f"note: {stale}")
    source = StoredSource(inputs.step, cache_dir=cache)
    plans, uncut = step_plans(
        source,
        facts,
        inputs.base.universe,
        inputs.head.universe,
        options,
        learn_later=not_queued("not learned for a stored step: its stored universe has none"),
        uncut_only=uncut_only,
    )
    if source.unread:
        say(
            f"note: the stored file facts lack {len(source.unread)} of what this selector's "
            f"signals asked (they were not learned: no upstream file is stored); "
            f"{refresh_command(step.base_version, step.head_version)} refreshes them"
        )
    scored = _scored(step, facts, inputs.base.universe, inputs.head.universe, plans, uncut)
    scored.options, scored.folder = options, folder
    return scored


def refresh_command(base: str, head: str) -> str:
    """The command that learns a stored step's file facts again (on a host with the wheels)."""
    return f"`relay eval --kind release --from {base} --to {head} --run --torch-runs 0`"


def seed_file_facts(cache: Path, stored: StoredStepInput, base: str, head: str) -> str:
    """The stored step's file facts into the store its plans read (``cache/filefacts``, keyed
    by this selector code); a note when another selector revision learned them ("" when this
    one did). Facts of another format (memo) version cannot be read by this code: an error."""
    store = FileFactsStore(cache / "filefacts")
    learned_by, ours = stored.selector, store.root.name
    if learned_by.split("-", 1)[0] != ours.split("-", 1)[0]:
        raise StepInputError(
            f"the stored {base} -> {head} file facts are of format {learned_by or 'unknown'}, "
            f"this code reads {ours.split('-', 1)[0]}: {refresh_command(base, head)} "
            "(on a host with the wheels) learns them again"
        )
    for key, value in stored.file_facts.items():
        if key not in store:
            store[key] = value
    if learned_by == ours:
        return ""
    return (
        f"the stored {base} -> {head} file facts were learned by another selector revision "
        f"({learned_by}, this one is {ours}); {refresh_command(base, head)} (on a host with "
        "the wheels) refreshes them"
    )


def recorded_file_facts(cache: Path) -> tuple[str, dict[str, Any]]:
    """What the signals learned while the plans were recorded (``cache``: the recording
    source's folder) and the selector code it is valid for."""
    store = FileFactsStore(cache / "filefacts")
    return store.root.name, {key: store[key] for key in store}


def seed_stored(folder: Path | None) -> None:
    """Every stored torch's run 1 into this host's run cache (the selector's base history and
    the measured runner-seconds of every step read them), so that a step's tables are the
    same alone and under ``--all``."""
    for version in stored_versions(folder):
        path = universe_file(version, folder)
        run = load_run(version, 1, folder)
        if path.is_file() and run is not None:
            seed_cache(read_stored_universe(path).universe, run)


def _made_release_step(
    from_: str,
    to: str,
    *,
    upstream: Any,
    offline: bool,
    cache_dir: Any,
    torch_runs: int,
    options: dict[str, Any],
    stored_dir: Path | None,
) -> ReleaseStep:
    """``--run``: both torches' environments and universes, the facts from the wheels, the
    missing runs made and stored, the plans made while the files they read are recorded, and
    the missing inputs stored."""
    progress = opt.Progress()
    source, facts = opt.open_facts(upstream, offline, cache_dir, from_, to, progress)
    base_v, head_v = _version(facts.base.resolved), _version(facts.head.resolved)
    step = stored_step(base_v, head_v, runs=torch_runs, folder=stored_dir)
    base, head, envs = _sides(facts, base_v, head_v, offline=offline, progress=progress)
    if step.missing:
        with ProgressBar("ground-truth runs (base and head)") as bar:
            step = make_runs(
                step,
                [base, head],
                runs=torch_runs,
                folder=stored_dir,
                log=typer.echo,
                progress=bar.update,
            )
    typer.echo(step.describe())
    for note in notes(step, {base_v: base.torch_build, head_v: head.torch_build}):
        typer.echo(f"note: {note}")
    if torch_runs:
        seed_cache(base.universe, step.runs[base_v][0])
        seed_cache(head.universe, step.runs[head_v][0])
    facts = _with_behaviour(
        source, facts, envs, cache_dir=cache_dir, offline=offline, progress=progress
    )
    with tempfile.TemporaryDirectory(prefix="recorded-") as memo:
        recording = RecordingSource(source, facts, cache_dir=Path(memo))
        plans, uncut = step_plans(recording, facts, base.universe, head.universe, options)
        learned = recorded_file_facts(Path(memo))
    for path in store_inputs(facts, base, head, recording, learned, folder=stored_dir):
        typer.echo(f"stored {path}")
    if not torch_runs:
        typer.echo("stored the step's inputs only (--torch-runs 0): it is scored once its runs are")
        raise typer.Exit(0)
    scored = _scored(step, facts, base.universe, head.universe, plans, uncut)
    scored.options, scored.folder = options, stored_dir
    return scored


def _scored(
    step: StepRuns,
    facts: Any,
    base: Universe,
    head: Universe,
    plans: dict[str, SelectionPlan],
    uncut: SelectionPlan,
) -> ReleaseStep:
    name = f"{facts.base.resolved} -> {facts.head.resolved}"
    changed = [f.path for f in facts.files]
    truth, events = step_truth(step, name=name, changed_files=changed, base=base, head=head)
    return ReleaseStep(
        name=name,
        truth=truth,
        events=events,
        runs=step,
        head=head,
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


def _with_behaviour(
    source: Any,
    facts: Any,
    envs: tuple[HeadEnv | None, HeadEnv],
    *,
    cache_dir: Any,
    offline: bool,
    progress: Any,
) -> Any:
    """The facts with the behaviour fingerprints of both torches (``envs``: their
    environments); what a stored step input keeps."""
    from planner.release import facts_cache_dir, with_behaviour

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
    return facts


def step_plans(
    source: Any,
    facts: Any,
    installed: Universe,
    head: Universe,
    options: dict[str, Any],
    *,
    learn_later: Any = None,
    uncut_only: bool = False,
) -> tuple[dict[str, SelectionPlan], SelectionPlan]:
    """Ours (the head collected, and the head estimated) and the same ranking uncut."""
    from planner.release import release_plan

    common = dict(installed=installed, learn_later=learn_later)
    uncut_options = {**options, "budget_seconds": None, "budget_share": None}
    uncut = release_plan(source, facts, head=head, **common, **uncut_options)
    if uncut_only:
        return {}, uncut.plan
    collected = release_plan(source, facts, head=head, **common, **options)
    estimated = release_plan(source, facts, **common, **options)
    plans = {"ours": collected.plan, "ours, head estimated (--estimate-head)": estimated.plan}
    return plans, uncut.plan


def store_inputs(
    facts: Any,
    base: Side,
    head: Side,
    recording: RecordingSource,
    learned: tuple[str, dict[str, Any]],
    *,
    folder: Path | None,
) -> list[Path]:
    """The step's inputs not stored yet: each torch's universe (with the import map this host
    learned for the base, when it has one) and the facts with the files the plans read (written
    again when the stored ones were learned by another selector revision)."""
    from inventory.importmap import import_map_for

    version = get_backend("spyre").version()
    suites = BundledSuites().revision()
    written = []
    for side in (base, head):
        if universe_file(side.version, folder).is_file():
            continue
        imports = import_map_for(side.universe, learn=False) if side is base else None
        header = make_input_header(
            name=side.version, torch_build=side.torch_build, backend_version=version, suites=suites
        )
        stored = StoredUniverse(header, side.universe, import_map_data(imports))
        written.append(write_universe(stored, folder))
    stored_step_file = step_file(base.version, head.version, folder)
    if not stored_step_file.is_file() or _learned_by(stored_step_file) != learned[0]:
        # absent, or its file facts learned by another selector revision: (re)written
        header = make_input_header(
            name=f"{base.version} -> {head.version}",
            torch_build=f"{base.torch_build} -> {head.torch_build}",
            backend_version=version,
            suites=suites,
        )
        from inventory.head import entry_dtype_facts

        selector, entries = learned
        dtypes = entry_dtype_facts(recording, facts)
        step = StoredStepInput(
            header, facts, recording.layout, recording.digests, selector, entries, dtypes
        )
        written.append(write_step_input(step, folder))
    return written


def _learned_by(path: Path) -> str:
    """The selector revision that learned the file facts of the stored step ``path``."""
    try:
        return read_step_input(path).selector
    except StepInputError:
        return ""


def step_report(
    step: ReleaseStep,
    *,
    profiling_map: Any,
    estimator: Any,
    shipped: float,
    loso: bool = True,
    scored: dict[str, StepResults] | None = None,
) -> str:
    """The per-event table of the step, then (``loso``) the leave-one-step-out table over every
    step stored beside it (:func:`stored_loso`). ``scored`` collects the step's results at
    every share of :data:`SHARES` (``--all`` prints the leave-one-step-out table once)."""
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
    text += "\n" + entry_curve(step.events, step.uncut)
    kept = {share: cut_at(step.uncut, share) for share in SHARES}
    results = {step.name: setting_results(step.events, kept, costs, full)}
    if scored is not None:
        scored.update(results)
    if not loso:
        return text
    return text + "\n\n" + stored_loso(step.options, step.folder, shipped=shipped, scored=results)


def stored_loso(
    options: dict[str, Any],
    folder: Path | None,
    *,
    shipped: float,
    scored: Mapping[str, StepResults] | None = None,
) -> str:
    """The leave-one-step-out table over every step whose runs and inputs are stored in
    ``folder`` (each step's results at every share recomputed from its stored inputs, unless
    ``scored`` has them), with a line naming the stored steps that could not be scored."""
    results = dict(scored or {})
    lacking = []
    for base_v, head_v in stored_steps(folder):
        runs = stored_step(base_v, head_v, folder=folder)
        inputs = _inputs(base_v, head_v, folder)
        if not runs.complete or inputs.missing:
            lacking.append(f"{base_v} -> {head_v}")
            continue
        assert inputs.step is not None
        facts = inputs.step.facts
        if f"{facts.base.resolved} -> {facts.head.resolved}" in results:
            continue
        step = stored_release_step(
            runs, inputs, options, folder=folder, say=lambda _: None, uncut_only=True
        )
        costs, full = unit_costs(step.head, history=History(), estimator=estimator_for(step.head))
        kept = {share: cut_at(step.uncut, share) for share in SHARES}
        results[step.name] = setting_results(step.events, kept, costs, full)
    text = loso_table(leave_one_step_out(results), shipped=shipped)
    if lacking:
        text += f"\nnot scored (stored without all of their runs and inputs): {', '.join(lacking)}"
    return text
