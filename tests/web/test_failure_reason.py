"""A job that fails before it runs tests says why, where people look: the jobs API, the top of
its run page, the CRCR callback's summary and its check run's summary.

The failure is planted where a deployment makes it: a broken planner setting (``RELAY_PLANNER``
naming no planner). In process: the real plan task on a migrated SQLite database, then a
TestClient on the app. In a browser: `relay up` with that setting, a signed pull request, and
the run page in chromium."""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from store.db import session_scope
from store.models import Delivery, Dispatch, Downstream, Job

BROKEN_PLANNER = "tests.support.no_such_planner:plan"
REASON = (
    "planning failed: PlannerSettingError: RELAY_PLANNER='tests.support.no_such_planner:plan' "
    "cannot be loaded: ModuleNotFoundError: No module named 'tests.support.no_such_planner'"
)
EXAMPLE = Path("examples") / "events" / "pull_request.opened.json"


def _failed_plan(
    tmp: Path, monkeypatch: pytest.MonkeyPatch, callback_url: str, repo_root: Path
) -> tuple[Any, int]:
    """Settings over a migrated database holding one delivery and its runner dispatch, planned
    by the real plan task under the broken planner setting: (settings, the job's id)."""
    from config.settings import get_settings, reset_settings_cache
    from store import migrate
    from wire.github.events import normalize
    from workers.plan import PlannerSettingError, plan

    url = f"sqlite:///{tmp / 'relay.sqlite'}"
    migrate.upgrade(url)
    body = (repo_root / EXAMPLE).read_bytes()
    event = normalize(event="pull_request", payload=json.loads(body), delivery_id="d-broken")
    with session_scope(url) as s:
        downstream = Downstream(repo="example/spyre-runner")
        delivery = Delivery(
            delivery_id="d-broken",
            event="pull_request",
            action="opened",
            raw_body=body,
            body_sha256=hashlib.sha256(body).hexdigest(),
            normalized=event.model_dump(mode="json"),
            upstream_payload=json.loads(body),
        )
        s.add_all([downstream, delivery])
        s.flush()
        dispatch = Dispatch(delivery_pk=delivery.id, downstream_pk=downstream.id)
        s.add(dispatch)
        s.commit()
        dispatch_pk = dispatch.id
    for name, value in {
        "RELAY_DATABASE_URL": url,
        "RELAY_VAR_DIR": str(tmp),
        "RELAY_PLANNER": BROKEN_PLANNER,
        "RELAY_BROKER_URL": f"sqla+sqlite:///{tmp}/broker.sqlite",
        "RELAY_ENV": "development",
        "RELAY_CALLBACK_URL": callback_url,
        "RELAY_CALLBACK_TOKEN": "t",
        "RELAY_LOG_JSON": "false",
    }.items():
        monkeypatch.setenv(name, value)
    reset_settings_cache()
    with pytest.raises(PlannerSettingError):
        plan(dispatch_pk)
    with session_scope(url) as s:
        job = s.query(Job).one()
        return get_settings(), job.id


@pytest.fixture
def failed(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    receiver: Any,
    repo_root: Path,
    test_client_class: type,
) -> Iterator[tuple[Any, int, Any]]:
    from config.settings import reset_settings_cache
    from relay.app import create_app
    from store.db import dispose_engines

    settings, job_id = _failed_plan(tmp_path, monkeypatch, receiver.url, repo_root)
    client = test_client_class(create_app(settings))
    try:
        yield client, job_id, settings
    finally:
        client.close()
        dispose_engines()
        reset_settings_cache()


