"""Leave-one-step-out: each step scored at the share chosen on the other steps; the default is
the one chosen on all of them."""

from __future__ import annotations

import pytest

from evaluation.events import EntryEvent, StepEvents
from evaluation.loso import (
    SettingResult,
    choose,
    leave_one_step_out,
    loso_table,
    setting_results,
)


def _result(
    setting: float, caught: int, events: int = 2, new: tuple[int, int] = (0, 0)
) -> SettingResult:
    return SettingResult(
        setting=setting,
        events={"regression": events, "fix": 0, "new-failing": new[1]},
        caught={"regression": caught, "fix": 0, "new-failing": new[0]},
        share=setting * 1.1,
    )


def _step(first_full: float, events: int = 2) -> dict[float, SettingResult]:
    """A step whose regressions are all caught from ``first_full`` on, half before."""
    return {
        s: _result(s, events if s >= first_full else events // 2, events)
        for s in (0.05, 0.10, 0.15, 0.20)
    }


def test_each_step_gets_the_share_chosen_on_the_others() -> None:
    steps = {"a": _step(0.05), "b": _step(0.10), "c": _step(0.20)}
    loso = leave_one_step_out(steps)
    chosen = {row.step: row.setting for row in loso.rows}
    # a: chosen on b and c -> 0.20; b: on a and c -> 0.20; c: on a and b -> 0.10 (misses c's)
    assert chosen == {"a": 0.20, "b": 0.20, "c": 0.10}
    c_row = next(r for r in loso.rows if r.step == "c")
    assert c_row.result is not None and c_row.result.missed == 1
    assert loso.default == 0.20
    text = loso_table(loso, shipped=0.12)
    assert "| c | 10 % | 1/2 | 0/0 | 0/0 | 11.0 % |" in text
    assert (
        "default chosen on all 3 step(s): 20 %; shipped: 12 % (the shipped default is not" in text
    )


def test_the_objective_counts_new_failing_events_and_breaks_ties_by_cost() -> None:
    steps = {
        "a": {0.1: _result(0.1, 2, new=(0, 1)), 0.3: _result(0.3, 2, new=(1, 1))},
        "b": {0.1: _result(0.1, 2), 0.3: _result(0.3, 2)},
    }
    assert choose(steps, ["a", "b"]) == 0.3  # only 0.3 catches a's new failing variant
    assert choose(steps, ["b"]) == 0.1  # both catch everything: the cheaper
    nothing = {"a": {0.1: _result(0.1, 0)}, "b": {0.1: _result(0.1, 1)}}
    assert choose(nothing, ["a", "b"]) == 0.1  # none catches all: the fewest missed
    assert choose(steps, []) is None
    assert choose({"a": {0.1: _result(0.1, 2)}, "b": {0.2: _result(0.2, 2)}}, ["a", "b"]) is None
    alone = leave_one_step_out({"a": _step(0.1)})
    assert alone.rows[0].setting is None and alone.default == 0.10
    assert "| a | no other step scored |" in loso_table(alone, shipped=0.10)


def test_step_results_at_each_setting_count_the_events_caught_and_the_share() -> None:
    events = StepEvents(
        step="2.13.0 -> 2.14.1",
        events=[
            EntryEvent("op:add", "regression", ("a1", "a2")),
            EntryEvent("op:polar", "new-failing", ("p1",)),
            EntryEvent("op:mul", "fix", ("m1",)),
        ],
        flaky={},
        excluded=0,
        other_changes=0,
    )
    costs = {"a1": 1.0, "a2": 1.0, "p1": 2.0, "m1": 1.0, "x": 5.0}
    kept = {0.1: {"a2"}, 0.5: {"a2", "p1", "x"}}
    results = setting_results(events, kept, costs, full_seconds=10.0)
    assert results[0.1].caught == {"regression": 1, "fix": 0, "new-failing": 0}
    assert results[0.5].caught == {"regression": 1, "fix": 0, "new-failing": 1}
    assert results[0.5].share == pytest.approx(0.8) and results[0.1].missed == 1
