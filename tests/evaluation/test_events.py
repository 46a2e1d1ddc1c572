"""Events of a release step per OpInfo / ModuleInfo entry: kinds kept apart, flaky variants left
out, caught by any changed variant, and the baselines scored on the same events."""

from __future__ import annotations

from typing import Any

import pytest

from evaluation.events import (
    RANDOM,
    RANDOM_DRAWS,
    cut_at,
    entry_of,
    score_step,
    step_events,
    step_selections,
    step_table,
    unit_costs,
)
from evaluation.groundtruth import event_facts
from evaluation.scores import FLAT_RUNNER_PRIOR, GroundTruthEvent, Selection, applicable_ids
from selector import History, Universe, Variant
from selector.signals import SignalConfig

FILE = "spyre_stack/conformance/test_ops.py"
CLS = "TestCommonPRIVATEUSE1"


def _v(name: str, *, op: str | None = None, module: str | None = None) -> Variant:
    base = name.split("_spyre")[0].removesuffix(f"_{op or module}")
    return Variant(
        test_id=f"{FILE}::{CLS}::{name}",
        file=FILE,
        cls=CLS,
        name=name,
        base=base,
        suite="ops",
        op=op,
        module=module,
    )


BASE = [
    _v("test_compare_cpu_add_spyre_float32", op="add"),
    _v("test_compare_cpu_add_spyre_float16", op="add"),
    _v("test_compare_cpu_mul_spyre_float32", op="mul"),
    _v("test_compare_cpu_mul_spyre_float16", op="mul"),
    _v("test_module_nn_Linear_spyre_float32", module="nn.Linear"),
    _v("test_plain_spyre"),
    _v("test_compare_cpu_div_spyre_float32", op="div"),
]
NEW = _v("test_compare_cpu_polar_spyre_float32", op="polar")


def _id(v: Variant) -> str:
    return v.test_id


def _universes() -> tuple[Universe, Universe]:
    return (
        Universe(variants=list(BASE), label="base", key="b"),
        Universe(variants=[*BASE, NEW], label="head", key="h"),
    )


def _runs() -> tuple[dict[str, str], dict[str, str]]:
    before = dict.fromkeys(map(_id, BASE), "passed")
    before[_id(BASE[2])] = "failed"  # mul float32 fails at base ...
    after = {**before, _id(NEW): "failed"}
    after[_id(BASE[0])] = "failed"  # add float32 regresses
    after[_id(BASE[1])] = "error"  # add float16 regresses too: one event
    after[_id(BASE[2])] = "passed"  # ... and is fixed at head
    after[_id(BASE[4])] = "failed"  # nn.Linear regresses
    after[_id(BASE[5])] = "skipped"  # neither side fails: not an event
    return before, after


def test_events_are_entries_kept_apart_by_kind() -> None:
    base, head = _universes()
    before, after = _runs()
    step = step_events(
        "2.13 -> 2.14", {"2.13.0": [before]}, {"2.14.1": [after]}, base=base, head=head
    )
    got = [(e.entry, e.kind, len(e.variants)) for e in step.events]
    assert got == [
        ("module:nn.Linear", "regression", 1),
        ("op:add", "regression", 2),
        ("op:mul", "fix", 1),
        ("op:polar", "new-failing", 1),
    ]
    assert (step.count("regression"), step.count("fix"), step.count("new-failing")) == (2, 1, 1)
    assert step.other_changes == 1 and step.flaky == {} and step.excluded == 0
    assert entry_of(BASE[5], _id(BASE[5])) == f"test:{FILE}::TestCommon.test_plain"
    assert entry_of(None, "x.py::t") == "test:x.py::t"


