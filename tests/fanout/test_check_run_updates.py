"""An L4 check run follows its job through an outbox (issue #17): the callback's transaction
marks the update, the outbox publisher hands it to a worker, the worker PATCHes GitHub with the
newest state, retried like the creation and dead-lettered in ``GET /api/v1/dispatches``. The
callback request asks neither GitHub nor the broker anything."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from wire.crcr import callback as crcr

GATE = "org/gate"


def _body(call: Any, status: str, conclusion: str | None = None, total: int = 4) -> dict[str, Any]:
    """A CRCR callback of the job the recorded dispatch ``call`` started."""
    client_payload = call.body["client_payload"]
    now = datetime.now(UTC)
    body = crcr.build(
        event_type="pull_request",
        delivery_id=client_payload["delivery_id"],
        payload=client_payload["payload"],
        status=status,  # type: ignore[arg-type]
        workflow_name="upstream",
        url="https://ci/run/7",
        run_id="7",
        run_attempt="1",
        job_name="test",
        started_at=now,
        completed_at=now,
        conclusion=conclusion,  # type: ignore[arg-type]
        test_results=crcr.TestCounts(passed=total, failed=0, total=total)
        if status == "completed"
        else None,
    )
    body["crcr_relay"] = client_payload["crcr_relay"]
    return body


def _pr(example_events: Path, repo: str | None = None) -> dict[str, Any]:
    payload = json.loads((example_events / "pull_request.opened.json").read_text())
    if repo is not None:
        payload["repository"]["full_name"] = repo
    return payload


# --- in process (the bench: the app under TestClient, the sender's code called directly)


@pytest.fixture(params=["sqlite", "postgres"])
def gate(request: pytest.FixtureRequest, bench: Callable[..., Any], example_events: Path) -> Any:
    """A bench with one L4 downstream whose PR's dispatch and queued check run were sent; the
    app's broker is a port nothing listens on (the request must not need it)."""
    b = bench({"L4": [GATE]}, database=request.param, broker_url="redis://127.0.0.1:9/0")
    assert b.post("pull_request", _pr(example_events)).status_code == 202
    b.settle()
    return b


def _post(b: Any, issuer: Any, body: dict[str, Any]) -> Any:
    return b.client.post(
        "/github/callback", json=body, headers={"Authorization": f"Bearer {issuer.mint(GATE)}"}
    )


def _row(b: Any) -> dict[str, Any]:
    (row,) = b.client.get("/api/v1/dispatches").json()["items"]
    return row


def test_a_callback_marks_the_update_in_its_transaction_and_the_publisher_sends_it(
    gate: Any, issuer: Any, tmp_path: Path
) -> None:
    """With the app's broker unreachable the callback still answers 200 and its update is in the
    database; the publisher (on a broker that works) publishes it once, the worker's code sends
    it."""
    from kombu import Connection

    from config.broker import CONTROL_QUEUE, TASK_CHECK_RUN, make_producer
    from fanout.checks import update_for_dispatch
    from workers.publish import Publisher

    (call,) = gate.github.dispatches(GATE)
    (run,) = gate.github.check_runs.values()
    assert _post(gate, issuer, _body(call, "in_progress")).json() == {
        "ok": True,
        "status": "in_progress",
    }
    row = _row(gate)
    assert (row["check_update_state"], row["check_update_seq"]) == ("pending", 1)
    assert run["status"] == "queued" and gate.github.check_run_updates() == []

    working = gate.settings.model_copy(
        update={"broker_url": f"sqla+sqlite:///{tmp_path}/working-broker.sqlite"}
    )
    publisher = Publisher(working, make_producer(working))
    assert publisher.publish_check_updates() == 1
    assert publisher.publish_check_updates() == 0  # published once
    with Connection(working.broker_url) as conn:
        queue = conn.SimpleQueue(CONTROL_QUEUE, no_ack=True)
        messages = []
        try:
            while True:
                messages.append(queue.get(timeout=1))
        except queue.Empty:
            pass
        queue.close()
    assert [(m.headers["task"], m.payload[0]) for m in messages] == [(TASK_CHECK_RUN, [row["id"]])]
    pk = row["id"]
    assert update_for_dispatch(gate.settings, gate.github_api(), pk).state == "done"
    assert run["status"] == "in_progress" and run["details_url"] == "https://ci/run/7"
    assert _row(gate)["check_update_state"] == "done"


