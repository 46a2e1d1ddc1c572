"""`relay select`, `relay replay` and `relay eval`: the selector on the command line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from selector.plan import (
    SelectionPlan,
    import_map_for,
    run_selection,
    source_reader,
    universe_from_inventory,
)
from selector.signals import DEFAULT_PROFILING_MAP, SignalConfig
from selector.stages import History

DEFAULT_PLAN_DIR = Path("var/plans")

_UPSTREAM = typer.Option(
    None,
    "--upstream",
    envvar="RELAY_UPSTREAM_PATH",
    help="a PyTorch checkout (revisions are commits); default: released "
    "wheels (revisions are versions)",
)
_BUDGET = typer.Option(None, "--budget", help="budget in simulated device-seconds")
_WORKERS = typer.Option(1, "--workers", "-n", help="shards to split the selection into")
_HISTORY = typer.Option(
    None, "--history", help="JSON {test id: seconds | {seconds, runs, failures, flaky}}"
)
_SPECS = typer.Option([], "--specs", help="spec file or folder; repeatable")
_PROFILING = typer.Option(
    DEFAULT_PROFILING_MAP,
    "--profiling-map",
    help="PyTorch's td_heuristic_profiling.json (coverage prior)",
)
_COVERAGE = typer.Option(None, "--coverage-map", help="our coverage map JSON {source: [tests]}")
_ONLINE = typer.Option(False, "--online", help="let the wheel source download missing releases")
_CACHE = typer.Option(None, "--cache-dir", help="wheel and change-facts cache folder")
_FOCUS = typer.Option(
    0.0,
    "--focus",
    help="cut variants only broad signals chose (closeness "
    "below this, e.g. 0.5: common code, file-level "
    "coverage, fallback); they are listed as cut",
)
_NO_IMPORTS = typer.Option(
    False, "--no-import-map", help="do not use (or learn) the import map of our own runs"
)


def _open(upstream: Path | None, online: bool, cache_dir: Path | None, base: str, head: str):
    from selector.changes import compute_change_facts
    from selector.upstream import UpstreamError, open_source

    try:
        source = open_source(upstream, cache_dir=cache_dir, offline=not online)
        b, h = source.resolve(base), source.resolve(head)
        cache = cache_dir or getattr(source, "cache_dir", None) or Path("var/upstream")
        facts = compute_change_facts(source, b, h, cache_dir=cache)
    except UpstreamError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    return source, facts


def print_plan(plan: SelectionPlan, *, show: int = 20) -> None:
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
    typer.echo(plan.summary())


def select(
    base: str = typer.Option(..., "--base", help="base revision"),
    head: str = typer.Option(..., "--head", help="head revision"),
    budget: float | None = _BUDGET,
    as_json: bool = typer.Option(False, "--json", help="print the SelectionPlan JSON"),
    upstream: Path | None = _UPSTREAM,
    workers: int = _WORKERS,
    history: Path | None = _HISTORY,
    specs: list[Path] = _SPECS,
    profiling_map: Path | None = _PROFILING,
    coverage_map: Path | None = _COVERAGE,
    online: bool = _ONLINE,
    cache_dir: Path | None = _CACHE,
    out: Path | None = typer.Option(None, "--out", help="also write the plan JSON here"),
    no_import_map: bool = _NO_IMPORTS,
    focus: float = _FOCUS,
) -> None:
    """Select the variants one upstream change (base..head) can affect on the backend."""
    start = time.perf_counter()
    source, facts = _open(upstream, online, cache_dir, base, head)
    universe = universe_from_inventory(specs=specs)
    plan = run_selection(
        facts,
        universe,
        reader=source_reader(source, facts),
        config=SignalConfig(
            profiling_map=profiling_map,
            coverage_map=coverage_map,
            import_map=None if no_import_map else import_map_for(universe),
        ),
        budget_seconds=budget,
        workers=workers,
        history=History.load(history),
        min_closeness=focus,
    )
    plan.decision_seconds = round(time.perf_counter() - start, 4)
    if out is not None:
        plan.write(out)
    if as_json:
        typer.echo(plan.to_json())
    else:
        print_plan(plan)


def replay(
    from_: str | None = typer.Option(
        None, "--from", help="base release (2.13) or revision (not with --events)"
    ),
    to: str | None = typer.Option(
        None, "--to", help="head release (2.14) or revision (not with --events)"
    ),
    budget: float | None = _BUDGET,
    upstream: Path | None = _UPSTREAM,
    workers: int = _WORKERS,
    history: Path | None = _HISTORY,
    specs: list[Path] = _SPECS,
    profiling_map: Path | None = _PROFILING,
    online: bool = _ONLINE,
    cache_dir: Path | None = _CACHE,
    out: Path | None = typer.Option(
        None, "--out", help="plan JSON (default var/plans/replay-FROM-TO.json)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the plan JSON instead"),
    no_import_map: bool = _NO_IMPORTS,
    focus: float = _FOCUS,
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
    head_env: bool = typer.Option(
        False,
        "--head-env",
        help="collect the head universe for real: make (once) a virtual environment with the "
        "head torch (var/envs), build the backend there and collect the bundled suites with it",
    ),
) -> None:
    """The whole release step through the four stages; prints the funnel, writes the plan.
    With --run also runs it on the workers; with --events replays recorded webhook events."""
    from selector.release import collected_universe, release_plan
    from selector.replay_events import events_command, run_command

    if events is not None:
        if from_ or to or run:
            typer.echo(
                "error: --events replays recorded events: without --from/--to/--run", err=True
            )
            raise typer.Exit(2)
        events_command(
            events, url=url, rate=rate, wait=wait, as_json=as_json, as_upstream=as_upstream
        )
        return
    if from_ is None or to is None:
        typer.echo(
            "error: give --from and --to (a release step, e.g. --from 2.13 --to 2.14), "
            "or --events FILE (recorded webhook events)",
            err=True,
        )
        raise typer.Exit(2)
    start = time.perf_counter()
    source, facts = _open(upstream, online, cache_dir, from_, to)
    installed = universe_from_inventory(specs=specs)
    collected = None
    if head_env:
        env = _head_env(facts, online)
        typer.echo(f"head environment: {env.directory} (torch {env.torch_build})", err=True)
        collected = collected_universe(env, specs=specs)
    release = release_plan(
        source,
        facts,
        installed=installed,
        head=collected,
        budget_seconds=budget,
        workers=workers,
        history=History.load(history),
        profiling_map=profiling_map,
        import_map=not no_import_map,
        min_closeness=focus,
    )
    plan = release.plan
    plan.decision_seconds = round(time.perf_counter() - start, 4)
    path = out or DEFAULT_PLAN_DIR / f"replay-{from_}-{to}.json"
    plan.write(path)
    if as_json:
        typer.echo(plan.to_json())
    else:
        print_plan(plan, show=10)
        for note in release.notes:
            typer.echo(f"note: {note}")
        typer.echo(f"plan written to {path} (fingerprint {plan.fingerprint()})")
    if run:
        run_command(from_, to, url=url, wait=wait, err=as_json)


def _head_env(facts, online: bool):
    from selector.headenv import HeadEnvError
    from selector.release import head_env_for

    try:
        return head_env_for(facts, offline=not online)
    except HeadEnvError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc


def _load_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def evaluate(
    kind: str = typer.Option(
        "mutation",
        "--kind",
        help="ground truth: mutation (single-function faults) or release (full runs under the "
        "base and the head torch)",
    ),
    suite: list[str] = typer.Option(
        [], "--suite", "-s", help="mutation: restrict the universe (and its runs) to these suites"
    ),
    limit: int = typer.Option(0, "--limit", help="first N mutants of the catalogue (0 = all)"),
    run: bool = typer.Option(
        False,
        "--run",
        help="run missing ground truth (long: the full universe, then each mutant or the head "
        "torch's full universe; cached in var/eval)",
    ),
    full: bool = typer.Option(
        False,
        "--full",
        help="mutation: run the whole universe per mutant, not only the variants the traced "
        "baseline shows calling the mutated function on the device (same result, hours longer)",
    ),
    from_: str = typer.Option("2.13", "--from", help="release: the base release"),
    to: str = typer.Option("2.14", "--to", help="release: the head release"),
    upstream: Path | None = _UPSTREAM,
    online: bool = _ONLINE,
    cache_dir: Path | None = _CACHE,
    ground_truth: Path | None = typer.Option(
        None, "--ground-truth", help="a GroundTruth JSON to score instead"
    ),
    budget: float | None = _BUDGET,
    profiling_map: Path | None = _PROFILING,
    no_import_map: bool = _NO_IMPORTS,
    focus: float = _FOCUS,
    report: Path | None = typer.Option(None, "--report", help="write the table (Markdown) here"),
) -> None:
    """Recall and cost of the selector against ground truth, beside run-all, random at equal
    cost and PyTorch's file-level target determination."""
    from selector.evaluate import GroundTruth, scores_json, table
    from selector.evaluate import evaluate as score_all

    if kind not in ("mutation", "release"):
        typer.echo(f"error: --kind is mutation or release, not {kind!r}", err=True)
        raise typer.Exit(2)
    if kind == "release" and ground_truth is None:
        truth, universe, plans, more = _release_eval(
            from_, to, upstream=upstream, online=online, cache_dir=cache_dir, run=run,
            budget=budget, profiling_map=profiling_map, no_import_map=no_import_map, focus=focus,
        )  # fmt: skip
    else:
        universe = universe_from_inventory(suites=suite)
        truth = (
            GroundTruth.load(ground_truth)
            if ground_truth is not None
            else _mutation_truth(universe, limit=limit, run=run, full=full)
        )
        plans = _event_plans(
            truth, universe, budget=budget, profiling_map=profiling_map,
            no_import_map=no_import_map, focus=focus,
        )  # fmt: skip
        more = {}
    scores = score_all(truth, universe, plans, profiling_map=profiling_map, more_plans=more)
    text = table(scores, truth)
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


