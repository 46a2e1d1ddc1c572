"""The default loop for real: a signed push through uvicorn, planned by the selector's four stages
over the bundled universe, run on the spyre device under the bundled specs by a real Celery
worker (warm pool), results and simulated device time stored, the job reported. With no upstream
checkout the push itself cannot be tested: the stack asks for the labelled smoke run on the
installed torch (RELAY_SMOKE_UNTESTED), and the job says so."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from store.db import session_scope
from store.models import Selection, TestResult

pytestmark = pytest.mark.long


@pytest.fixture(scope="module")
def spyre_loop(tmp_path_factory: pytest.TempPathFactory, relay_up: Any) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("spyre-loop")
    stack = relay_up.local(
        tmp,
        extra_env={
            "RELAY_RUNNER_ENABLED": "true",
            "RELAY_EVENT_HANDLERS": "[]",
            # a budget of runner-seconds small enough for a test: a few dozen variants
            "RELAY_RUNNER_BUDGET_SECONDS": "5",
            "RELAY_RUNNER_SHARDS": "2",
            "RELAY_PER_TEST_TIMEOUT": "120",
            # no upstream checkout: nothing can test the push itself, so the loop runs as the
            # labelled smoke run on the installed torch (without it the job is neutral, no shard)
            "RELAY_SMOKE_UNTESTED": "true",
        },
    )
    try:
        yield stack
    finally:
        stack.stop()


def test_push_is_selected_run_on_spyre_and_reported(
    spyre_loop: Any, github_fixtures: Path, relay_up: Any
) -> None:
    payload = json.loads((github_fixtures / "push/with-new-branch.payload.json").read_bytes())
    assert payload["repository"]["full_name"] == relay_up.UPSTREAM
    delivery_id = str(uuid.uuid4())
    assert (
        spyre_loop.post("push", json.dumps(payload).encode(), delivery_id=delivery_id).status_code
        == 202
    )
    job = spyre_loop.wait_job(delivery_id, timeout=600)
    with session_scope(spyre_loop.database_url) as s:
        selection = s.scalar(select(Selection).where(Selection.job_pk == job.id))
        rows = list(s.scalars(select(TestResult).where(TestResult.job_pk == job.id)))
        assert selection is not None
        counts, fallbacks, plan = selection.stage_counts, selection.fallbacks, selection.plan
    # The push's commits cannot be read without a checkout: the selector says so and falls back
    # to the whole universe, which the budget cuts.
    assert fallbacks and "not readable" in json.dumps(fallbacks)
    tested = job.upstream_under_test
    assert (tested["kind"], tested["smoke"]) == ("installed", True), tested
    assert counts["applicability"]["out"] > 20_000
    assert 0 < counts["budget"]["out"] < 200
    assert plan["counts"]["cut"] > 0, "the budget cut is listed, never hidden"
    assert len(rows) == counts["budget"]["out"] == job.tests_total
    assert all(r.test_id.split("::")[-1].split("_spyre")[0] for r in rows)
    assert {r.spec_mode for r in rows} <= {"xfail", "mandatory_success", "xfail_strict"}
    ran = [r for r in rows if r.outcome in ("passed", "xpassed")]
    assert ran and all((r.device_time_us or 0) > 0 for r in ran)  # simulated device time per test
    gating = [
        r
        for r in rows
        if r.outcome in ("failed", "error", "crashed", "timeout") and r.spec_mode != "xfail"
    ]
    assert job.conclusion == ("failure" if gating else "success")
    detail = httpx.get(f"{spyre_loop.base_url}/api/v1/jobs/{job.id}").json()
    assert detail["test_results"]["total"] == len(rows)
    assert detail["selection"]["stage_counts"] == counts
    cut = httpx.get(
        f"{spyre_loop.base_url}/api/v1/jobs/{job.id}/selection/tests",
        params={"kind": "cut", "limit": 1},
    ).json()
    assert cut["total"] == plan["counts"]["cut"] and cut["items"][0]["reasons"]
    # the split the API shows is the split that ran: for every shard N of the finished job its
    # selected tests and its results are the same tests (and one past the last lists nothing)
    sizes = plan["counts"]["shards"]
    assert len(sizes) >= 1 and sum(sizes) == len(rows)
    for n in range(len(sizes) + 1):
        listed = {
            path: httpx.get(
                f"{spyre_loop.base_url}/api/v1/jobs/{job.id}/{path}",
                params={"shard": n, "limit": 5000},
            ).json()
            for path in ("selection/tests", "results")
        }
        selected = {t["test_id"] for t in listed["selection/tests"]["items"]}
        assert selected == {r["test_id"] for r in listed["results"]["items"]}, n
        assert len(selected) == (sizes[n] if n < len(sizes) else 0), n
