"""The jobs of the status API (``/api/v1/jobs``, ``/api/v1/jobs/{id}``: live counts, filters,
shards, transitions, the selection summary and the upstream under test) in process: the app
from ``create_app`` on a fresh SQLite database, with jobs written the way the plan stage writes
them (the ``jobs`` fixture)."""

from __future__ import annotations

from typing import Any

import pytest

JOB_FIELDS = {
    "id",
    "delivery_id",
    "repo",
    "run_id",
    "run_attempt",
    "job_name",
    "workflow_name",
    "event_type",
    "head_sha",
    "pr_number",
    "status",
    "conclusion",
    "planning_started_at",
    "dispatched_at",
    "started_at",
    "completed_at",
    "url",
    "superseded",
    "planned",
    "test_results",
    "crcr_delivery_id",
    "links",
    "upstream_under_test",
    "failure_reason",
}
COST_FIELDS = (
    "cost_runner_minutes",
    "universe_runner_minutes",
    "budget_runner_minutes",
    "budget_reason",
    "workers",
    "estimated_finish_minutes",
    "estimated_finish_at",
)
ZERO = {"passed": 0, "failed": 0, "skipped": 0, "xfailed": 0, "xpassed": 0, "total": 0}


def test_jobs_empty(client: Any) -> None:
    response = client.get("/api/v1/jobs")
    assert (response.status_code, response.json()) == (
        200,
        {"items": [], "total": 0, "limit": 50, "offset": 0, "next_cursor": None},
    )


def test_jobs_with_live_counts(client: Any, jobs: Any) -> None:
    first = jobs.create([["t::a", "t::b"], ["t::c", "t::d", "t::e"]], pr=7)
    second = jobs.create([["t::z"]], pr=8)
    for test_id, outcome in [
        ("t::a", "passed"),
        ("t::b", "xpassed"),
        ("t::c", "failed"),
        ("t::d", "crashed"),
        ("t::e", "xfailed"),
    ]:
        jobs.result(first, test_id, outcome)
    listed = client.get("/api/v1/jobs").json()["items"]
    assert [j["id"] for j in listed] == [second, first]  # newest first
    assert all(set(j) == JOB_FIELDS for j in listed)
    one = listed[1]
    # xpassed is not counted as passed, nor xfailed as skipped
    assert one["test_results"] == {
        "passed": 1,
        "failed": 2,
        "skipped": 0,
        "xfailed": 1,
        "xpassed": 1,
        "total": 5,
    }
    assert (one["status"], one["conclusion"], one["planned"], one["superseded"]) == (
        "dispatched",
        None,
        5,
        False,
    )
    assert (one["pr_number"], one["head_sha"], one["event_type"], one["job_name"]) == (
        7,
        "a" * 40,
        "pull_request",
        "spyre",
    )
    assert listed[0]["test_results"] == ZERO
    # live: a result stored later is counted at once
    jobs.result(second, "t::z", "skipped")
    again = client.get("/api/v1/jobs").json()["items"][0]
    assert again["test_results"] == {**ZERO, "skipped": 1, "total": 1}


def test_jobs_filtered_by_status_and_pr(client: Any, jobs: Any) -> None:
    done = jobs.create([["t::a"]], pr=7)
    running = jobs.create([["t::a"]], pr=7)
    other = jobs.create([["t::a"]], pr=9)
    jobs.move(running, "in_progress")
    jobs.move(done, "in_progress")
    jobs.move(done, "completed", "success")

    def ids(**params: Any) -> list[int]:
        response = client.get("/api/v1/jobs", params=params)
        assert response.status_code == 200
        return [j["id"] for j in response.json()["items"]]

    assert ids(status="completed") == [done]
    assert ids(conclusion="success") == [done]
    assert ids(conclusion="failure") == []
    assert ids(status="in_progress") == [running]
    assert ids(status="dispatched") == [other]
    assert ids(pr=7) == [running, done]
    assert ids(pr=9) == [other]
    assert ids(pr=10) == []
    assert ids(status="in_progress", pr=9) == []
    assert ids(limit=1) == [other]
    completed = client.get("/api/v1/jobs", params={"status": "completed"}).json()["items"][0]
    assert (completed["conclusion"], completed["completed_at"] is not None) == ("success", True)


@pytest.mark.parametrize(
    "query",
    [{"limit": 0}, {"limit": 501}, {"pr": "seven"}, {"status": "bogus"}, {"conclusion": "bogus"}],
)
def test_jobs_bad_query_is_422(client: Any, query: dict[str, Any]) -> None:
    response = client.get("/api/v1/jobs", params=query)
    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"] == ["query", next(iter(query))]


