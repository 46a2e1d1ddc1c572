"""A job's results and its selection in the status API (``/api/v1/jobs/{id}/results``,
``.../selection``, ``.../selection/tests``; a delivery and its job linked both ways, a job's
transitions) in process, on jobs written the way the plan stage writes them."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any


def test_job_results(client: Any, jobs: Any) -> None:
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
    client: Any, webhook: Any, jobs: Any, github_fixtures: Path
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
    client: Any, jobs: Any, app_settings: Any
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
    from selector.model import Cut, Fallback, Ranked
    from selector.plan import FunnelStep, SelectionPlan, UniverseInfo

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
            Fallback(
                scope="all", units=tuple(fallback_units), reason="no signal maps these", tests=tests
            )
        ],
        tests=[
            Ranked(
                test_id=t,
                rank=i,
                risk=0.5,
                seconds=0.01,
                seconds_source="model",
                mode="xfail",
                gating=False,
                signals=("fallback", "operator"),
                reasons=(
                    "fallback: all (no signal maps 200 units)",
                    f"operator: op{i} changed in native_functions.yaml",
                ),
            )
            for i, t in enumerate(ids)
        ],
        cut=[
            Cut(
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


def test_a_30000_test_job_is_served_compactly(client: Any, jobs: Any) -> None:
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
    assert top["reasons"] == list(selection.tests[0].reasons)
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


def test_the_selection_of_a_job_planned_without_the_selector(client: Any, jobs: Any) -> None:
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
