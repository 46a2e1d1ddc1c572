"""`relay eval --kind mutation`: the selector's recall on sampled source mutants.

The seeded sampler of the catch evaluation (:mod:`evaluation.mutants`, the same fixed list of
upstream files and operators) draws the mutants from the local upstream repository (the
installed torch's Python files, :mod:`evaluation.localrepo`). Each mutant is committed on its
own branch; its restricted ground truth (:mod:`evaluation.sampled`) runs in the overlay of that
commit over the base torch and in the clean base. The selector's plan for the mutant is the
product's plan of a pull request's diff (:func:`planner.plan_revisions` over ``base..head`` of
that repository, the backend's specs, and the signals' inputs a pull request's plan has,
:func:`planner.revisions_config`: the import map learned from our runs of the base torch, which
the overlay runs), scored against the truth beside
run-all, random at equal cost and PyTorch's TD rule (``cli.evaluate``). A few mutants drawn at
random run again over the whole runnable universe (or the largest set that fits) to check the
restriction.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from evaluation.localrepo import LocalUpstream, commit_file
from evaluation.mutants import Mutant
from evaluation.sampled import (
    MutantTruth,
    Records,
    RestrictionCheck,
    check_ids,
    check_restriction,
    drawn_for_check,
    ground_truth,
    mutant_rows,
    mutant_truth,
    summary_lines,
)
from evaluation.scores import GroundTruth
from planner import plan_revisions, revisions_config
from selector import History, SelectionPlan, Universe
from upstream.undertest import (
    RunEnvironment,
    UpstreamUnderTest,
    installed_environment,
    resolve_environment,
)


@dataclass
class MutationRun:
    truth: GroundTruth  # the mutants whose truth is known
    plans: dict[str, SelectionPlan]  # mutant id -> the product's plan of its change
    text: str  # the sampled set, the restriction check, a row per mutant


@dataclass
class Setting:
    """What the truths and checks run in and under."""

    repo: LocalUpstream
    universe: Universe
    records: Records
    envs: Path  # where the overlays are made
    specs: Sequence[Path] = ()
    import_map: Path | None = None  # the traced map: the truths' restriction, the plans' signals
    cap: int = 300  # restricted set at most
    seed: int = 0
    log: Callable[[str], None] = lambda _: None


def commit_mutant(repo: LocalUpstream, mutant: Mutant, *, seed: int) -> str:
    """The mutant's commit on its own branch from the base (the same SHA every time)."""
    return commit_file(
        repo,
        branch=f"mutation/s{seed}/{mutant.id}",
        path=mutant.path,
        content=mutant.source,
        message=f"{mutant.symbol}: {mutant.operator} ({mutant.description}, line {mutant.line})",
    )


def _overlay(s: Setting, sha: str) -> RunEnvironment:
    under_test = UpstreamUnderTest(kind="overlay", head_sha=sha)
    return resolve_environment(under_test, envs=s.envs, checkout=s.repo.path)


def _in_time(deadline: float | None) -> bool:
    return deadline is None or time.monotonic() < deadline


def known_truth(
    s: Setting, mutant: Mutant, *, run: bool, deadline: float | None
) -> MutantTruth | None:
    """The mutant's truth: stored, else (``run``, before ``deadline``) run now."""
    found = s.records.truth(mutant)
    if found is not None or not run or not _in_time(deadline):
        return found
    if s.import_map is None:
        raise RuntimeError("no traced import map: the restricted sets cannot be known")
    sha = commit_mutant(s.repo, mutant, seed=s.seed)
    s.log(f"{mutant.id} {mutant.symbol} {mutant.operator} ({mutant.description}) ...")
    found = mutant_truth(
        s.universe,
        mutant,
        head_sha=sha,
        import_map=s.import_map,
        mutant_env=_overlay(s, sha),
        base_env=installed_environment(),
        records=s.records,
        specs=s.specs,
        cap=s.cap,
        log=s.log,
    )
    s.log(f"{mutant.id}: {len(found.broken)} of {len(found.ran)} restricted variants broken")
    return found


def known_check(
    s: Setting,
    mutant: Mutant,
    truth: MutantTruth,
    *,
    run: bool,
    cap: int,
    deadline: float | None,
) -> RestrictionCheck | None:
    """The mutant's restriction check: stored, else (``run``, before ``deadline``) run now."""
    found = s.records.check(mutant, check_ids(s.universe, truth, cap=cap, seed=s.seed)[2])
    if found is not None or not run or not _in_time(deadline):
        return found
    s.log(f"{mutant.id}: restriction check ...")
    commit_mutant(s.repo, mutant, seed=s.seed)
    found = check_restriction(
        s.universe,
        mutant,
        truth,
        mutant_env=_overlay(s, truth.head_sha),
        base_env=installed_environment(),
        records=s.records,
        specs=s.specs,
        cap=cap,
        seed=s.seed,
        log=s.log,
    )
    s.log(f"{mutant.id}: {len(found.outside)} broken variant(s) outside the restricted set")
    return found


