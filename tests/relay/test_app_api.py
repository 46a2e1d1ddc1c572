"""Every answer of the status API (``/healthz``, ``/readyz``, ``/api/v1/deliveries``,
``/api/v1/jobs``) in process: the app from ``create_app`` on a fresh SQLite database, with rows
written through the store's own functions (and deliveries through the webhook)."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

DELIVERY_FIELDS = {
    "delivery_id",
    "event",
    "action",
    "repo",
    "source",
    "upstream_delivery_id",
    "pr_number",
    "head_sha",
    "base_sha",
    "received_at",
    "state",
    "attempts",
    "last_error",
    "processed_at",
    "body_sha256",
    "normalized",
    "job_ids",
    "links",
}
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


# ----------------------------------------------------------------------------- health


def test_healthz(client: Any) -> None:
    from relay.app import VERSION

    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"ok": True, "version": VERSION}


def test_readyz_with_the_database_and_the_broker_reachable(client: Any) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200, response.text
    assert response.json() == {
        "ok": True,
        "database": {"ok": True, "detail": "ok"},
        "broker": {"ok": True, "detail": "ok"},
    }


def test_readyz_is_503_when_the_broker_is_unreachable(
    make_client: Any, app_settings: Any, free_port: Any
) -> None:
    settings = app_settings.model_copy(update={"broker_url": f"redis://127.0.0.1:{free_port()}/0"})
    response = make_client(settings).get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["ok"] is False
    assert body["database"] == {"ok": True, "detail": "ok"}
    assert body["broker"]["ok"] is False
    assert "Error" in body["broker"]["detail"]  # the exception's type and message


def test_readyz_is_503_when_the_database_is_unreachable(
    make_client: Any, app_settings: Any, free_port: Any
) -> None:
    missing = f"postgresql+psycopg://relay@127.0.0.1:{free_port()}/relay"  # nothing listens
    response = make_client(app_settings.model_copy(update={"database_url": missing})).get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["ok"] is False
    assert body["database"]["ok"] is False
    assert body["database"]["detail"].startswith("OperationalError: ")
    assert body["broker"] == {"ok": True, "detail": "ok"}


# ----------------------------------------------------------------------------- deliveries


@pytest.fixture
def three(webhook: Any, github_fixtures: Path) -> list[str]:
    """Three deliveries through the webhook: a pull request, a push, another pull request."""
    pr = (github_fixtures / "pull_request/opened.payload.json").read_bytes()
    push = (github_fixtures / "push/with-new-branch.payload.json").read_bytes()
    ids = [f"d-{i}-{uuid.uuid4()}" for i in range(3)]
    for delivery_id, (event, body) in zip(
        ids, [("pull_request", pr), ("push", push), ("pull_request", pr)], strict=True
    ):
        assert webhook.post(event, body, delivery_id=delivery_id).status_code == 202
    return ids


def _set_state(settings: Any, delivery_id: str, state: str) -> None:
    from sqlalchemy import select, update

    from store.db import session_scope
    from store.deliveries import mark_failed
    from store.models import Delivery

    with session_scope(settings.database_url) as session:
        if state == "failed":
            pk = session.scalar(select(Delivery.id).where(Delivery.delivery_id == delivery_id))
            mark_failed(session, pk=pk, error="RuntimeError: boom")
        else:
            session.execute(
                update(Delivery).where(Delivery.delivery_id == delivery_id).values(state=state)
            )
            session.commit()


def test_deliveries_empty(client: Any) -> None:
    response = client.get("/api/v1/deliveries")
    assert (response.status_code, response.json()) == (
        200,
        {"items": [], "total": 0, "limit": 50, "offset": 0, "next_cursor": None},
    )
    assert "link" not in response.headers


def test_deliveries_newest_first_with_their_public_fields(
    client: Any, three: list[str], github_fixtures: Path, webhook: Any
) -> None:
    page = client.get("/api/v1/deliveries").json()
    assert (page["total"], page["next_cursor"]) == (3, None)
    listed = page["items"]
    assert [d["delivery_id"] for d in listed] == three[::-1]
    assert all(set(d) == DELIVERY_FIELDS for d in listed)
    pr = json.loads((github_fixtures / "pull_request/opened.payload.json").read_bytes())
    newest = listed[0]
    assert (newest["event"], newest["action"], newest["repo"], newest["source"]) == (
        "pull_request",
        "opened",
        webhook.upstream,
        "webhook",
    )
    assert (newest["state"], newest["attempts"], newest["last_error"]) == ("received", 0, None)
    assert newest["pr_number"] == pr["number"]
    assert newest["head_sha"] == pr["pull_request"]["head"]["sha"]
    assert newest["normalized"]["pr_number"] == pr["number"]
    assert listed[1]["event"] == "push" and listed[1]["pr_number"] is None


def test_deliveries_filtered_by_state(client: Any, three: list[str], app_settings: Any) -> None:
    _set_state(app_settings, three[0], "processed")
    _set_state(app_settings, three[1], "failed")

    def ids(state: str) -> list[str]:
        response = client.get("/api/v1/deliveries", params={"state": state})
        assert response.status_code == 200
        return [d["delivery_id"] for d in response.json()["items"]]

    assert ids("processed") == [three[0]]
    assert ids("failed") == [three[1]]
    assert ids("received") == [three[2]]
    assert ids("processing") == []
    failed = client.get(f"/api/v1/deliveries/{three[1]}").json()
    assert (failed["state"], failed["last_error"]) == ("failed", "RuntimeError: boom")


@pytest.mark.parametrize(
    "query",
    [
        {"state": "bogus"},
        {"event": "bogus"},
        {"limit": 0},
        {"limit": 501},
        {"limit": "many"},
        {"pr": 2**80},
        {"offset": -1},
    ],
)
def test_deliveries_bad_query_is_422(client: Any, query: dict[str, Any]) -> None:
    response = client.get("/api/v1/deliveries", params=query)
    assert response.status_code == 422
    body = response.json()
    assert body["errors"][0]["loc"] == ["query", next(iter(query))]
    assert body["detail"].startswith(f"query.{next(iter(query))}: ")  # one line
    assert "\n" not in body["detail"]


def test_deliveries_paged_by_limit_offset_and_cursor(client: Any, three: list[str]) -> None:
    first = client.get("/api/v1/deliveries?limit=2")
    page = first.json()
    assert [d["delivery_id"] for d in page["items"]] == [three[2], three[1]]
    assert (page["total"], page["limit"], page["offset"]) == (3, 2, 0)
    assert page["next_cursor"] and page["next_cursor"] in first.headers["link"]
    rest = client.get("/api/v1/deliveries", params={"limit": 2, "cursor": page["next_cursor"]})
    assert [d["delivery_id"] for d in rest.json()["items"]] == [three[0]]
    assert (rest.json()["total"], rest.json()["next_cursor"]) == (3, None)
    by_offset = client.get("/api/v1/deliveries", params={"limit": 2, "offset": 2}).json()
    assert [d["delivery_id"] for d in by_offset["items"]] == [three[0]]
    assert (by_offset["offset"], by_offset["next_cursor"]) == (2, None)
    assert len(client.get("/api/v1/deliveries?limit=500").json()["items"]) == 3


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ({"cursor": "bogus"}, "cursor: not a cursor this API issued"),
        ({"cursor": "YzE6aTo0Mg", "offset": 1}, "offset and cursor: give one, not both"),
        (
            {"stat": "failed"},
            "unknown query parameter(s) stat; this endpoint takes: cursor, event, "
            "limit, offset, pr, state",
        ),
    ],
)
def test_deliveries_bad_paging_and_unknown_parameters_are_422(
    client: Any, query: dict[str, Any], reason: str
) -> None:
    response = client.get("/api/v1/deliveries", params=query)
    assert (response.status_code, response.json()) == (422, {"detail": reason})


def test_one_delivery(client: Any, three: list[str], webhook: Any) -> None:
    response = client.get(f"/api/v1/deliveries/{three[1]}")
    assert response.status_code == 200
    one = response.json()
    assert set(one) == DELIVERY_FIELDS
    row = webhook.stored(three[1])
    assert one["delivery_id"] == three[1] and one["event"] == "push"
    assert one["body_sha256"] == hashlib.sha256(row.raw_body).hexdigest()
    assert one["normalized"] == row.normalized
    assert one["normalized"]["delivery_id"] == three[1]
    assert one["base_sha"] == row.base_sha and one["head_sha"] == row.head_sha


def test_unknown_delivery_is_404(client: Any) -> None:
    response = client.get("/api/v1/deliveries/nope")
    assert (response.status_code, response.json()) == (404, {"detail": "no delivery nope"})


# ----------------------------------------------------------------------------- jobs


class Jobs:
    """Jobs written the way the plan stage writes them: ``create_job`` with the RunPlan's
    stored form, results through ``store_result``, status changes through ``transition``."""

    def __init__(self, settings: Any, rootdir: Path) -> None:
        self.url = settings.database_url
        self.rootdir = rootdir

    def create(
        self,
        shards: list[list[str]],
        *,
        pr: int | None = 7,
        selection: Any = None,
        delivery_id: str | None = None,
        head: str = "a" * 40,
        delivery: str | None = None,
        upstream: Any = None,
        policy: Any = None,
    ) -> int:
        """A job; ``delivery``: planned for that stored delivery (through a dispatch);
        ``policy``: the shards cut as the plan stage cuts them (planner.cut_shards)."""
        from backends.base import RunnerConfig
        from planner import RunPlan, cut_shards
        from store.db import session_scope
        from store.jobs import JobKey, create_job

        plan = RunPlan(
            shards=shards,
            runner=RunnerConfig(rootdir=str(self.rootdir), pytest_args=["-q"]),
            selection=selection,
            base_rev="v2.13.0" if selection is not None else None,
            head_rev=head,
            **({"upstream": upstream} if upstream is not None else {}),
        )
        if policy is not None:
            plan = cut_shards(plan, policy)
        key = JobKey(
            delivery_id=delivery_id or str(uuid.uuid4()),
            repo="local/spyre",
            run_id=str(uuid.uuid4().int % 10**9),
            run_attempt="1",
            job_name="spyre",
        )
        with session_scope(self.url) as session:
            dispatch_pk = None if delivery is None else self._dispatch(session, delivery)
            job, created = create_job(
                session,
                key=key,
                dispatch_pk=dispatch_pk,
                event_type="pull_request",
                workflow_name="spyre-upstream-tests",
                url="http://relay/api/v1/jobs/x",
                head_sha=head,
                pr_number=pr,
                shards=plan.shards,
                shard_seconds=plan.shard_seconds,
                selection=plan.stored(),
            )
            assert created
            if upstream is not None:  # as the plan stage records it
                job.upstream_under_test = plan.upstream.model_dump(mode="json")
                session.commit()
            return int(job.id)

    @staticmethod
    def _dispatch(session: Any, delivery_id: str) -> int:
        from sqlalchemy import select

        from store.downstreams import ensure_downstream
        from store.models import Delivery, Dispatch

        delivery_pk = session.scalar(select(Delivery.id).where(Delivery.delivery_id == delivery_id))
        downstream = ensure_downstream(
            session, repo="local/spyre", level="L2", device="spyre", policy={}
        )
        dispatch = Dispatch(delivery_pk=delivery_pk, downstream_pk=downstream.id)
        session.add(dispatch)
        session.flush()
        return int(dispatch.id)

    def result(self, job_pk: int, test_id: str, outcome: str, **kw: Any) -> None:
        from store.db import session_scope
        from store.outcomes import TestOutcome
        from store.results import store_result

        with session_scope(self.url) as session:
            assert store_result(
                session, job_pk=job_pk, shard_pk=None, outcome=TestOutcome(test_id, outcome, **kw)
            )

    def move(self, job_pk: int, to: str, conclusion: str | None = None) -> None:
        from store.db import session_scope
        from store.jobs import transition
        from store.models import Conclusion, Job, JobStatus

        with session_scope(self.url) as session:
            job = session.get(Job, job_pk)
            assert job is not None
            assert transition(
                session,
                job=job,
                to=JobStatus(to),
                expect=set(JobStatus),
                source="test",
                conclusion=Conclusion(conclusion) if conclusion else None,
            )


@pytest.fixture
def jobs(app_settings: Any, repo_root: Path) -> Jobs:
    return Jobs(app_settings, repo_root)


def test_jobs_empty(client: Any) -> None:
    response = client.get("/api/v1/jobs")
    assert (response.status_code, response.json()) == (
        200,
        {"items": [], "total": 0, "limit": 50, "offset": 0, "next_cursor": None},
    )


def test_jobs_with_live_counts(client: Any, jobs: Jobs) -> None:
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


def test_jobs_filtered_by_status_and_pr(client: Any, jobs: Jobs) -> None:
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
    client: Any, jobs: Jobs, small_upstream: Any, plan_everything: Any
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
            {**f.model_dump(mode="json"), "units_total": len(f.units)} for f in selection.fallbacks
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


def test_a_job_says_which_upstream_it_tests(client: Any, jobs: Jobs) -> None:
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


def test_a_job_planned_without_the_selector_has_no_universe(client: Any, jobs: Jobs) -> None:
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


def test_job_results(client: Any, jobs: Jobs) -> None:
    job = jobs.create([["t::a", "t::b", "t::c"]])
    other = jobs.create([["t::a"]])
    jobs.result(job, "t::a", "passed", duration_s=1.5, device_time_us=42.0)
    jobs.result(
        job,
        "t::b",
        "failed",
        message="assert 1 == 2",
        properties={"spec_mode": "xfail", "spec_tags": "numerics,slow"},
    )
    jobs.result(job, "t::c", "timeout")
    jobs.result(other, "t::a", "failed")

    response = client.get(f"/api/v1/jobs/{job}/results")
    assert response.status_code == 200
    page = response.json()
    assert (page["total"], page["limit"], page["offset"], page["next_cursor"]) == (3, 1000, 0, None)
    results = page["items"]
    assert all(r["created_at"] for r in results)  # when each result was stored
    assert [{k: v for k, v in r.items() if k not in ("id", "created_at")} for r in results] == [
        {
            "test_id": "t::a",
            "outcome": "passed",
            "duration_s": 1.5,
            "device_time_us": 42.0,
            "message": None,
            "spec_mode": None,
            "tags": [],
            "shard": None,
        },
        {
            "test_id": "t::b",
            "outcome": "failed",
            "duration_s": 0.0,
            "device_time_us": None,
            "message": "assert 1 == 2",
            "spec_mode": "xfail",
            "tags": ["numerics", "slow"],
            "shard": None,
        },
        {
            "test_id": "t::c",
            "outcome": "timeout",
            "duration_s": 0.0,
            "device_time_us": None,
            "message": None,
            "spec_mode": None,
            "tags": [],
            "shard": None,
        },
    ]

    def ids(**params: Any) -> list[str]:
        answer = client.get(f"/api/v1/jobs/{job}/results", params=params)
        assert answer.status_code == 200, answer.text
        return [r["test_id"] for r in answer.json()["items"]]

    assert ids(outcome="failed") == ["t::b"]
    assert ids(outcome="skipped") == []
    assert ids(limit=2) == ["t::a", "t::b"]
    assert ids(limit=2, offset=2) == ["t::c"]
    cursor = client.get(f"/api/v1/jobs/{job}/results", params={"limit": 1}).json()["next_cursor"]
    assert ids(limit=1, cursor=cursor) == ["t::b"]
    for bad in ({"limit": 0}, {"limit": 5001}, {"outcome": "bogus"}, {"outcom": "failed"}):
        answer = client.get(f"/api/v1/jobs/{job}/results", params=bad)
        assert answer.status_code == 422, bad
        assert isinstance(answer.json()["detail"], str)


def test_a_delivery_and_its_job_link_both_ways(
    client: Any, webhook: Any, jobs: Jobs, github_fixtures: Path
) -> None:
    body = (github_fixtures / "pull_request/opened.payload.json").read_bytes()
    delivery_id = f"linked-{uuid.uuid4()}"
    assert webhook.post("pull_request", body, delivery_id=delivery_id).status_code == 202
    job = jobs.create([["t::a"]], delivery=delivery_id, delivery_id="crcr-inner-id")
    unrelated = jobs.create([["t::a"]])

    delivery = client.get(f"/api/v1/deliveries/{delivery_id}").json()
    assert delivery["job_ids"] == [job]
    assert delivery["links"] == {
        "self": f"/api/v1/deliveries/{delivery_id}",
        "jobs": [f"/api/v1/jobs/{job}"],
    }
    listed = client.get("/api/v1/deliveries").json()["items"]
    assert [d["job_ids"] for d in listed if d["delivery_id"] == delivery_id] == [[job]]

    detail = client.get(f"/api/v1/jobs/{job}").json()
    # the delivery the API serves, and CRCR's key (what callbacks carry) beside it
    assert (detail["delivery_id"], detail["crcr_delivery_id"]) == (delivery_id, "crcr-inner-id")
    assert detail["links"]["delivery"] == f"/api/v1/deliveries/{delivery_id}"
    assert client.get(detail["links"]["delivery"]).json()["job_ids"] == [job]
    other = client.get(f"/api/v1/jobs/{unrelated}").json()
    assert (other["delivery_id"], other["links"]["delivery"]) == (None, None)


def test_a_transition_records_the_status_the_row_came_from(
    client: Any, jobs: Jobs, app_settings: Any
) -> None:
    """The job object a worker holds can be stale: another process moved the row meanwhile."""
    from store.db import session_scope
    from store.jobs import transition
    from store.models import Conclusion, Job, JobStatus

    job_pk = jobs.create([["t::a"]])
    with session_scope(app_settings.database_url) as stale_session:
        stale = stale_session.get(Job, job_pk)
        assert stale is not None and stale.status == "dispatched"
        jobs.move(job_pk, "in_progress")  # another session
        assert transition(
            stale_session,
            job=stale,
            to=JobStatus.COMPLETED,
            expect={JobStatus.DISPATCHED, JobStatus.IN_PROGRESS},
            source="report",
            conclusion=Conclusion.SUCCESS,
        )
    history = client.get(f"/api/v1/jobs/{job_pk}").json()["transitions"]
    assert [(t["from_status"], t["to_status"]) for t in history] == [
        (None, "dispatched"),
        ("dispatched", "in_progress"),
        ("in_progress", "completed"),
    ]


def _big_selection(tests: int, *, units: int = 200) -> Any:
    """A SelectionPlan of ``tests`` selected variants as the selector writes them (reasons,
    signals, a fallback naming ``units`` changed units), a tenth as many cut."""
    from selector.plan import (
        CutTest,
        FallbackInfo,
        FunnelStep,
        PlannedTest,
        SelectionPlan,
        UniverseInfo,
    )

    ids = [
        f"spyre_stack/conformance/test_common.py::TestCommonPRIVATEUSE1::"
        f"test_compare_cpu_op{i}_spyre_float16"
        for i in range(tests)
    ]
    fallback_units = [f"torch/_dynamo/module_{i}.py" for i in range(units)]
    return SelectionPlan(
        backend="spyre",
        source_kind="wheel",
        base="2.13",
        head="2.14",
        universe=UniverseInfo(label="bundled", kind="installed", variants=tests + tests // 10),
        funnel=[
            FunnelStep(stage=s, count_in=tests, count_out=tests, unit="variant", seconds=0.1)
            for s in ("changes", "impact", "applicability", "budget")
        ],
        fallback=True,
        fallbacks=[
            FallbackInfo(
                scope="all", units=fallback_units, reason="no signal maps these", tests=tests
            )
        ],
        tests=[
            PlannedTest(
                test_id=t,
                rank=i,
                risk=0.5,
                seconds=0.01,
                seconds_source="model",
                mode="xfail",
                gating=False,
                signals=["fallback", "operator"],
                reasons=[
                    "fallback: all (no signal maps 200 units)",
                    f"operator: op{i} changed in native_functions.yaml",
                ],
            )
            for i, t in enumerate(ids)
        ],
        cut=[
            CutTest(
                test_id=f"cut::{i}",
                rank=tests + i,
                risk=0.1,
                seconds=0.01,
                reason="over the budget",
            )
            for i in range(tests // 10)
        ],
        estimated_device_seconds=300.0,
        full_device_seconds=330.0,
    )


def test_a_30000_test_job_is_served_compactly(client: Any, jobs: Jobs) -> None:
    from planner import ShardPolicy, shard_by_time

    selection = _big_selection(30_000)
    # 300 runner-seconds (0.01 each) in two shards, as the plan stage cuts them
    job = jobs.create([selection.test_ids], selection=selection, policy=ShardPolicy(max_shards=2))
    seconds = {t.test_id: t.seconds for t in selection.tests}
    split, _ = shard_by_time(selection.test_ids, seconds, target_seconds=120, max_shards=2)

    detail = client.get(f"/api/v1/jobs/{job}")
    assert detail.status_code == 200
    assert len(detail.content) < 64 * 1024, len(detail.content)
    summary = detail.json()["selection"]
    assert (summary["selected"], summary["cut"], summary["universe_variants"]) == (
        30_000,
        3_000,
        33_000,
    )
    assert summary["fallbacks"][0]["units_total"] == 200
    assert len(summary["fallbacks"][0]["units"]) == 20
    assert len(client.get(f"/api/v1/jobs/{job}/selection").content) < 64 * 1024

    # the selected variants and their reasons, paged in rank order
    url = f"/api/v1/jobs/{job}/selection/tests"
    first = client.get(url, params={"kind": "selected", "limit": 500}).json()
    assert (first["total"], len(first["items"])) == (30_000, 500)
    assert [t["rank"] for t in first["items"]] == list(range(500))
    top = first["items"][0]
    assert top["test_id"] == selection.tests[0].test_id
    top_shard = next(i for i, ids in enumerate(split) if top["test_id"] in ids)
    assert (top["shard"], top["mode"], top["gating"]) == (top_shard, "xfail", False)
    assert top["reasons"] == selection.tests[0].reasons
    second = client.get(
        url, params={"kind": "selected", "limit": 500, "cursor": first["next_cursor"]}
    ).json()
    assert [t["rank"] for t in second["items"]] == list(range(500, 1000))
    last = client.get(url, params={"kind": "selected", "limit": 500, "offset": 29_800}).json()
    assert (len(last["items"]), last["next_cursor"]) == (200, None)
    cut = client.get(url, params={"kind": "cut", "limit": 5}).json()
    assert cut["total"] == 3_000 and cut["items"][0]["reasons"] == ["over the budget"]
    sizes = [s["tests"] for s in detail.json()["shards"]]
    assert sizes == [len(ids) for ids in split] and sum(sizes) == 30_000
    assert client.get(url, params={"shard": 1}).json()["total"] == sizes[1]
    assert client.get(url, params={"mode": "mandatory_success"}).json()["total"] == 0
    assert client.get(url, params={"kind": "bogus"}).status_code == 422
    assert client.get(url, params={"mode": "bogus"}).status_code == 422


def test_the_selection_of_a_job_planned_without_the_selector(client: Any, jobs: Jobs) -> None:
    job = jobs.create([["t::a"]])
    response = client.get(f"/api/v1/jobs/{job}/selection")
    assert response.status_code == 200
    body = response.json()
    assert (body["stage_counts"], body["fallbacks"], set(body["plan"])) == (
        {},
        [],
        {"runner", "upstream_under_test"},
    )
    tests = client.get(f"/api/v1/jobs/{job}/selection/tests").json()
    assert (tests["total"], tests["items"]) == (0, [])
    for path in ("selection", "selection/tests"):
        missing = client.get(f"/api/v1/jobs/999/{path}")
        assert (missing.status_code, missing.json()) == (404, {"detail": "no job 999"})