def _mutation_truth(universe, *, limit: int, run: bool, full: bool):
    from selector.groundtruth import check_trace, mutation_ground_truth
    from selector.mutations import MUTANTS

    names = list(MUTANTS)[: limit or None]
    truth = mutation_ground_truth(universe, names, run=run, traced=not full, log=typer.echo)
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


def _event_plans(truth, universe, *, budget, profiling_map, no_import_map, focus):
    from selector.groundtruth import event_facts, installed_reader

    config = SignalConfig(
        profiling_map=profiling_map, import_map=None if no_import_map else import_map_for(universe)
    )
    plans = {}
    for event in truth.events:
        start = time.perf_counter()
        plan = run_selection(
            event_facts(event),
            universe,
            reader=installed_reader,
            config=config,
            budget_seconds=budget,
            min_closeness=focus,
        )
        plan.decision_seconds = round(time.perf_counter() - start, 4)
        plans[event.name] = plan
    return plans


def _release_eval(from_, to, *, upstream, online, cache_dir, run, budget, profiling_map,
                  no_import_map, focus):  # fmt: skip
    """The release step's ground truth (two full runs) and its plans: the one ``relay replay``
    makes (installed universe adjusted by the change facts) and the one over the head universe
    collected for real (``relay replay --head-env``)."""
    from selector.release import collected_universe, release_plan, release_truth

    source, facts = _open(upstream, online, cache_dir, from_, to)
    installed = universe_from_inventory()
    env = _head_env(facts, online)
    head = collected_universe(env)
    truth = release_truth(facts, installed=installed, env=env, head=head, run=run, log=typer.echo)
    if not truth.events:
        typer.echo("no ground truth yet: add --run (the full universe under both torches)",
                   err=True)  # fmt: skip
        raise typer.Exit(1)
    options = dict(
        budget_seconds=budget, profiling_map=profiling_map, import_map=not no_import_map,
        min_closeness=focus,
    )  # fmt: skip
    estimated = release_plan(source, facts, installed=installed, **options).plan
    collected = release_plan(source, facts, installed=installed, head=head, **options).plan
    names = [e.name for e in truth.events]
    more = {"ours, head collected": dict.fromkeys(names, collected)}
    if not focus:  # the conservative plan and, beside it, what --focus 0.5 would cut
        options["min_closeness"] = 0.5
        focused = release_plan(source, facts, installed=installed, **options).plan
        more["ours --focus 0.5"] = dict.fromkeys(names, focused)
    return truth, head, dict.fromkeys(names, estimated), more
