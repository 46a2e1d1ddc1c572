"""L3/L4 check runs (queued at dispatch, updated in place from the job) and the relay role's
sweeper (never started within the start timeout, in progress past the run timeout)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from wire.crcr import callback as crcr


def _pr(example_events: Path, labels: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    payload = json.loads((example_events / "pull_request.opened.json").read_text())
    payload["pull_request"]["labels"] += [{"name": n} for n in labels]
    return payload


def _callback(
    b: Any,
    issuer: Any,
    repo: str,
    status: str,
    conclusion: str | None = None,
    total: int = 10,
    failed: int = 0,
) -> Any:
    (call,) = b.github.dispatches(repo)
    client_payload = call.body["client_payload"]
    now = datetime.now(UTC)
    body = crcr.build(
        event_type="pull_request",
        delivery_id=client_payload["delivery_id"],
        payload=client_payload["payload"],
        status=status,  # type: ignore[arg-type]
        workflow_name="upstream",
        url="https://ci/run/3",
        run_id="3",
        run_attempt="1",
        job_name="test",
        started_at=now,
        completed_at=now,
        conclusion=conclusion,  # type: ignore[arg-type]
        test_results=crcr.TestCounts(passed=total - failed, failed=failed, total=total)
        if status == "completed"
        else None,
    )
    body["crcr_relay"] = client_payload["crcr_relay"]
    return b.client.post(
        "/github/callback", json=body, headers={"Authorization": f"Bearer {issuer.mint(repo)}"}
    )


def test_l4_check_run_is_queued_at_dispatch_and_follows_the_job(
    bench: Callable[..., Any], issuer: Any, example_events: Path
) -> None:
    policy = "downstreams:\n  org/gate:\n    workflow: upstream-tests\n"
    b = bench({"L2": ["org/hud"], "L3": ["org/device"], "L4": ["org/gate"]}, policy=policy)
    payload = _pr(example_events)
    assert b.post("pull_request", payload).status_code == 202
    b.settle()
    assert len(b.github.dispatches()) == 3
    (run,) = b.github.check_runs.values()  # L4 only: no device label for the L3 downstream
    assert (run["name"], run["status"], run["head_sha"]) == (
        "crcr/org/gate/upstream-tests",
        "queued",
        payload["pull_request"]["head"]["sha"],
    )

    assert _callback(b, issuer, "org/gate", "in_progress").status_code == 200
    b.settle()
    assert run["status"] == "in_progress" and run["details_url"] == "https://ci/run/3"
    assert _callback(b, issuer, "org/gate", "completed", "success", total=0).status_code == 200
    b.settle()
    assert (run["status"], run["conclusion"]) == ("completed", "neutral")
    assert run["output"]["title"] == "neutral (success reported, but no test ran)"
    assert run["external_id"] == f"3:{payload['number']}"


def test_l3_check_run_only_with_the_device_label(
    bench: Callable[..., Any], example_events: Path
) -> None:
    b = bench({"L3": ["org/device"]})
    assert b.post("pull_request", _pr(example_events, ["ciflow/crcr/spyre"])).status_code == 202
    b.settle()
    (run,) = b.github.check_runs.values()
    assert (run["name"], run["status"]) == ("crcr/org/device", "queued")


def test_sweeper_times_out_never_started_and_overlong_jobs(
    bench: Callable[..., Any], issuer: Any, example_events: Path
) -> None:
    from sqlalchemy import select

    from fanout.sweep import sweep_timeouts
    from store.db import session_scope
    from store.models import Job

    policy = "defaults:\n  start_timeout: 600\n  run_timeout: 3600\n"
    b = bench({"L2": ["org/idle", "org/slow"]}, policy=policy)
    assert b.post("pull_request", _pr(example_events)).status_code == 202
    b.settle()
    assert _callback(b, issuer, "org/slow", "in_progress").status_code == 200
    now = datetime.now(UTC)
    assert sweep_timeouts(b.settings, now=now + timedelta(seconds=60))[0] == {
        "never_started_timed_out": 0,
        "running_timed_out": 0,
    }
    counts, jobs = sweep_timeouts(b.settings, now=now + timedelta(seconds=700))
    assert counts == {"never_started_timed_out": 1, "running_timed_out": 0} and len(jobs) == 1
    counts, jobs = sweep_timeouts(b.settings, now=now + timedelta(seconds=3700))
    assert counts == {"never_started_timed_out": 0, "running_timed_out": 1}
    with session_scope(b.settings.database_url) as session:
        got = {(j.repo, j.job_name, j.status, j.conclusion) for j in session.scalars(select(Job))}
    assert got == {
        ("org/idle", "(never started)", "completed", "timed_out"),
        ("org/slow", "test", "completed", "timed_out"),
    }
    late = _callback(b, issuer, "org/slow", "completed", "success")
    assert late.status_code == 409  # the sweeper's timed_out stands
    assert sweep_timeouts(b.settings, now=now + timedelta(days=1))[0] == {
        "never_started_timed_out": 0,
        "running_timed_out": 0,
    }


def test_a_failed_check_run_creation_is_retried_then_dead_lettered(
    bench: Callable[..., Any], github_answers: Any, example_events: Path
) -> None:
    """GitHub fails the check run twice (502, then rate-limited): the dispatch stands, the check
    run is created on the third try. A refused one (422) is a dead letter in the API, put back
    by the operator's retry."""
    b = bench({"L4": ["org/gate"]}, operator_token="op-token-for-tests")
    upstream = b.settings.upstream_repo
    b.github.script(
        f"check-runs:{upstream}",
        github_answers.server_error(),
        github_answers.rate_limited(retry_after=0.1),
    )
    assert b.post("pull_request", _pr(example_events)).status_code == 202
    b.settle()
    assert len(b.github.dispatches()) == 1
    (run,) = b.github.check_runs.values()
    assert run["status"] == "queued"
    (row,) = b.client.get("/api/v1/dispatches").json()["items"]
    assert (row["state"], row["check_state"], row["check_attempts"]) == ("sent", "created", 3)
    assert row["check_run_id"] == 1 and row["check_error"] is None

    refused = github_answers.Scripted(status=422, body={"message": "Invalid head_sha"})
    b.github.script(f"check-runs:{upstream}", refused)
    assert b.post("pull_request", _pr(example_events)).status_code == 202
    b.settle()
    dead = b.client.get("/api/v1/dispatches", params={"limit": 1}).json()["items"][0]
    assert (dead["state"], dead["check_state"], dead["check_attempts"]) == ("sent", "dead", 1)
    assert "refused" in dead["check_error"] and "HTTP 422" in dead["check_error"]
    assert len(b.github.check_runs) == 1
    retried = b.client.post(
        f"/api/v1/dispatches/{dead['id']}/retry",
        headers={"Authorization": "Bearer op-token-for-tests"},
    )
    assert retried.status_code == 200, retried.text
    b.settle()
    assert len(b.github.check_runs) == 2
    assert len(b.github.dispatches()) == 2  # the dispatch itself was not sent again


