"""Events of a release step per OpInfo / ModuleInfo entry, and what each selector catches.

An *event* is one entry (the op or module a variant tests, from its ``op`` / ``module`` field in
the inventory; a variant with neither is its own test template, ``test:<file>::<Class.test_x>``)
whose variants changed outcome between the base and the head release, one event per kind:

* ``regression``: variants in both runs that do not fail at base and fail at head;
* ``fix``: variants that fail at base and do not fail at head;
* ``new-failing``: variants only the head has that fail there.

A variant whose two runs of the same torch disagree is *flaky* (:func:`evaluation.storedruns.flaky`)
and is no part of any event; the flaky variants are counted per torch. An event is *caught* by a
selection when it selects any of the event's variants.

Selectors are scored per step the way :func:`evaluation.scores.evaluate` prices them (runner-
seconds over the applicable universe's), with its baselines: run-all, random at equal cost (here
the mean of :data:`RANDOM_DRAWS` seeded draws over the applicable variants) and PyTorch's TD rule.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evaluation.scores import (
    GroundTruthEvent,
    Selection,
    applicable_ids,
    cost_of,
    pytorch_td,
    random_at_cost,
    run_all,
)
from evaluation.storedruns import flaky
from selector import DurationEstimate, History, SelectionPlan, Universe, Variant
from selector.model import generic_test_name
from testspecs.outcomes import FAILURES

KINDS = ("regression", "fix", "new-failing")
#: the kinds a maintainer must be told of before taking the upgrade (a fix is good news)
GATING_KINDS = ("regression", "new-failing")
RANDOM_DRAWS = 20
RANDOM = f"random (equal cost, mean of {RANDOM_DRAWS})"


@dataclass(frozen=True)
class EntryEvent:
    entry: str  # op:<name> | module:<name> | test:<file>::<Class.test_x>
    kind: str  # one of KINDS
    variants: tuple[str, ...]  # the entry's variants that changed that way


@dataclass
class StepEvents:
    step: str
    events: list[EntryEvent]
    flaky: dict[str, int]  # torch -> flaky variants (its two runs disagree); absent: one run
    excluded: int  # variants left out of every event because a torch's runs disagree on them
    other_changes: int  # outcome changes that are neither (e.g. passed -> skipped)

    def count(self, kind: str) -> int:
        return sum(1 for e in self.events if e.kind == kind)


def entry_of(v: Variant | None, test_id: str) -> str:
    """The OpInfo / ModuleInfo entry a variant tests, else its test template."""
    if v is not None and v.op:
        return f"op:{v.op}"
    if v is not None and v.module:
        return f"module:{v.module}"
    if v is not None:
        return f"test:{v.file}::{generic_test_name(v)}"
    return f"test:{test_id}"


def step_events(
    step: str,
    base_runs: Mapping[str, Sequence[Mapping[str, str]]],
    head_runs: Mapping[str, Sequence[Mapping[str, str]]],
    *,
    base: Universe,
    head: Universe,
) -> StepEvents:
    """The step's events from the runs of each torch (``{torch: [run 1, run 2?]}``, one torch
    each side): run 1 of each side decides, a second run of a torch marks its flaky variants."""
    (base_torch, before_runs), (head_torch, after_runs) = _one(base_runs), _one(head_runs)
    counts: dict[str, int] = {}
    excluded: set[str] = set()
    for torch, runs in ((base_torch, before_runs), (head_torch, after_runs)):
        if len(runs) > 1:
            unstable = set().union(*(flaky(runs[0], other) for other in runs[1:]))
            counts[torch] = len(unstable)
            excluded |= unstable
    before, after = before_runs[0], after_runs[0]
    changed: dict[tuple[str, str], list[str]] = defaultdict(list)
    other = 0
    for tid in sorted((before.keys() | after.keys()) - excluded):
        was, now = before.get(tid), after.get(tid)
        if now is None or was == now:
            continue
        if was is None:
            kind = "new-failing" if now in FAILURES else ""
        elif was not in FAILURES and now in FAILURES:
            kind = "regression"
        elif was in FAILURES and now not in FAILURES:
            kind = "fix"
        else:
            kind, other = "", other + 1
        if kind:
            v = head.by_id.get(tid) or base.by_id.get(tid)
            changed[(entry_of(v, tid), kind)].append(tid)
    events = [
        EntryEvent(entry=entry, kind=kind, variants=tuple(ids))
        for (entry, kind), ids in sorted(
            changed.items(), key=lambda x: (KINDS.index(x[0][1]), x[0][0])
        )
    ]
    return StepEvents(
        step=step, events=events, flaky=counts, excluded=len(excluded), other_changes=other
    )


def _one(
    runs: Mapping[str, Sequence[Mapping[str, str]]],
) -> tuple[str, Sequence[Mapping[str, str]]]:
    if len(runs) != 1 or not next(iter(runs.values())):
        raise ValueError("each side of a step is one torch with at least one run")
    return next(iter(runs.items()))


# -- scoring ---------------------------------------------------------------------------


@dataclass
class StepRow:
    selector: str
    caught: dict[str, float]  # kind -> events caught (a mean over the draws for random)
    share: float  # selected runner-seconds / the applicable universe's
    draws: int = 1


@dataclass
class StepScores:
    events: StepEvents
    rows: list[StepRow]
    full_seconds: float
    per_event: dict[str, list[str]] = field(default_factory=dict)  # selector -> caught entries


def caught_by(events: Iterable[EntryEvent], tests: set[str]) -> list[EntryEvent]:
    return [e for e in events if any(t in tests for t in e.variants)]


def score_step(
    events: StepEvents, selections: Mapping[str, Sequence[Selection]], full_seconds: float
) -> StepScores:
    """Each selector's events caught by kind and its runner-seconds share (a selector with
    several selections, the random draws, scores their mean)."""
    rows: list[StepRow] = []
    per_event: dict[str, list[str]] = {}
    for name, draws in selections.items():
        totals = dict.fromkeys(KINDS, 0.0)
        for sel in draws:
            for e in caught_by(events.events, sel.tests):
                totals[e.kind] += 1
        n = max(len(draws), 1)
        seconds = sum(s.seconds for s in draws) / n
        rows.append(
            StepRow(
                selector=name,
                caught={k: v / n for k, v in totals.items()},
                share=seconds / full_seconds if full_seconds else 0.0,
                draws=len(draws),
            )
        )
        if len(draws) == 1:
            per_event[name] = [
                f"{e.entry} ({e.kind})" for e in caught_by(events.events, draws[0].tests)
            ]
    return StepScores(events=events, rows=rows, full_seconds=full_seconds, per_event=per_event)


def unit_costs(
    universe: Universe, *, history: History, estimator: DurationEstimate
) -> tuple[dict[str, float], float]:
    """Each variant's runner-seconds and the applicable universe's, priced as
    :func:`evaluation.scores.evaluate` prices them."""
    costs = {tid: cost_of([tid], universe, history, estimator) for tid in universe.by_id}
    return costs, sum(costs[t] for t in applicable_ids(universe))


def step_selections(
    step: str,
    universe: Universe,
    costs: Mapping[str, float],
    *,
    ours: Mapping[str, SelectionPlan],
    changed_files: Sequence[str],
    profiling_map: Path | None,
    estimator: DurationEstimate,
) -> dict[str, list[Selection]]:
    """Our plans (a row each) beside the baselines of :mod:`evaluation.scores`, each made once
    for the whole step: run-all, random at the cost of the first plan (``RANDOM_DRAWS`` seeds)
    and PyTorch's TD rule over the step's changed files."""
    event = GroundTruthEvent(name=step, kind="release", changed_files=list(changed_files))
    out: dict[str, list[Selection]] = {}
    for name, plan in ours.items():
        tests = set(plan.test_ids)
        out[name] = [Selection(tests, sum(costs.get(t, 0.0) for t in tests), plan.decision_seconds)]
    first = next(iter(out.values()))[0].seconds if out else 0.0
    out["run-all"] = [run_all(universe, costs, estimator=estimator)(event)]
    out[RANDOM] = [
        random_at_cost(universe, costs, lambda _: first, seed=seed)(event)
        for seed in range(RANDOM_DRAWS)
    ]
    out["pytorch-td top 25%"] = [pytorch_td(universe, costs, profiling_map=profiling_map)(event)]
    return out


def cut_at(plan: SelectionPlan, share: float) -> set[str]:
    """The tests an uncut plan keeps at a budget of ``share`` of its applicable universe's
    estimated runner-seconds: its ranking cut in rank order as the budget stage cuts it (the
    first test past the budget ends the selection)."""
    budget = share * plan.full_runner_seconds
    kept: set[str] = set()
    total = 0.0
    for t in sorted(plan.tests, key=lambda t: t.rank):
        if total + t.seconds > budget:
            break
        kept.add(t.test_id)
        total += t.seconds
    return kept


#: the goal of a release step: every regression event caught within this share of the
#: runner-seconds (README, docs/selection.md)
GOAL_SHARE = 0.15


def entry_curve(events: StepEvents, uncut: SelectionPlan) -> str:
    """Along the uncut ranking, the share of its applicable universe's estimated runner-seconds
    (as :func:`cut_at` counts them) at which each event's first changed variant is reached, per
    kind: the share that catches every one, and the latest entries; then the goal's verdict."""
    reached: dict[str, float] = {}
    spent = 0.0
    full = uncut.full_runner_seconds or 1.0
    for t in sorted(uncut.tests, key=lambda t: t.rank):
        spent += t.seconds
        reached[t.test_id] = spent / full
    at: dict[str, list[tuple[float | None, str]]] = {k: [] for k in KINDS}
    for e in events.events:
        shares = [reached[v] for v in e.variants if v in reached]
        at[e.kind].append((min(shares) if shares else None, e.entry))
    parts = []
    for kind in KINDS:
        got = sorted(at[kind], key=lambda x: -1.0 if x[0] is None else -x[0])
        if not got:
            parts.append(f"{kind}: none")
            continue
        last = ", ".join(f"{entry} {_pct(share)}" for share, entry in got[:3])
        parts.append(f"{kind}: all {len(got)} by {_pct(got[0][0])} (latest: {last})")
    late = [(x, entry) for x, entry in at["regression"] if x is None or x > GOAL_SHARE]
    goal = (
        "met" if not late else "missed: " + ", ".join(f"{entry} at {_pct(x)}" for x, entry in late)
    )
    return (
        f"entries along the uncut ranking (share of the estimated runner-s at which an entry's "
        f"first changed variant is reached): {'; '.join(parts)}\n"
        f"goal (every regression event by {100 * GOAL_SHARE:.0f} %): {goal}"
    )