def plan_mutant(
    s: Setting,
    mutant: Mutant,
    *,
    budget: float | None,
    history: History | None,
    facts_cache: Path | None,
) -> SelectionPlan:
    """The product's plan of the mutant's pull request: ``base..head`` of the local upstream
    repository, as the default planner plans it (the listed cut and removed tests dropped)."""
    sha = commit_mutant(s.repo, mutant, seed=s.seed)
    plan = plan_revisions(
        base=s.repo.base,
        head=sha,
        upstream=s.repo.path,
        universe=s.universe,
        specs=s.specs,
        budget_seconds=budget,
        history=history,
        facts_cache=facts_cache,
        offline=False,
        config=revisions_config(
            s.import_map,
            () if s.import_map else ("import map not learned: planned without the traced signals",),
        ),
    )
    return plan.model_copy(update={"cut": [], "removed": []})


def evaluate_mutants(
    s: Setting,
    mutants: Sequence[Mutant],
    *,
    run: bool,
    check: int = 10,
    check_cap: int = 0,
    budget: float | None = None,
    history: History | None = None,
    facts_cache: Path | None = None,
    deadline: float | None = None,
) -> MutationRun:
    """Truths (stored or run), the restriction check of ``check`` mutants drawn at random, and
    the product's plan of every mutant whose truth is known. Nothing starts after
    ``deadline`` (``time.monotonic()``); what is left is reported as not run."""
    drawn = drawn_for_check([m.id for m in mutants], check, seed=s.seed)
    known: list[tuple[Mutant, MutantTruth]] = []
    checked: list[RestrictionCheck] = []
    # the drawn mutants first, each checked right after its truth (the sample's order is the
    # sampler's random one, so a partial run is a random subset with its checks)
    first = [m for m in mutants if m.id in drawn]
    for mutant in [*first, *(m for m in mutants if m.id not in drawn)]:
        truth = known_truth(s, mutant, run=run, deadline=deadline)
        if truth is None:
            continue
        known.append((mutant, truth))
        if mutant.id in drawn:
            done = known_check(s, mutant, truth, run=run, cap=check_cap, deadline=deadline)
            checked += [done] if done is not None else []
    order = {m.id: i for i, m in enumerate(mutants)}
    known.sort(key=lambda pair: order[pair[0].id])
    plans = {
        m.id: plan_mutant(s, m, budget=budget, history=history, facts_cache=facts_cache)
        for m, _ in known
    }
    found = [t for _, t in known]
    selected = {name: set(plan.test_ids) for name, plan in plans.items()}
    lines = summary_lines(len(mutants), found, checked, len(drawn))
    not_yet = [m for m in drawn if m not in {c.mutant_id for c in checked}]
    if not_yet:
        lines.append(f"  not checked yet: {', '.join(not_yet)}")
    text = "\n".join([*lines, "", *mutant_rows(found, selected)])
    return MutationRun(ground_truth(found, s.universe), plans, text)


def mutation_command(
    *,
    sample: int,
    seed: int,
    suites: Sequence[str],
    run: bool,
    cap: int,
    check: int,
    check_cap: int,
    budget: float | None,
    minutes: float | None,
    log: Callable[[str], None],
) -> tuple[MutationRun, Universe]:
    """The whole evaluation on the bundled universe (``suites``: a part of it) under the
    backend's specs: the repository, the sample, the truths, the checks and the plans."""
    from backends import get_backend
    from backends.base import package_dir, torch_build
    from config.settings import get_settings
    from evaluation.groundtruth import eval_dir
    from evaluation.localrepo import local_upstream
    from evaluation.mutants import sample_mutants
    from inventory.build import universe_from_inventory
    from inventory.importmap import import_map_for
    from planner.durations import base_run_history
    from store import caches

    torch_dir = package_dir("torch")
    if torch_dir is None:
        raise RuntimeError("torch is not installed")
    repo = local_upstream(
        eval_dir(),
        torch_dir=torch_dir,
        torch_build=torch_build(),
        torchgen_dir=package_dir("torchgen"),
    )
    log(f"local upstream repository {repo.path} (base {repo.base[:12]}, torch {repo.torch_build})")
    mutants = sample_mutants(repo.path, count=sample, seed=seed)
    log(f"{len(mutants)} mutant(s) sampled (seed {seed})")
    specs = list(get_backend("spyre").default_specs)  # the runner's (RELAY_RUNNER_SPECS unset)
    universe = universe_from_inventory(specs=specs, suites=suites)
    records = Records(eval_dir(), universe, specs, cap)
    import_map = None
    # the truths' restricted sets and the plans (a pull request's plan uses the learned map)
    if run or any(records.truth(m) is not None for m in mutants):
        log("the traced import map (learned once per torch build: half an hour or more) ...")
        import_map = import_map_for(universe, timeout=4 * 3600)
        if import_map is None:
            raise RuntimeError("no traced import map for this universe")
    setting = Setting(
        repo, universe, records, caches.cache_dir("envs"), specs, import_map, cap, seed, log
    )
    deadline = time.monotonic() + 60 * minutes if minutes else None
    result = evaluate_mutants(
        setting,
        mutants,
        run=run,
        check=check,
        check_cap=check_cap,
        budget=budget,
        history=base_run_history(universe),
        facts_cache=get_settings().upstream_cache,
        deadline=deadline,
    )
    return result, universe
