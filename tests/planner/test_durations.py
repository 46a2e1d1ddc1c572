"""Runner-seconds: where each variant's number comes from, the budget cut in them, the plan's
cost and the finish time of the runner's split on its workers, and the budget of a change that
cannot be analysed."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from backends.base import RunnerConfig
from planner import RunPlan, ShardPolicy, cut_shards
from planner.durations import (
    CI_FILE,
    FLAT,
    MEASURED,
    PRIOR_PATH,
    SHIPPED_TEMPLATE,
    TEMPLATE,
    RunnerPrior,
    RunnerSeconds,
    derive_prior,
    estimator_for,
    ground_truth_durations,
    history_for,
    template_key,
)
from planner.revisions import plan_revisions
from selector import History, Universe

#: a small test-times.json in PyTorch's format (the real one is the user's to download)
TEST_TIMES = Path(__file__).resolve().parents[1] / "data" / "pytorch-ci-stats" / "test-times.json"


def _by_template(universe: Any) -> dict[str, list[Any]]:
    groups: dict[str, list[Any]] = {}
    for v in universe.variants:
        groups.setdefault(template_key(v), []).append(v)
    return groups


def test_each_variant_names_where_its_runner_seconds_come_from(small_upstream: Any) -> None:
    base = small_upstream.make_universe()
    bundled = replace(
        base.variants[0],
        test_id="spyre_stack/conformance/x.py::T::test_y",
        file="spyre_stack/conformance/x.py",
        base="test_y",
    )
    universe = Universe(variants=[*base.variants, bundled], label="u")
    groups = _by_template(universe)
    compare = groups["test/test_ops.py::test_compare_cpu"]
    modules = groups["test/test_modules.py::test_module_forward"]
    out = groups["test/test_ops.py::test_out"]
    measured = {compare[0].test_id: 2.0, compare[1].test_id: 4.0}
    prior = RunnerPrior(
        per_test=0.3,
        templates={"test/test_modules.py::test_module_forward": 0.7},
        ci_files={"test_ops": 90.0},
    )
    est = RunnerSeconds(universe, measured=measured, prior=prior)
    assert (est.seconds(compare[0]), est.source_of(compare[0])) == (2.0, MEASURED)
    # same file and template, never measured: the median of the measured ones
    assert (est.seconds(compare[2]), est.source_of(compare[2])) == (3.0, TEMPLATE)
    assert (est.seconds(modules[0]), est.source_of(modules[0])) == (0.7, SHIPPED_TEMPLATE)
    in_ops = [v for v in universe.variants if v.file == "test/test_ops.py"]
    assert est.source_of(out[0]) == CI_FILE
    assert est.seconds(out[0]) == pytest.approx(90.0 / len(in_ops))
    assert (est.seconds(bundled), est.source_of(bundled)) == (0.3, FLAT)


def test_the_budget_cuts_in_runner_seconds_with_device_time_beside(
    small_upstream: Any, plan_everything: Any
) -> None:
    universe = small_upstream.make_universe()
    measured = {v.test_id: 1.0 + (i % 3) for i, v in enumerate(universe.variants)}
    est = RunnerSeconds(universe, measured=measured, prior=RunnerPrior())
    full = sum(measured.values())
    plan = plan_everything(
        universe, reason="test", base="a", head="b", budget_seconds=full / 2, estimator=est
    )
    assert plan.full_runner_seconds == pytest.approx(full)
    assert plan.estimated_runner_seconds <= full / 2
    assert plan.estimated_runner_seconds == pytest.approx(sum(t.seconds for t in plan.tests))
    assert plan.cut and all("runner-seconds used by higher-ranked" in c.reason for c in plan.cut)
    assert plan.duration_sources == {MEASURED: len(plan.tests)}
    # the runner's split of it on three shard workers: its seconds are the plan's tests'
    run = cut_shards(
        RunPlan.for_selection(plan, {}, runner=RunnerConfig(rootdir=".")),
        ShardPolicy(target_seconds=full / 12, parallel=3),
    )
    assert run.workers == 3 and run.shard_seconds is not None
    assert sum(run.shard_seconds) == pytest.approx(plan.estimated_runner_seconds)
    finish = run.estimated_finish_seconds()
    assert finish is not None and max(run.shard_seconds) <= finish < sum(run.shard_seconds)
    assert finish >= plan.estimated_runner_seconds / 3
    # the simulator's device time is summed beside, never used as the budget
    assert 0 < plan.estimated_device_seconds < plan.full_device_seconds
    assert plan.estimated_device_seconds != pytest.approx(plan.estimated_runner_seconds)
    assert "runner-minutes" in plan.summary()


def test_a_change_that_cannot_be_read_is_cut_to_the_default_budget(
    small_upstream: Any, tmp_path: Path
) -> None:
    universe = small_upstream.make_universe()
    plan = plan_revisions(
        base="0" * 40,
        head="1" * 40,
        universe=universe,
        backend="cpu",
        facts_cache=tmp_path,
        offline=True,
        unanalysed_budget_seconds=2.0,
    )
    assert plan.fallback and plan.errors
    assert plan.budget_seconds == 2.0
    assert "cannot analyse" in plan.budget_reason
    assert plan.cut and plan.estimated_runner_seconds <= 2.0
    assert len(plan.tests) + len(plan.cut) == len(universe)
    given = plan_revisions(
        base="0" * 40,
        head="1" * 40,
        universe=universe,
        backend="cpu",
        facts_cache=tmp_path,
        offline=True,
        unanalysed_budget_seconds=2.0,
        budget_seconds=1e9,
    )
    assert (given.budget_reason, given.cut) == ("given", [])


def test_history_from_stored_stats_and_ground_truth_runs(
    tmp_path: Path, small_upstream: Any
) -> None:
    universe = small_upstream.make_universe()
    a, b = universe.variants[0].test_id, universe.variants[1].test_id
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "k1-baseline.durations.json").write_text(json.dumps({a: 1.0, b: 3.0}))
    (runs / "k2-baseline.durations.json").write_text(json.dumps({a: 2.0}))
    (runs / "k1-some_mutant.durations.json").write_text(json.dumps({a: 99.0}))
    assert ground_truth_durations(runs) == {a: 1.5, b: 3.0}
    row = {"test_id": b, "runs": 4, "failures": 1, "flips": 2, "mean_duration_s": 0.5}
    history = history_for([{**row, "mean_device_time_us": 2500.0}])
    h = history.get(b)
    assert h is not None and (h.seconds, h.runs, h.failures, h.flaky, h.device_seconds) == (
        0.5,
        4,
        1,
        True,
        0.0025,
    )
    est = estimator_for(universe, history=history, runs=runs, prior=RunnerPrior())
    assert est.seconds(universe.by_id[a]) == 1.5  # ground truth
    assert est.seconds(universe.by_id[b]) == 0.5  # our stored results win
    assert (
        History.from_mapping({a: {"seconds": 1, "device_seconds": 0.1}}).get(a).device_seconds
        == 0.1
    )  # type: ignore[union-attr]


def test_the_shipped_prior_holds_only_our_numbers(tmp_path: Path) -> None:
    shipped = json.loads(PRIOR_PATH.read_text(encoding="utf-8"))
    assert shipped["ci_files"] == {}  # PyTorch's CI statistics are read, never shipped
    prior = RunnerPrior.load(test_times=None)
    assert prior.per_test > 0 and prior.ci_files == {}
    assert RunnerPrior.load(test_times=tmp_path / "absent.json").ci_files == {}


def test_pytorch_ci_file_times_are_read_when_at_hand() -> None:
    prior = RunnerPrior.load(test_times=TEST_TIMES)
    # job "default", config "default"; rounded to 0.1 s; a file of 0 s has no prior
    assert (
        prior.ci_files
        == derive_prior(test_times=TEST_TIMES)["ci_files"]
        == {
            "nn/test_convolution": 317.2,
            "test_binary_ufuncs": 399.8,
            "test_nn": 543.9,
            "test_ops": 4160.9,
        }
    )
    assert prior.ci_files["test_ops"] > prior.ci_files["test_binary_ufuncs"] > 0
    # another job and config are read when named; an unknown one falls back to "default"
    job = derive_prior(test_times=TEST_TIMES, job="linux-jammy-py3.10-gcc11")["ci_files"]
    assert job == {"test_nn": 510.0, "test_ops": 3900.0}
    assert derive_prior(test_times=TEST_TIMES, config="slow")["ci_files"] == {"test_ops": 120.5}
    assert derive_prior(test_times=TEST_TIMES, job="nope", config="nope")["ci_files"] == (
        prior.ci_files
    )


def test_a_budget_share_cuts_broad_choices_in_rank_order_and_lists_them(
    small_upstream: Any,
    plan_everything: Any,
) -> None:
    universe = small_upstream.make_universe()
    measured = {v.test_id: 1.0 for v in universe.variants}
    est = RunnerSeconds(universe, measured=measured, prior=RunnerPrior())
    failing = universe.variants[7].test_id  # failed in one of two runs: unsettled, ranks first
    settled = universe.variants[0].test_id  # failed in both: cannot regress, ranks last
    history = History.from_mapping(
        {
            failing: {"seconds": 1.0, "runs": 2, "failures": 1},
            settled: {"seconds": 1.0, "runs": 2, "failures": 2},
        }
    )
    plan = plan_everything(
        universe,
        reason="nothing mapped",
        base="a",
        head="b",
        estimator=est,
        history=history,
        budget_share=0.25,
    )
    assert plan.budget_seconds == 0.25 * len(universe)
    assert "25 % of the applicable universe's" in plan.budget_reason
    assert plan.tests[0].test_id == failing and "failed 1/2" in plan.tests[0].reasons[-1]
    last = plan.cut[-1]
    assert last.test_id == settled and last.rank == len(universe)
    assert last.risk < min(c.risk for c in plan.cut[:-1])
    assert plan.estimated_runner_seconds <= plan.budget_seconds < plan.full_runner_seconds
    assert len(plan.tests) + len(plan.cut) == len(universe)
    assert all("chosen by fallback (broad signals only)" in c.reason for c in plan.cut)
    assert [c.rank for c in plan.cut] == sorted(c.rank for c in plan.cut)


def test_base_run_history_reads_only_the_base_universes_run(
    tmp_path: Path, small_upstream: Any
) -> None:
    from inventory.runs import run_key
    from planner.durations import base_run_history

    universe = small_upstream.make_universe()
    a, b = universe.variants[0].test_id, universe.variants[1].test_id
    key = run_key(universe)
    (tmp_path / f"{key}-baseline.json").write_text(json.dumps({a: "failed", b: "passed"}))
    (tmp_path / f"{key}-baseline.durations.json").write_text(json.dumps({a: 0.5, b: 0.25}))
    (tmp_path / "otherkey-baseline.json").write_text(json.dumps({b: "failed"}))  # another torch
    history = base_run_history(universe, tmp_path)
    ha, hb = history.get(a), history.get(b)
    assert ha is not None and (ha.failures, ha.runs, ha.seconds) == (1, 1, 0.5)
    assert hb is not None and (hb.failures, hb.seconds) == (0, 0.25)
    assert base_run_history(universe, tmp_path / "none").tests == {}