def test_an_open_demotion_pr_holds_new_check_runs_back(
    bench: Callable[..., Any], example_events: Path
) -> None:
    """CRCR's freeze: an L3 downstream whose crcr-demotion/<repo> PR is open upstream gets its
    dispatches but no new check run; once the PR is closed, check runs come back. L4 is not
    frozen."""
    from fanout.demotion import reconcile

    b = bench({"L3": ["org/device"], "L4": ["org/gate"]})
    upstream = b.settings.upstream_repo
    b.github.open_pulls[upstream].add("crcr-demotion/org/device")
    labelled = _pr(example_events, ["ciflow/crcr/spyre"])
    assert b.post("pull_request", labelled).status_code == 202  # registers the downstreams
    b.settle()
    assert sorted(r["name"] for r in b.github.check_runs.values()) == [
        "crcr/org/device",
        "crcr/org/gate",
    ]
    assert reconcile(b.settings, b.github_api()) == {"demoted": 1, "restored": 0, "unknown": 0}
    assert reconcile(b.settings, b.github_api())["demoted"] == 0  # recorded once

    assert b.post("pull_request", labelled).status_code == 202
    b.settle()
    assert len(b.github.dispatches("org/device")) == 2  # still dispatched
    assert sorted(r["name"] for r in b.github.check_runs.values()) == [
        "crcr/org/device",
        "crcr/org/gate",
        "crcr/org/gate",
    ]
    held = b.client.get("/api/v1/dispatches", params={"repo": "org/device"}).json()["items"][0]
    assert held["check_state"] == "suppressed"
    assert "crcr-demotion/org/device is open" in held["check_error"]

    b.github.open_pulls[upstream].clear()
    assert reconcile(b.settings, b.github_api()) == {"demoted": 0, "restored": 1, "unknown": 0}
    assert b.post("pull_request", labelled).status_code == 202
    b.settle()
    names = [r["name"] for r in b.github.check_runs.values()]
    assert names.count("crcr/org/device") == 2