def test_a_planning_failure_says_why_in_the_api_the_page_and_the_callback(
    failed: tuple[Any, int, Any], receiver: Any
) -> None:
    from fanout.checks import job_body

    client, job_id, settings = failed
    detail = client.get(f"/api/v1/jobs/{job_id}").json()
    assert (detail["status"], detail["conclusion"]) == ("completed", "failure")
    assert detail["failure_reason"] == REASON
    assert detail["failure_error"].startswith("Traceback (most recent call last):")
    assert (
        "ModuleNotFoundError: No module named 'tests.support.no_such_planner'"
        in (detail["failure_error"])
    )
    [listed] = client.get("/api/v1/jobs").json()["items"]
    assert listed["failure_reason"] == REASON and "failure_error" not in listed

    page = client.get(f"/runs/{job_id}")
    assert page.status_code == 200
    text = page.text
    top = text.index('id="run-failure"')
    assert top < text.index('id="live"')  # at the top, before the counts and the shards
    shown = re.search(r'<span id="run-failure-reason">([^<]*)</span>', text)
    assert shown is not None and html.unescape(shown.group(1)) == REASON
    assert "No module named" in text[text.index('id="run-failure-error"') :]

    [callback] = [c for c in receiver.calls if c.body["delivery_id"] == "d-broken"]
    workflow = callback.body["workflow"]
    assert (workflow["status"], workflow["conclusion"]) == ("completed", "failure")
    assert workflow["summary"] == REASON
    assert workflow["url"].endswith(f"/api/v1/jobs/{job_id}")

    with session_scope(settings.database_url) as s:
        output = job_body(s.get(Job, job_id))["output"]
    assert output["summary"].splitlines()[0] == REASON


def test_a_job_without_a_failure_has_no_reason(empty_hud: Any) -> None:
    assert empty_hud.get("/api/v1/jobs").json()["items"] == []
    assert (
        "failure_reason"
        in empty_hud.get("/openapi.json").json()["components"]["schemas"]["JobPublic"]["properties"]
    )


#: a stored plan whose one change unit a signal accounted for with no variant of the backend
ACCOUNTED = {
    "stage_counts": {"changes": {"in": 1, "out": 1}, "impact": {"in": 1, "out": 0}},
    "fallbacks": [],
    "plan": {
        "fallback": False,
        "explained": {"torch/_refs/__init__.py::helper": ["operators: ops aten.helper:0"]},
        "counts": {"selected": 0, "cut": 0, "removed": 0},
    },
    "variants": [],
}


@pytest.mark.parametrize(
    ("shards", "outcome", "reason", "selection"),
    [
        (
            [],
            None,
            "no test selected: the plan chose no test to run (its selection funnel says why)",
            None,
        ),
        (
            [["test/test_x.py::test_s"]],
            "skipped",
            "no test ran: 1 planned, none executed (skipped or never run: see its results)",
            None,
        ),
        (
            [],
            None,
            "nothing to test: the change's 1 unit(s) reach no variant this backend runs: "
            "helper (operators: ops aten.helper:0)",
            ACCOUNTED,
        ),
    ],
)
def test_a_job_that_ran_no_test_says_why(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    shards: list[list[str]],
    outcome: str | None,
    reason: str,
    selection: dict[str, Any] | None,
) -> None:
    """Nothing ran: a failure says why; a change that reaches no variant of the backend is no
    failure (its job concludes success, its check run neutral) and says why too."""
    from sqlalchemy import select

    from backends.base import RunnerConfig
    from config.settings import reset_settings_cache
    from fanout.checks import job_body
    from planner import RunPlan
    from store import migrate, scheduling
    from store.jobs import JobKey, create_job, finish_shard
    from store.models import Shard, ShardState
    from store.outcomes import TestOutcome
    from store.results import store_result
    from workers.report import report

    url = f"sqlite:///{tmp_path / 'relay.sqlite'}"
    migrate.upgrade(url)
    for name, value in {
        "RELAY_DATABASE_URL": url,
        "RELAY_VAR_DIR": str(tmp_path),
        "RELAY_ENV": "development",
        "RELAY_BROKER_URL": f"sqla+sqlite:///{tmp_path}/broker.sqlite",
        "RELAY_LOG_JSON": "false",
    }.items():
        monkeypatch.setenv(name, value)
    reset_settings_cache()
    plan = RunPlan(shards=shards, runner=RunnerConfig(rootdir=str(tmp_path), pytest_args=["-q"]))
    key = JobKey(
        delivery_id="d-none", repo="local/spyre", run_id="1", run_attempt="1", job_name="spyre"
    )
    try:
        with session_scope(url) as s:
            job, _ = create_job(
                s,
                key=key,
                dispatch_pk=None,
                event_type="pull_request",
                workflow_name="w",
                url="",
                head_sha=None,
                pr_number=None,
                shards=plan.shards,
                selection=selection or plan.stored(),
            )
            job_pk = job.id
            if outcome is not None:
                store_result(
                    s, job_pk=job_pk, shard_pk=None, outcome=TestOutcome(shards[0][0], outcome)
                )
            for _ in list(s.scalars(select(Shard.id).where(Shard.job_pk == job_pk))):
                # as a shard worker does: claim the next shard, run it (here: nothing ran)
                claimed = scheduling.claim_next(s, owner="h:1:test", task_id="test").shard
                assert claimed is not None
                finish_shard(s, shard_pk=claimed.id, state=ShardState.DONE)
        assert report(job_pk) == ("success" if selection else "failure")
        with session_scope(url) as s:
            done = s.get(Job, job_pk)
            assert done is not None and (done.failure_reason, done.failure_error) == (reason, None)
            output = job_body(done)["output"]
        assert output["summary"].splitlines()[0] == reason
        assert output["title"].startswith("neutral" if selection else "failure")
    finally:
        reset_settings_cache()


