"""Evaluation of a selector against ground truth, side by side with baselines.

Ground truth is a list of events, each with the test ids whose outcome the change really
changed (learned by running the FULL universe, never a selector's choice): mutation events (one
injected single-function fault each) or the release event (2.13.0 vs 2.14.1). Selectors:

* ``ours``: the four stages (a SelectionPlan per event);
* ``run-all``: every applicable variant (its plan, :func:`selector.select` with ``force_all``,
  is made and timed once: its decision latency is measured, not assumed);
* ``random``: random variants of the applicable universe at the same cost as ours (seeded, so
  repeatable);
* ``pytorch-td``: a replay of PyTorch's target-determination rule at file level: each test file
  scores from the edited-tests, profiling-map and file-path heuristics, and the applicable
  variants of the top 25 % of files by count run.

Every selector is priced the same way, in runner-seconds (what a test costs on a runner;
:mod:`planner.durations` gives the estimate), over one denominator: the applicable universe's
runner-seconds (variants a spec does not skip and the head still has).

Metrics: test-level recall (failing variants selected / failing variants), event-level recall
(observable events with at least one failing variant selected / observable events; an event
that fails no test is unobservable and left out, and counted), cost ratio (selected runner-
seconds / the applicable universe's), and decision latency.
"""

from __future__ import annotations

import json
import math
import random
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field

from backends import get_backend
from backends.base import FlatEstimate
from selector import (
    REMOVED_AT_HEAD,
    DurationEstimate,
    History,
    SelectionPlan,
    SelectionRequest,
    Universe,
    price,
    select,
    unanalysed,
)
from selector.signals.coverage import UPSTREAM_ANALOGS, load_map

#: runner-seconds of a variant nobody measured, when the caller gives no estimate
FLAT_RUNNER_PRIOR = FlatEstimate(per_test=0.2, source="flat-runner-prior")

GROUND_TRUTH_VERSION = 1


class GroundTruthEvent(BaseModel):
    name: str
    kind: str  # mutation | release
    changed_files: list[str] = Field(default_factory=list)
    changed_symbols: dict[str, list[str]] = Field(default_factory=dict)
    failing: list[str] = Field(default_factory=list)  # variants whose outcome changed
    detail: str = ""


class GroundTruth(BaseModel):
    version: int = GROUND_TRUTH_VERSION
    kind: str
    universe: str  # label of the universe the full runs used
    variants: int
    events: list[GroundTruthEvent]
    # how the per-event runs were made: full (every variant each time), traced (only the
    # variants the traced baseline shows can be affected), outcomes (two full runs compared)
    method: str = "full"

    @classmethod
    def load(cls, path: str | Path) -> GroundTruth:
        return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))


@dataclass
class Selection:
    tests: set[str]
    seconds: float
    latency: float


@dataclass
class Score:
    selector: str
    test_recall: float | None
    event_recall: float | None
    cost_ratio: float  # mean runner-seconds / the applicable universe's runner-seconds
    count_ratio: float
    latency: float
    events: int
    observable: int
    caught: int
    failing: int
    failing_selected: int
    per_event: list[dict[str, object]] = field(default_factory=list)
    runner_seconds: float = 0.0  # mean per event


Selector = Callable[[GroundTruthEvent], Selection]


def cost_of(
    tests: Iterable[str], universe: Universe, history: History, estimator: DurationEstimate
) -> float:
    total = 0.0
    by_id = universe.by_id
    for tid in tests:
        h = history.get(tid)
        v = by_id.get(tid)
        if h is not None and h.seconds is not None:
            total += h.seconds
        elif v is not None:
            total += estimator.seconds(v)
    return total


def score(
    name: str, truth: GroundTruth, select: Selector, *, full_seconds: float, universe_size: int
) -> Score:
    caught = observable = failing = failing_selected = 0
    seconds = latency = count = 0.0
    rows: list[dict[str, object]] = []
    for event in truth.events:
        sel = select(event)
        fails = set(event.failing)
        hit = len(fails & sel.tests)
        if fails:
            observable += 1
            caught += hit > 0
        failing += len(fails)
        failing_selected += hit
        seconds += sel.seconds
        latency += sel.latency
        count += len(sel.tests)
        rows.append(
            {
                "event": event.name,
                "failing": len(fails),
                "selected_failing": hit,
                "selected": len(sel.tests),
                "seconds": round(sel.seconds, 6),
            }
        )
    n = max(len(truth.events), 1)
    return Score(
        selector=name,
        test_recall=failing_selected / failing if failing else None,
        event_recall=caught / observable if observable else None,
        cost_ratio=(seconds / n) / full_seconds if full_seconds else 0.0,
        count_ratio=(count / n) / max(universe_size, 1),
        latency=latency / n,
        runner_seconds=seconds / n,
        events=len(truth.events),
        observable=observable,
        caught=caught,
        failing=failing,
        failing_selected=failing_selected,
        per_event=rows,
    )


