"""A job's plan names its cost in runner-minutes and when it should finish on its workers:
``GET /api/v1/jobs/{id}`` serves both from the stored plan (a pull-request event planned without a
checkout, so cut to the default budget for events the selector cannot analyse)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any


def _store_job(settings: Any, repo_root: Path, plan: Any) -> int:
    from backends.base import RunnerConfig
    from planner import RunPlan
    from store.db import session_scope
    from store.jobs import JobKey, create_job

    run = RunPlan(
        shards=plan.shards,
        runner=RunnerConfig(rootdir=str(repo_root), pytest_args=["-q"]),
        selection=plan,
    )
    key = JobKey(delivery_id=str(uuid.uuid4()), repo="local/spyre", run_id="1", run_attempt="1",
                 job_name="spyre")  # fmt: skip
    with session_scope(settings.database_url) as session:
        job, created = create_job(
            session, key=key, dispatch_pk=None, event_type="pull_request",
            workflow_name="spyre-upstream-tests", url="", head_sha="b" * 40, pr_number=7,
            shards=run.shards, selection=run.stored(),
        )  # fmt: skip
        assert created
        return int(job.id)


def test_a_pull_request_job_names_its_cost_and_finish_time(
    client: Any, app_settings: Any, repo_root: Path, small_upstream: Any, tmp_path: Path
) -> None:
    from planner.revisions import plan_revisions
    from selector import History

    universe = small_upstream.make_universe()
    measured = {v.test_id: 30.0 for v in universe.variants}  # 30 runner-seconds each
    plan = plan_revisions(
        base="a" * 40, head="b" * 40, universe=universe, backend="cpu", facts_cache=tmp_path,
        offline=True, workers=2, unanalysed_budget_seconds=180.0,
        history=History.from_mapping(dict(measured)),
    )  # fmt: skip
    assert (len(plan.tests), plan.estimated_runner_seconds) == (6, 180.0)
    job = _store_job(app_settings, repo_root, plan)

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


def _parse(text: str) -> Any:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00"))