def test_one_job_with_shards_transitions_and_selection(
    client: Any, jobs: Any, small_upstream: Any, plan_everything: Any
) -> None:
    from planner import ShardPolicy

    universe = small_upstream.make_universe()
    selection = plan_everything(
        universe,
        reason="push: the change is not readable here",
        base="v2.13.0",
        head="b" * 40,
        source_kind="installed",
    )
    # 18 variants at 0.2 runner-seconds: two shards of about 2 s, run on two workers
    policy = ShardPolicy(target_seconds=2.0, parallel=2)
    job = jobs.create([selection.test_ids], selection=selection, head="b" * 40, policy=policy)
    first = selection.test_ids[0]
    jobs.result(job, first, "passed", duration_s=0.5)
    jobs.move(job, "in_progress")

    response = client.get(f"/api/v1/jobs/{job}")
    assert response.status_code == 200
    detail = response.json()
    assert set(detail) == JOB_FIELDS | {"shards", "transitions", "selection", "failure_error"}
    assert (detail["failure_reason"], detail["failure_error"]) == (None, None)  # nothing failed
    assert detail["links"] == {
        "self": f"/api/v1/jobs/{job}",
        "delivery": None,
        "results": f"/api/v1/jobs/{job}/results",
        "selection": f"/api/v1/jobs/{job}/selection",
        "selection_tests": f"/api/v1/jobs/{job}/selection/tests",
    }
    assert (detail["id"], detail["status"], detail["planned"]) == (
        job,
        "in_progress",
        len(universe),
    )
    assert detail["started_at"] is not None
    assert detail["test_results"] == {**ZERO, "passed": 1, "total": 1}
    assert [
        {k: s[k] for k in ("index", "state", "attempts", "started_at", "finished_at")}
        for s in detail["shards"]
    ] == [
        {"index": i, "state": "pending", "attempts": 0, "started_at": None, "finished_at": None}
        for i in range(2)
    ]
    assert sum(s["tests"] for s in detail["shards"]) == len(universe)
    assert [(t["from_status"], t["to_status"], t["source"]) for t in detail["transitions"]] == [
        (None, "dispatched", "plan"),
        ("dispatched", "in_progress", "test"),
    ]
    # the selection summary, with the size of the universe read back from the stored plan
    assert detail["selection"] == {
        "base_rev": "v2.13.0",
        "head_rev": "b" * 40,
        "stage_counts": {s.stage: {"in": s.count_in, "out": s.count_out} for s in selection.funnel},
        "fallbacks": [
            {**f, "units_total": len(f["units"])}
            for f in selection.model_dump(mode="json")["fallbacks"]
        ],
        "estimated_device_seconds": selection.estimated_device_seconds,
        "universe_variants": len(universe),
        "selected": len(universe),
        "cut": 0,
        "removed": 0,
        **{key: detail["selection"][key] for key in COST_FIELDS},
    }
    cost = detail["selection"]  # the plan's cost (tests/relay/test_app_job_cost.py)
    assert cost["cost_runner_minutes"] == round(selection.estimated_runner_seconds / 60, 2)
    assert (cost["workers"], cost["budget_runner_minutes"]) == (2, None)
    assert detail["selection"]["universe_variants"] == selection.universe.variants == 18
    assert detail["selection"]["fallbacks"][0]["scope"] == "all"


def test_a_job_says_which_upstream_it_tests(client: Any, jobs: Any) -> None:
    from upstream.undertest import UpstreamUnderTest

    head = "c" * 40
    overlay = UpstreamUnderTest(
        kind="overlay",
        torch_build="2.13.0+gitabc",
        head_sha=head,
        files_laid_over=3,
        compiled_not_covered=["aten/src/ATen/native/BinaryOps.cpp"],
        reason="a checkout",
    )
    job = jobs.create([["t::a"]], head=head, upstream=overlay)
    plain = jobs.create([["t::b"]])  # planned before the upstream under test was named
    detail = client.get(f"/api/v1/jobs/{job}").json()
    assert detail["upstream_under_test"] == {
        "kind": "overlay",
        "torch_version": None,
        "torch_build": "2.13.0+gitabc",
        "head_sha": head,
        "head_wheel": None,
        "files_laid_over": 3,
        "compiled_not_covered": ["aten/src/ATen/native/BinaryOps.cpp"],
        "smoke": False,
        "reason": "a checkout",
        "summary": "torch 2.13.0+gitabc with 3 Python file(s) of head cccccccccccc laid over; "
        "compiled changes not tested: aten/src/ATen/native/BinaryOps.cpp",
    }
    listed = {j["id"]: j for j in client.get("/api/v1/jobs").json()["items"]}
    assert listed[job]["upstream_under_test"]["kind"] == "overlay"
    assert listed[plain]["upstream_under_test"] is None
    page = client.get(f"/runs/{job}")
    assert page.status_code == 200
    assert 'id="run-upstream" data-kind="overlay"' in page.text
    assert "3 Python file(s) of head cccccccccccc laid over" in page.text


def test_a_job_planned_without_the_selector_has_no_universe(client: Any, jobs: Any) -> None:
    job = jobs.create([["t::a"], ["t::b"]])
    jobs.move(job, "in_progress")
    jobs.move(job, "completed", "failure")
    detail = client.get(f"/api/v1/jobs/{job}").json()
    assert detail["selection"] == {
        "base_rev": None,
        "head_rev": "a" * 40,
        "stage_counts": {},
        "fallbacks": [],
        "estimated_device_seconds": None,
        "universe_variants": None,
        "selected": None,
        "cut": None,
        "removed": None,
        "cost_runner_minutes": None,
        "universe_runner_minutes": None,
        "budget_runner_minutes": None,
        "budget_reason": "",
        "workers": None,
        "estimated_finish_minutes": None,
        "estimated_finish_at": None,
    }
    assert [t["to_status"] for t in detail["transitions"]] == [
        "dispatched",
        "in_progress",
        "completed",
    ]
    assert detail["transitions"][-1]["conclusion"] == "failure"
    assert (detail["status"], detail["conclusion"]) == ("completed", "failure")


@pytest.mark.parametrize("path", ["/api/v1/jobs/999", "/api/v1/jobs/999/results"])
def test_unknown_job_is_404(client: Any, path: str) -> None:
    response = client.get(path)
    assert (response.status_code, response.json()) == (404, {"detail": "no job 999"})