# -- baselines -------------------------------------------------------------------------


def applicable_ids(universe: Universe) -> list[str]:
    """The variants that can run at head: not skipped by a spec or by their test file, not
    gone at head (what the applicability stage keeps of everything)."""
    return sorted(
        v.test_id
        for v in universe.variants
        if v.decision != "skip"
        and not v.static_skip
        and universe.flags.get(v.test_id) != REMOVED_AT_HEAD
    )


def run_all(
    universe: Universe,
    costs: Mapping[str, float],
    *,
    estimator: DurationEstimate | None = None,
    backend: str = "spyre",
) -> Selector:
    """Every applicable variant; the run-all plan is made once and its decision timed."""
    start = time.perf_counter()
    priced = price(
        universe,
        history=History(),
        runner=estimator or FLAT_RUNNER_PRIOR,
        device=get_backend(backend).duration_estimate(),
    )
    plan = select(
        SelectionRequest(
            facts=unanalysed("base", "head"),
            universe=universe,
            costs=priced,
            backend=backend,
            force_all="run all",
        )
    )
    latency = time.perf_counter() - start
    everything = set(plan.test_ids)
    cost = sum(costs.get(t, 0.0) for t in everything)
    return lambda event: Selection(everything, cost, latency)


def random_at_cost(
    universe: Universe,
    costs: Mapping[str, float],
    target: Callable[[GroundTruthEvent], float],
    *,
    seed: int = 0,
) -> Selector:
    """Random draws from the applicable universe until ``target(event)`` runner-seconds."""
    ids = applicable_ids(universe)

    def select(event: GroundTruthEvent) -> Selection:
        start = time.perf_counter()
        rng = random.Random(f"{seed}:{event.name}")
        order = ids[:]
        rng.shuffle(order)
        budget = target(event)
        chosen: set[str] = set()
        spent = 0.0
        for tid in order:
            if spent >= budget:
                break
            chosen.add(tid)
            spent += costs.get(tid, 0.0)
        return Selection(chosen, spent, time.perf_counter() - start)

    return select


_WORD = re.compile(r"[a-z][a-z0-9]+")


def pytorch_td(
    universe: Universe,
    costs: Mapping[str, float],
    *,
    profiling_map: Path | None,
    top_share: float = 0.25,
) -> Selector:
    """File-level target determination in PyTorch's style (edited tests, profiling, file path)."""
    prior = load_map(str(profiling_map)) if profiling_map else {}
    files = sorted(universe.by_file)
    runnable = set(applicable_ids(universe))
    analog_of: dict[str, list[str]] = {}
    for upstream, bundled in UPSTREAM_ANALOGS.items():
        for f in bundled:
            analog_of.setdefault(f, []).append(upstream)
    file_ids = {f: {v.test_id for v in universe.by_file[f]} & runnable for f in files}
    file_cost = {f: sum(costs.get(t, 0.0) for t in file_ids[f]) for f in files}

    def select(event: GroundTruthEvent) -> Selection:
        start = time.perf_counter()
        scores = dict.fromkeys(files, 0.0)
        for path in event.changed_files:
            for f in files:
                if path == f:  # edited test file
                    scores[f] += 1.0
            for test in prior.get(path, []):  # profiling: source -> test files
                for f in files:
                    if test in analog_of.get(f, []) or f == f"test/{test}.py":
                        scores[f] += 0.5
            words = set(_WORD.findall(path.lower())) - {"torch", "py", "test", "testing"}
            for f in files:  # file path keywords
                if words & set(_WORD.findall(Path(f).stem.lower())):
                    scores[f] += 0.25
        ranked = sorted(files, key=lambda f: (-scores[f], f))
        keep = [f for f in ranked[: max(1, math.ceil(top_share * len(files)))] if scores[f] > 0]
        chosen = {t for f in keep for t in file_ids[f]}
        return Selection(chosen, sum(file_cost[f] for f in keep), time.perf_counter() - start)

    return select


def from_plans(plans: Mapping[str, SelectionPlan], costs: Mapping[str, float]) -> Selector:
    """A plan per event, priced with ``costs`` like every other selector."""

    def select(event: GroundTruthEvent) -> Selection:
        plan = plans[event.name]
        tests = set(plan.test_ids)
        return Selection(tests, sum(costs.get(t, 0.0) for t in tests), plan.decision_seconds)

    return select