def test_the_check_run_says_which_upstream_the_downstream_tested(gate: Any, issuer: Any) -> None:
    """The callback's summary (the downstream's upstream under test) is on the check run."""
    (call,) = gate.github.dispatches(GATE)
    (run,) = gate.github.check_runs.values()
    tested = "upstream under test: torch 2.14.1+git5c4886908584 in its own environment"
    body = _body(call, "completed", "success")
    body["workflow"]["summary"] = tested
    assert _post(gate, issuer, body).status_code == 200
    gate.settle()
    assert (run["status"], run["conclusion"]) == ("completed", "success")
    assert run["output"]["summary"] == f"4 passed, 0 failed, 0 skipped of 4\n{tested}"


def test_duplicates_make_no_update_and_a_racing_transition_is_sent_after(
    gate: Any, issuer: Any
) -> None:
    """A sender holds the in_progress update while the job completes: nobody else may send
    meanwhile (an older state never lands after a newer one), its finish does not mark the
    update done, and the completion goes out next. Duplicates add nothing."""
    from fanout.checks import job_body
    from store import check_updates
    from store.db import session_scope
    from store.models import CheckUpdateState, Job

    (call,) = gate.github.dispatches(GATE)
    (run,) = gate.github.check_runs.values()
    for _ in range(3):
        assert _post(gate, issuer, _body(call, "in_progress")).status_code == 200
    pk = _row(gate)["id"]
    assert _row(gate)["check_update_seq"] == 1  # one transition
    with session_scope(gate.settings.database_url) as session:
        claimed = check_updates.claim(session, pk=pk, lease_seconds=60)
        assert claimed is not None and claimed.seq == 1
        assert check_updates.claim(session, pk=pk, lease_seconds=60) is None
        job = session.get(Job, claimed.job_pk)
        assert job is not None
        in_progress = job_body(job)
    # the job completes while the in_progress PATCH is on its way
    assert _post(gate, issuer, _body(call, "completed", "success")).status_code == 200
    row = _row(gate)
    assert (row["check_update_state"], row["check_update_seq"]) == ("updating", 2)
    gate.github_api().update_check_run(
        gate.settings.upstream_repo, claimed.check_run_id, in_progress
    )
    assert run["status"] == "in_progress"
    with session_scope(gate.settings.database_url) as session:
        state = check_updates.finish(session, pk=pk, seq=claimed.seq, state=CheckUpdateState.DONE)
    assert state == "pending"  # not done: the completion is still to show
    gate.settle()
    assert (run["status"], run["conclusion"]) == ("completed", "success")
    for _ in range(2):
        answer = _post(gate, issuer, _body(call, "completed", "success"))
        assert answer.json()["status"] == "duplicate"
    gate.settle()
    assert [c.body["status"] for c in gate.github.check_run_updates()] == [
        "in_progress",
        "completed",
    ]
    row = _row(gate)
    assert (row["check_update_state"], row["check_update_seq"]) == ("done", 2)


def test_an_update_failing_is_retried_then_dead_then_retried_by_the_operator(
    bench: Callable[..., Any], issuer: Any, example_events: Path, github_answers: Any
) -> None:
    b = bench({"L4": [GATE]}, operator_token="op-token-for-tests", dispatch_max_attempts=3)
    upstream = b.settings.upstream_repo
    assert b.post("pull_request", _pr(example_events)).status_code == 202
    b.settle()
    (call,) = b.github.dispatches(GATE)
    (run,) = b.github.check_runs.values()
    b.github.script(
        f"check-run-update:{upstream}",
        github_answers.server_error(502),
        github_answers.rate_limited(retry_after=0.1),
        github_answers.server_error(503),
    )
    assert _post(b, issuer, _body(call, "in_progress")).status_code == 200
    b.settle()
    row = _row(b)
    assert (row["state"], row["check_state"], row["check_update_state"]) == (
        "sent",
        "created",
        "dead",
    )
    assert row["check_update_attempts"] == 3
    assert "3 attempts spent" in row["check_update_error"] and "503" in row["check_update_error"]
    assert run["status"] == "queued"
    retried = b.client.post(
        f"/api/v1/dispatches/{row['id']}/retry",
        headers={"Authorization": "Bearer op-token-for-tests"},
    )
    assert retried.status_code == 200, retried.text
    b.settle()
    assert run["status"] == "in_progress"
    assert _row(b)["check_update_state"] == "done"