def test_a_variant_two_runs_of_a_torch_disagree_on_is_flaky_and_no_event() -> None:
    base, head = _universes()
    before, after = _runs()
    again = {**after, _id(BASE[0]): "passed", _id(BASE[4]): "passed"}  # head's run 2
    base_again = {**before, _id(BASE[6]): "failed"}  # base's run 2: div flaky there
    step = step_events(
        "s", {"2.13.0": [before, base_again]}, {"2.14.1": [after, again]}, base=base, head=head
    )
    assert step.flaky == {"2.13.0": 1, "2.14.1": 2} and step.excluded == 3
    got = {(e.entry, e.kind): e.variants for e in step.events}
    # add float32 and nn.Linear are flaky at head: add keeps float16, nn.Linear is gone
    assert got[("op:add", "regression")] == (_id(BASE[1]),)
    assert ("module:nn.Linear", "regression") not in got
    with pytest.raises(ValueError, match="one torch"):
        step_events("s", {}, {"2.14.1": [after]}, base=base, head=head)


def test_an_event_is_caught_by_any_changed_variant_and_random_is_a_mean() -> None:
    base, head = _universes()
    before, after = _runs()
    step = step_events("s", {"a": [before]}, {"b": [after]}, base=base, head=head)
    ours = Selection({_id(BASE[1]), _id(NEW)}, 2.0, 0.0)  # one of add's two; polar
    draws = [Selection({_id(BASE[4])}, 1.0, 0.0), Selection(set(), 0.0, 0.0)]
    scores = score_step(step, {"ours": [ours], "random": draws}, full_seconds=8.0)
    mine, rnd = scores.rows
    assert mine.caught == {"regression": 1, "fix": 0, "new-failing": 1}
    assert mine.share == 0.25
    assert rnd.caught == {"regression": 0.5, "fix": 0.0, "new-failing": 0.0}
    assert rnd.share == pytest.approx(0.5 / 8.0) and rnd.draws == 2
    assert scores.per_event["ours"] == ["op:add (regression)", "op:polar (new-failing)"]
    text = step_table(scores)
    assert "| ours | 1/2 | 0/1 | 1/1 | 25.0 % |" in text
    assert "| random | 0.50/2 | 0.00/1 | 0.00/1 | 6.2 % |" in text
    assert "flaky variants (two runs of a torch disagree): not measured" in text


def test_the_baselines_are_the_release_evals_own_and_ours_cuts_in_rank_order(
    small_upstream: Any, select: Any
) -> None:
    universe = small_upstream.make_universe()
    event = GroundTruthEvent(
        name="s",
        kind="release",
        changed_files=["test/test_ops.py"],
        changed_symbols={"test/test_ops.py": ["TestCommon.test_out"]},
    )
    plan = select(event_facts(event), universe, config=SignalConfig(profiling_map=None))
    assert plan.tests
    costs, full = unit_costs(universe, history=History(), estimator=FLAT_RUNNER_PRIOR)
    sels = step_selections(
        "s",
        universe,
        costs,
        ours={"ours": plan},
        changed_files=["test/test_ops.py"],
        profiling_map=None,
        estimator=FLAT_RUNNER_PRIOR,
    )
    assert list(sels) == ["ours", "run-all", RANDOM, "pytorch-td top 25%"]
    assert sels["ours"][0].tests == set(plan.test_ids)
    assert sels["run-all"][0].seconds == pytest.approx(full)
    draws = sels[RANDOM]
    assert len(draws) == RANDOM_DRAWS and len({frozenset(d.tests) for d in draws}) > 1
    runnable = set(applicable_ids(universe))
    for draw in draws:  # at ours' cost, over runnable variants only
        assert draw.tests <= runnable
        assert draw.seconds == pytest.approx(sels["ours"][0].seconds, abs=max(costs.values()))
    # the uncut ranking at a share keeps a prefix in rank order within that share
    ranked = [t.test_id for t in sorted(plan.tests, key=lambda t: t.rank)]
    half = cut_at(plan, 0.5 * plan.estimated_runner_seconds / plan.full_runner_seconds)
    assert half == set(ranked[: len(half)]) and 0 < len(half) < len(ranked)
    assert cut_at(plan, 1.0) == set(ranked) and cut_at(plan, 0.0) == set()