# -- in chromium, on `relay up` -------------------------------------------------------------


@pytest.fixture(scope="module")
def broken_stack(
    tmp_path_factory: pytest.TempPathFactory, relay_up: Any, sample_runs: Any, receiver: Any
) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("broken-planner")
    env = {
        **sample_runs.runner_env(tmp, receiver.url),
        "RELAY_PLANNER": BROKEN_PLANNER,
        "RELAY_UPSTREAM_REPO": "pytorch/pytorch",  # the example event's repository
    }
    with relay_up.running("sqlite+embedded", tmp, extra_env=env) as stack:
        yield stack


@pytest.fixture(scope="module")
def broken_job(broken_stack: Any, repo_root: Path) -> Any:
    """The job of the example pull request on the stack whose planner setting is broken."""
    return broken_stack.wait_job(broken_stack.submit((repo_root / EXAMPLE).read_bytes()))


def test_a_stack_with_a_broken_planner_says_why_in_its_api_and_callback(
    broken_stack: Any, broken_job: Any, receiver: Any
) -> None:
    assert (broken_job.status, broken_job.conclusion) == ("completed", "failure")
    detail = httpx.get(f"{broken_stack.base_url}/api/v1/jobs/{broken_job.id}").json()
    assert detail["failure_reason"] == REASON
    assert "PlannerSettingError" in detail["failure_error"]
    completed = broken_stack.wait_for(
        lambda: (
            [c for c in receiver.calls if c.body["delivery_id"] == broken_job.delivery_id] or None
        ),
        what="the completed callback",
    )
    [workflow] = [c.body["workflow"] for c in completed]  # one callback: it never started
    assert (workflow["status"], workflow["conclusion"]) == ("completed", "failure")
    assert workflow["summary"] == REASON
    assert workflow["url"].endswith(f"/api/v1/jobs/{broken_job.id}")


def test_the_run_page_shows_why_planning_failed_in_chromium(
    tab_on: Any, broken_stack: Any, broken_job: Any
) -> None:
    from playwright.sync_api import expect

    tab = tab_on(broken_stack.base_url)
    tab.goto(f"/runs/{broken_job.id}")
    expect(tab.page.locator("#run-failure-reason")).to_have_text(REASON)
    expect(tab.page.locator("#run-failure")).to_be_visible()
    tab.clean()
