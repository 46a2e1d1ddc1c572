"""The evaluation: metrics and the three baselines on a synthetic ground truth."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from backends.spyre.estimate import SimulatorEstimate
from evaluation.groundtruth import event_facts, mutation_event
from evaluation.scores import (
    GroundTruth,
    GroundTruthEvent,
    evaluate,
    pytorch_td,
    random_at_cost,
    table,
)
from selector.signals import SignalConfig


def _truth(small_upstream: Any) -> GroundTruth:
    u = small_upstream.make_universe()
    add = [v.test_id for v in u.variants if v.op == "add"]
    return GroundTruth(
        kind="mutation",
        universe="generated",
        variants=len(u),
        events=[
            GroundTruthEvent(
                name="add-fault",
                kind="mutation",
                changed_files=["test/test_ops.py"],
                changed_symbols={"test/test_ops.py": ["TestCommon.test_out"]},
                failing=[add[0], add[2]],
            ),  # compare_cpu and test_out
            GroundTruthEvent(name="silent", kind="mutation", changed_files=["docs/index.md"]),
        ],
    )


def test_scores_for_ours_and_the_baselines(small_upstream: Any, select: Any) -> None:
    universe = small_upstream.make_universe()
    truth = _truth(small_upstream)
    plans = {
        e.name: select(event_facts(e), universe, config=SignalConfig(profiling_map=None))
        for e in truth.events
    }
    scores = {s.selector: s for s in evaluate(truth, universe, plans)}
    assert set(scores) == {"ours", "run-all", "random (equal cost)", "pytorch-td top 25%"}
    everything = scores["run-all"]
    assert everything.test_recall == 1.0 and everything.event_recall == 1.0
    assert abs(everything.cost_ratio - 1.0) < 1e-9
    ours = scores["ours"]
    # the edited template selects test_out variants: one of the two failing add variants
    assert ours.observable == 1 and ours.events == 2
    assert ours.failing == 2 and ours.failing_selected == 1
    assert ours.test_recall == 0.5 and ours.event_recall == 1.0
    assert 0 < ours.cost_ratio < 1
    text = table(list(scores.values()), truth)
    assert "1 unobservable" in text and "| ours | 50.0 % (1/2) | 100.0 % (1/1) |" in text


def test_random_baseline_spends_the_same_cost_and_is_repeatable(small_upstream: Any) -> None:
    universe = small_upstream.make_universe()
    est = SimulatorEstimate()
    costs = {v.test_id: est.seconds(v) for v in universe.variants}
    event = _truth(small_upstream).events[0]
    select = random_at_cost(universe, costs, lambda e: 3 * min(costs.values()), seed=1)
    first, second = select(event), select(event)
    assert first.tests == second.tests and len(first.tests) == 3


def test_pytorch_td_picks_the_top_quarter_of_files_by_score(
    tmp_path: Path, small_upstream: Any
) -> None:
    universe = small_upstream.make_universe()
    prior = tmp_path / "p.json"
    prior.write_text('{"torch/x.py": {"test_modules": 1.0}}')
    costs = dict.fromkeys((v.test_id for v in universe.variants), 1.0)
    select = pytorch_td(universe, costs, profiling_map=prior)
    edited = select(GroundTruthEvent(name="e", kind="mutation", changed_files=["test/test_ops.py"]))
    assert edited.tests == {v.test_id for v in universe.by_file["test/test_ops.py"]}
    nothing = select(GroundTruthEvent(name="n", kind="mutation", changed_files=["docs/a.md"]))
    assert nothing.tests == set()


def test_mutation_events_name_the_file_and_function() -> None:
    event = mutation_event("F.relu")
    assert event.changed_files == ["torch/nn/functional.py"]
    assert event.changed_symbols == {"torch/nn/functional.py": ["relu"]}
    facts = event_facts(event)
    assert facts.changed_symbols() == {"torch/nn/functional.py": {"relu"}}


def test_every_selector_is_priced_in_runner_seconds_over_the_applicable_universe(
    small_upstream: Any,
    select: Any,
) -> None:
    from planner.durations import RunnerPrior, RunnerSeconds

    universe = small_upstream.make_universe()
    skipped = universe.variants[:4]
    for v in skipped:
        v.decision = "skip"
    measured = {v.test_id: 1.0 + i for i, v in enumerate(universe.variants)}
    est = RunnerSeconds(universe, measured=measured, prior=RunnerPrior())
    truth = _truth(small_upstream)
    config = SignalConfig(profiling_map=None)
    plans = {
        e.name: select(event_facts(e), universe, config=config, estimator=est) for e in truth.events
    }
    scores = {s.selector: s for s in evaluate(truth, universe, plans, estimator=est)}
    applicable = sum(measured.values()) - sum(measured[v.test_id] for v in skipped)
    everything = scores["run-all"]
    assert everything.runner_seconds == applicable and everything.cost_ratio == 1.0
    assert everything.latency > 0  # the run-all plan is made and timed, not assumed free
    ours = scores["ours"]
    want = sum(sum(measured[t] for t in p.test_ids) for p in plans.values()) / len(plans)
    assert ours.runner_seconds == want and ours.cost_ratio == want / applicable
    # random spends what ours spends, drawn from the variants the specs let run
    rnd = scores["random (equal cost)"]
    assert rnd.runner_seconds >= ours.runner_seconds
    skipped_ids = {v.test_id for v in skipped}
    draws = random_at_cost(universe, measured, lambda e: 1e9, seed=3)(truth.events[0])
    assert draws.tests and not draws.tests & skipped_ids
    text = table(list(scores.values()), truth)
    assert f"applicable universe's {applicable:,.0f} runner-s" in text