def test_the_sweeper_hands_back_a_lost_message_and_a_dead_sender(gate: Any, issuer: Any) -> None:
    from datetime import timedelta

    from store import check_updates
    from store.db import session_scope
    from store.models import utcnow

    (call,) = gate.github.dispatches(GATE)
    assert _post(gate, issuer, _body(call, "in_progress")).status_code == 200
    pk = _row(gate)["id"]
    later = utcnow() + timedelta(seconds=60)
    with session_scope(gate.settings.database_url) as session:
        assert check_updates.unpublished(session) == [pk]
        check_updates.mark_published(session, pks=[pk])
        assert check_updates.unpublished(session) == []  # its message is out
        assert check_updates.release_lost(session, older_than=utcnow() - timedelta(seconds=30)) == 0
        assert check_updates.release_lost(session, older_than=later) == 1  # ... and was lost
        assert check_updates.unpublished(session) == [pk]
        assert check_updates.claim(session, pk=pk, lease_seconds=30) is not None
        assert check_updates.release_lost(session, older_than=utcnow()) == 0  # it is sending
        assert check_updates.release_lost(session, older_than=later) == 1  # its lease ran out
        assert check_updates.unpublished(session) == [pk]
    gate.settle()
    assert next(iter(gate.github.check_runs.values()))["status"] == "in_progress"


def test_the_sweepers_timeout_is_shown_on_the_check_run(
    bench: Callable[..., Any], issuer: Any, example_events: Path
) -> None:
    from datetime import timedelta

    from fanout.sweep import sweep_timeouts

    b = bench({"L4": [GATE]}, policy="defaults:\n  run_timeout: 600\n")
    assert b.post("pull_request", _pr(example_events)).status_code == 202
    b.settle()
    (call,) = b.github.dispatches(GATE)
    (run,) = b.github.check_runs.values()
    assert _post(b, issuer, _body(call, "in_progress")).status_code == 200
    b.settle()
    assert run["status"] == "in_progress"
    counts, _ = sweep_timeouts(b.settings, now=datetime.now(UTC) + timedelta(seconds=700))
    assert counts["running_timed_out"] == 1
    assert _row(b)["check_update_state"] == "pending"  # marked with the timeout itself
    b.settle()
    assert (run["status"], run["conclusion"]) == ("completed", "timed_out")


# --- end to end: `relay up` (uvicorn, the real Celery workers with the publisher thread, beat)


def _env(tmp_path: Path, issuer: Any, fake_github: Any, **extra: str) -> dict[str, str]:
    allow = tmp_path / "allowlist.yml"
    allow.write_text(f"L4:\n  - {GATE}\n")
    return {
        "RELAY_ALLOWLIST_SOURCE": str(allow),
        "RELAY_GITHUB_API_URL": fake_github.url,
        "RELAY_GITHUB_APP_ID": fake_github.app_id,
        "RELAY_GITHUB_APP_PRIVATE_KEY": fake_github.private_key_pem,
        "RELAY_OIDC_ISSUERS": json.dumps({issuer.url: issuer.jwks_url}),
        "RELAY_DISPATCH_BACKOFF_SECONDS": "0.2",
        "RELAY_DISPATCH_BACKOFF_MAX_SECONDS": "0.5",
        "RELAY_SWEEP_AFTER_SECONDS": "4",
        **extra,
    }