def _pct(share: float | None) -> str:
    return "never" if share is None else f"{100 * share:.1f} %"


def selection_of(tests: set[str], costs: Mapping[str, float]) -> Selection:
    start = time.perf_counter()
    seconds = sum(costs.get(t, 0.0) for t in tests)
    return Selection(tests, seconds, time.perf_counter() - start)


def step_table(scores: StepScores) -> str:
    """The per-event table of one step (Markdown) and what it rests on."""
    ev = scores.events
    flaky = ", ".join(f"{t}: {n}" for t, n in sorted(ev.flaky.items())) or "not measured"
    lines = [
        f"events of {ev.step} per OpInfo/ModuleInfo entry: "
        + ", ".join(f"{ev.count(k)} {k}" for k in KINDS)
        + f"; flaky variants (two runs of a torch disagree): {flaky}; {ev.excluded} variants "
        f"left out as flaky; {ev.other_changes} other outcome changes (neither failing side)",
        f"cost: runner-seconds share of the applicable universe's {scores.full_seconds:,.0f} runner-s",
        "| selector | " + " | ".join(f"{k} caught" for k in KINDS) + " | runner-s share |",
        "|---|" + "---|" * (len(KINDS) + 1),
    ]
    for row in scores.rows:
        cells = []
        for k in KINDS:
            got = row.caught[k]
            text = f"{got:.0f}" if row.draws == 1 else f"{got:.2f}"
            cells.append(f"{text}/{ev.count(k)}")
        lines.append(f"| {row.selector} | " + " | ".join(cells) + f" | {100 * row.share:.1f} % |")
    return "\n".join(lines)
