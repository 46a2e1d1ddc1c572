"""A job's plan names its cost in runner-minutes and when it should finish on its workers:
``GET /api/v1/jobs/{id}`` serves both from the stored plan (a pull-request event planned without a
checkout, so cut to the default budget for events the selector cannot analyse). The shards, the
selection's shard of each test and the finish estimate are the one split the runner makes
(planner.cut_shards, as the plan stage calls it), and the results of shard N are the selection's
tests of shard N."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any


def _store_job(settings: Any, repo_root: Path, plan: Any, policy: Any) -> int:
    """The job as the plan stage stores it: the plan cut by the runner's policy."""
    from backends.base import RunnerConfig
    from planner import RunPlan, cut_shards
    from store.db import session_scope
    from store.jobs import JobKey, create_job

    run = cut_shards(
        RunPlan.for_selection(plan, {}, runner=RunnerConfig(rootdir=str(repo_root))), policy
    )
    key = JobKey(
        delivery_id=str(uuid.uuid4()),
        repo="local/spyre",
        run_id="1",
        run_attempt="1",
        job_name="spyre",
    )
    with session_scope(settings.database_url) as session:
        job, created = create_job(
            session,
            key=key,
            dispatch_pk=None,
            event_type="pull_request",
            workflow_name="spyre-upstream-tests",
            url="",
            head_sha="b" * 40,
            pr_number=7,
            shards=run.shards,
            shard_seconds=run.shard_seconds,
            selection=run.stored(),
        )
        assert created
        return int(job.id)


def _plan(universe: Any, tmp_path: Path, seconds: float, budget: float) -> Any:
    from planner.revisions import plan_revisions
    from selector import History

    measured = {v.test_id: seconds for v in universe.variants}
    return plan_revisions(
        base="a" * 40,
        head="b" * 40,
        universe=universe,
        backend="cpu",
        facts_cache=tmp_path,
        offline=True,
        unanalysed_budget_seconds=budget,
        history=History.from_mapping(dict(measured)),
    )


def test_a_pull_request_job_names_its_cost_and_finish_time(
    client: Any, app_settings: Any, repo_root: Path, small_upstream: Any, tmp_path: Path
) -> None:
    from planner import ShardPolicy

    universe = small_upstream.make_universe()
    plan = _plan(universe, tmp_path, 30.0, 180.0)  # 30 runner-seconds each
    assert (len(plan.tests), plan.estimated_runner_seconds) == (6, 180.0)
    # 180 s on two shard workers: two shards of 90 s (at least 20 s each), about 1.5 minutes
    job = _store_job(app_settings, repo_root, plan, ShardPolicy(parallel=2))

    body = client.get(f"/api/v1/jobs/{job}").json()
    summary = body["selection"]
    assert summary["cost_runner_minutes"] == 3.0
    assert summary["universe_runner_minutes"] == len(universe) * 0.5
    assert summary["budget_runner_minutes"] == 3.0
    assert "cannot analyse" in summary["budget_reason"]
    assert (summary["workers"], summary["estimated_finish_minutes"]) == (2, 1.5)
    dispatched = _parse(body["dispatched_at"])
    assert _parse(summary["estimated_finish_at"]) - dispatched == timedelta(seconds=90)
    assert summary["cut"] == len(universe) - 6
    assert [s["tests"] for s in body["shards"]] == [3, 3]
    stored = client.get(f"/api/v1/jobs/{job}/selection").json()["plan"]
    assert (stored["counts"]["shards"], stored["shard_seconds"]) == ([3, 3], [90.0, 90.0])
    # one worker: the same two shards one after the other
    alone = _store_job(app_settings, repo_root, plan, ShardPolicy(target_seconds=90.0))
    summary = client.get(f"/api/v1/jobs/{alone}").json()["selection"]
    assert (summary["workers"], summary["estimated_finish_minutes"]) == (1, 3.0)


def test_every_shard_lists_the_same_tests_in_its_selection_and_its_results(
    client: Any, app_settings: Any, repo_root: Path, small_upstream: Any, tmp_path: Path
) -> None:
    """A finished job: each shard's results (stored by the shard that ran them, as
    workers.run stores them) are the tests the selection names for that shard."""
    from sqlalchemy import select

    from planner import ShardPolicy
    from store.db import session_scope
    from store.models import Shard
    from store.outcomes import Outcome, TestOutcome
    from store.results import store_results

    universe = small_upstream.make_universe()
    plan = _plan(universe, tmp_path, 7.0, 10_000.0)  # every variant, 7 runner-seconds each
    job = _store_job(app_settings, repo_root, plan, ShardPolicy(target_seconds=30.0))
    with session_scope(app_settings.database_url) as session:
        shards = list(session.scalars(select(Shard).where(Shard.job_pk == job)))
        for shard in shards:  # what the shard runner records: its own test ids, its shard
            outcomes = [TestOutcome(t, Outcome.PASSED) for t in shard.test_ids]
            store_results(session, job_pk=job, shard_pk=shard.id, outcomes=outcomes)
    assert len(shards) > 2 and sum(len(s.test_ids) for s in shards) == len(plan.tests)

    def listed(path: str, shard: int) -> set[str]:
        body = client.get(path, params={"shard": shard, "limit": 1000}).json()
        assert body["total"] == len(body["items"])
        return {item["test_id"] for item in body["items"]}

    for shard in shards:
        selected = listed(f"/api/v1/jobs/{job}/selection/tests", shard.index)
        assert selected == listed(f"/api/v1/jobs/{job}/results", shard.index) == set(shard.test_ids)
    assert listed(f"/api/v1/jobs/{job}/results", len(shards)) == set()


def _parse(text: str) -> Any:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00"))