def evaluate(
    truth: GroundTruth,
    universe: Universe,
    plans: Mapping[str, SelectionPlan],
    *,
    history: History | None = None,
    profiling_map: Path | None = None,
    seed: int = 0,
    more_plans: Mapping[str, Mapping[str, SelectionPlan]] | None = None,
    backend: str = "spyre",
    estimator: DurationEstimate | None = None,
) -> list[Score]:
    """Ours (``plans``: event name -> plan), other plans of ours (``more_plans``: a row each)
    and the three baselines, each scored on ``truth`` over ``universe`` and priced in
    runner-seconds (``history``, else ``estimator``; default: a flat prior) over the applicable
    universe's runner-seconds."""
    history = history or History()
    estimator = estimator or FLAT_RUNNER_PRIOR
    applicable = applicable_ids(universe)
    costs = {tid: cost_of([tid], universe, history, estimator) for tid in universe.by_id}
    full = sum(costs[t] for t in applicable)
    ours = from_plans(plans, costs)
    selectors: dict[str, Selector] = {
        "ours": ours,
        **{name: from_plans(more, costs) for name, more in (more_plans or {}).items()},
        "run-all": run_all(universe, costs, estimator=estimator, backend=backend),
        "random (equal cost)": random_at_cost(
            universe, costs, lambda e: ours(e).seconds, seed=seed
        ),
        "pytorch-td top 25%": pytorch_td(universe, costs, profiling_map=profiling_map),
    }
    return [
        score(name, truth, sel, full_seconds=full, universe_size=len(applicable))
        for name, sel in selectors.items()
    ]


def recall_curve(
    truth: GroundTruth,
    plans: Mapping[str, SelectionPlan],
    universe: Universe,
    *,
    history: History | None = None,
    estimator: DurationEstimate | None = None,
    detail: int = 20,
) -> list[str]:
    """Where each failing variant sits in its event's uncut plan (``plans``: event name ->
    plan): the share of the applicable universe's runner-seconds a budget needs to reach it
    (the budget cuts in rank order); per event the share at which it is first and fully caught,
    and over all events the share at which every one is caught. Variant lines are listed when
    there are at most ``detail`` failing variants."""
    history = history or History()
    estimator = estimator or FLAT_RUNNER_PRIOR
    applicable = applicable_ids(universe)
    costs = {tid: cost_of([tid], universe, history, estimator) for tid in universe.by_id}
    full = sum(costs[t] for t in applicable) or 1.0
    show = sum(len(e.failing) for e in truth.events) <= detail
    lines: list[str] = []
    firsts: list[float | None] = []
    for event in truth.events:
        if not event.failing:
            continue
        reach: dict[str, tuple[int, float]] = {}
        spent = 0.0
        for t in plans[event.name].tests:
            spent += costs.get(t.test_id, t.seconds)
            reach[t.test_id] = (t.rank, spent / full)
        found = []
        for tid in event.failing:
            got = reach.get(tid)
            if got is not None:
                found.append(got[1])
            if show:
                where = "not in the plan" if got is None else f"rank {got[0]}, {100 * got[1]:.1f} %"
                lines.append(f"  {event.name}: {tid}: {where}")
        firsts.append(min(found) if found else None)
        first = f"{100 * min(found):.1f} %" if found else "never"
        every = f"{100 * max(found):.1f} %" if len(found) == len(event.failing) else "never"
        lines.append(f"{event.name}: first caught at {first}, fully at {every}")
    if firsts:
        worst = "never" if None in firsts else f"{100 * max(x or 0.0 for x in firsts):.1f} %"
        lines.append(f"every observable event caught from {worst} of the runner-seconds")
    return lines


def table(scores: Sequence[Score], truth: GroundTruth) -> str:
    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f} %"

    unobservable = sum(1 for e in truth.events if not e.failing)
    full = next((s.runner_seconds / s.cost_ratio for s in scores if s.cost_ratio), 0.0)
    lines = [
        f"ground truth: {truth.kind}, {len(truth.events)} event(s) on {truth.variants} variants "
        f"({unobservable} unobservable, left out of event recall); runs: {truth.method}",
        f"cost: runner-seconds per event over the applicable universe's {full:,.0f} runner-s",
        "| selector | test-level recall | event-level recall | runner-s per event | "
        "runner-s ratio | count ratio | decision latency |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in scores:
        lines.append(
            f"| {s.selector} | {pct(s.test_recall)} ({s.failing_selected}/{s.failing}) | "
            f"{pct(s.event_recall)} ({s.caught}/{s.observable}) | {s.runner_seconds:,.1f} | "
            f"{s.cost_ratio:.3f} | {s.count_ratio:.3f} | {s.latency * 1000:.1f} ms |"
        )
    return "\n".join(lines)


def scores_json(scores: Sequence[Score]) -> str:
    return json.dumps([s.__dict__ for s in scores], indent=2)