def _dispatched(stack: Any, relay_up: Any, fake_github: Any, example_events: Path) -> Any:
    """Submit a PR webhook; wait for its dispatch and its queued check run."""
    payload = _pr(example_events, relay_up.UPSTREAM)
    fake_github.pr_files[(relay_up.UPSTREAM, payload["number"])] = ["torch/a.py"]
    stack.submit(json.dumps(payload).encode())
    stack.wait_for(lambda: fake_github.dispatches(GATE), what="the dispatch")
    stack.wait_for(lambda: fake_github.check_runs, what="the queued check run")
    (call,) = fake_github.dispatches(GATE)
    return call


def _callback(stack: Any, issuer: Any, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{stack.base_url}/github/callback",
        json=body,
        timeout=30,
        headers={"Authorization": f"Bearer {issuer.mint(GATE)}"},
    )


@pytest.mark.parametrize("kind", ["sqlite+embedded", "postgres+redis"])
def test_relay_up_updates_retries_and_dead_letters_check_runs(
    kind: str,
    tmp_path: Path,
    relay_up: Any,
    issuer: Any,
    fake_github: Any,
    example_events: Path,
    github_answers: Any,
) -> None:
    """The in_progress update meets three 502s: retried by the worker, then a dead letter in the
    API; the completion (a new transition) is sent, its duplicate is not."""
    env = _env(tmp_path, issuer, fake_github, RELAY_DISPATCH_MAX_ATTEMPTS="3")
    with relay_up.running(kind, tmp_path, extra_env=env) as stack:
        call = _dispatched(stack, relay_up, fake_github, example_events)
        (run,) = fake_github.check_runs.values()
        fake_github.script(
            f"check-run-update:{relay_up.UPSTREAM}", *[github_answers.server_error()] * 3
        )
        assert _callback(stack, issuer, _body(call, "in_progress")).status_code == 200

        def dead() -> dict[str, Any] | None:
            (row,) = httpx.get(f"{stack.base_url}/api/v1/dispatches").json()["items"]
            return row if row["check_update_state"] == "dead" else None

        row = stack.wait_for(dead, what="the update's dead letter")
        assert row["check_update_attempts"] == 3
        assert "3 attempts spent" in row["check_update_error"]
        assert "HTTP 502" in row["check_update_error"]
        assert len(fake_github.check_run_updates(502)) == 3 and run["status"] == "queued"

        for _ in range(2):
            assert _callback(stack, issuer, _body(call, "completed", "success")).status_code == 200
        stack.wait_for(lambda: run["status"] == "completed", what="the completed check run")
        assert run["conclusion"] == "success"
        time.sleep(2)  # nothing more arrives: the duplicate made no update
        assert len(fake_github.check_run_updates()) == 1
        (row,) = httpx.get(f"{stack.base_url}/api/v1/dispatches").json()["items"]
        assert (row["check_update_state"], row["check_update_seq"]) == ("done", 2)


def test_a_callback_during_a_broker_outage_still_updates_the_check_run(
    tmp_path: Path,
    own_redis: Any,
    postgres_url: str,
    relay_up: Any,
    issuer: Any,
    fake_github: Any,
    example_events: Path,
) -> None:
    """The broker dies, the downstream reports: 200, and once the broker is back the worker
    brings the check run up to date (before #17 the request's publish failed and the check run
    stayed queued for good)."""
    env = _env(tmp_path, issuer, fake_github)
    stack = relay_up.start(
        tmp=tmp_path, database_url=postgres_url, broker_url=own_redis.url, extra_env=env
    )
    try:
        call = _dispatched(stack, relay_up, fake_github, example_events)
        (run,) = fake_github.check_runs.values()
        own_redis.stop()
        answer = _callback(stack, issuer, _body(call, "in_progress"))
        assert answer.status_code == 200 and answer.json()["status"] == "in_progress"
        time.sleep(1)
        assert run["status"] == "queued"
        own_redis.start()
        stack.wait_for(
            lambda: run["status"] == "in_progress", timeout=120, what="the check run's update"
        )
        assert run["details_url"] == "https://ci/run/7"
        assert len(fake_github.check_run_updates()) == 1
    finally:
        stack.stop()
