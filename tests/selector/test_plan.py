"""SelectionPlan: JSON with a stable schema, deterministic decisions, and plan_revisions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from planner import plan_revisions, source_reader
from selector import SCHEMA_VERSION, SelectionPlan
from selector.signals import SignalConfig
from upstream import GitCheckout
from upstream.changes import compute_change_facts


def _plan(tmp_path: Path, small_upstream: Any, *, select: Any, **kw):  # type: ignore[no-untyped-def]
    repo = small_upstream.UpstreamRepo.create(tmp_path)
    repo.commit(
        {
            "torch/testing/_internal/common_methods_invocations.py": small_upstream.OPINFO_DB.replace(
                "return [3]", "return [3, 4]"
            )
        }
    )
    source = GitCheckout(repo.path)
    facts = compute_change_facts(source, source.resolve("base"), source.resolve("HEAD"))
    return repo, select(
        facts,
        small_upstream.make_universe(),
        reader=source_reader(source, facts),
        config=SignalConfig(profiling_map=None),
        **kw,
    )


def test_plan_round_trips_through_json_with_its_schema_version(
    tmp_path: Path, small_upstream: Any, select: Any
) -> None:
    _, plan = _plan(tmp_path, small_upstream, select=select)
    path = plan.write(tmp_path / "plan.json")
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert {
        "tests",
        "funnel",
        "fallback",
        "fallbacks",
        "estimated_device_seconds",
        "cut",
        "removed",
        "universe",
    } <= data.keys()
    back = SelectionPlan.model_validate_json(path.read_text())
    assert back == plan
    # the selector ranks and cuts; the runner's split is the job's (planner.sharding)
    assert not {"shards", "shard_seconds", "workers", "estimated_finish_seconds"} & data.keys()
    assert [t.rank for t in back.tests] == list(range(1, len(back.tests) + 1))
    assert all(t["reasons"] for t in data["tests"])
    assert back.summary().startswith(
        f"{len(plan.tests)} of {len(small_upstream.make_universe())} variants"
    )


def test_plan_is_deterministic(tmp_path: Path, small_upstream: Any, select: Any) -> None:
    repo, first = _plan(tmp_path, small_upstream, select=select)
    source = GitCheckout(repo.path)
    facts = compute_change_facts(source, source.resolve("base"), source.resolve("HEAD"))
    second = select(
        facts,
        small_upstream.make_universe(),
        reader=source_reader(source, facts),
        config=SignalConfig(profiling_map=None),
    )
    assert first.fingerprint() == second.fingerprint()
    assert first.tests == second.tests


def test_plan_revisions_on_a_checkout(tmp_path: Path, small_upstream: Any, select: Any) -> None:
    repo, _ = _plan(tmp_path, small_upstream, select=select)
    plan = plan_revisions(
        base="base",
        head="HEAD",
        upstream=repo.path,
        universe=small_upstream.make_universe(),
        config=SignalConfig(profiling_map=None),
    )
    assert not plan.fallback
    assert plan.source_kind == "git"
    assert {t.test_id.split("::")[-1].split("_spyre")[0] for t in plan.tests} == {
        "test_compare_cpu_mul",
        "test_out_mul",
    }


def test_plan_revisions_that_cannot_be_read_runs_everything_and_says_why(
    tmp_path: Path, small_upstream: Any, select: Any
) -> None:
    repo, _ = _plan(tmp_path, small_upstream, select=select)
    plan = plan_revisions(
        base="base", head="no-such-rev", upstream=repo.path, universe=small_upstream.make_universe()
    )
    assert plan.fallback and plan.fallbacks[0].scope == "all"
    assert "unknown revision" in plan.fallbacks[0].reason
    assert len(plan.tests) == len(small_upstream.make_universe())
    assert plan.funnel[1].count_out == len(small_upstream.make_universe())


def test_select_takes_one_request_priced_for_its_universe(
    small_upstream: Any, selection_costs: Any
) -> None:
    """The planner prices the universe once (history, runner- and device-seconds estimates)
    and hands everything over in one request; costs priced for another universe are refused."""
    from dataclasses import replace

    import pytest

    from selector import SelectionRequest, unanalysed
    from selector import select as run_select

    universe = small_upstream.make_universe()
    priced = selection_costs(universe)
    assert priced.variants == len(universe)
    assert priced.applicable_runner_seconds == pytest.approx(0.2 * len(universe))
    facts = unanalysed("a", "b")
    request = SelectionRequest(
        facts=facts, universe=universe, costs=priced, force_all="all", budget_share=0.5
    )
    first, second = run_select(request), run_select(request)
    assert first.fingerprint() == second.fingerprint() and first.tests == second.tests
    assert first.budget_seconds == pytest.approx(0.1 * len(universe), abs=1e-3)
    assert first.full_runner_seconds == pytest.approx(priced.applicable_runner_seconds)
    smaller = type(universe)(variants=universe.variants[:3], label="three")
    with pytest.raises(ValueError, match="priced a universe of 18 variants, not this one of 3"):
        run_select(replace(request, universe=smaller))
