"""Durable fan-out through the fake GitHub API over HTTP: the outbox written with the delivery,
retries with backoff honouring Retry-After, dead letters and their retry, the client_payload
(CRCR's shape, the dispatch token, the changed files), installation tokens minted and cached."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fanout import dispatch_token


def _pr(example_events: Path) -> dict[str, Any]:
    return json.loads((example_events / "pull_request.opened.json").read_text())


def test_fan_out_to_20_downstreams_some_failing_then_recovering(
    bench: Callable[..., Any], example_events: Path, github_answers: Any
) -> None:
    answers = github_answers
    repos = [f"org{i % 2}/down{i:02d}" for i in range(20)]
    b = bench({"L2": repos})
    payload = _pr(example_events)
    number = payload["number"]
    b.github.pr_files[("pytorch/pytorch", number)] = ["torch/a.py", "aten/b.cpp"]
    for repo in repos[:5]:
        b.github.script(repo, answers.server_error(502), answers.server_error(503))
    for repo in repos[5:7]:
        b.github.script(repo, answers.rate_limited(retry_after=1))
    b.github.script(repos[7], answers.slow(0.3))

    answer = b.post("pull_request", payload, delivery_id="fan-20")
    assert answer.status_code == 202, answer.text
    rows = b.dispatches()
    assert len(rows) == 20 and {d.state for d, _, _ in rows} == {"pending"}
    assert {r for _, r, _ in rows} == set(repos)

    b.settle()
    assert set(b.states().values()) == {"sent"}
    sent = b.github.dispatches()
    assert sorted(c.path for c in sent) == sorted(f"/repos/{r}/dispatches" for r in repos)
    attempts = {repo: d.attempts for d, repo, _ in b.dispatches()}
    assert [attempts[r] for r in repos[:8]] == [3] * 5 + [2, 2, 1]
    assert all(attempts[r] == 1 for r in repos[8:])
    # a rate-limited downstream waited Retry-After (1 s) before its second attempt
    for repo in repos[5:7]:
        calls = [c.at for c in b.github.calls if c.path == f"/repos/{repo}/dispatches"]
        assert calls[1] - calls[0] >= 1.0
    # one installation token per owner (org0, org1, and pytorch for the PR's files), minted
    # once and reused for every call
    assert len(b.github.token_requests()) == 3
    # the PR's files were asked of GitHub once for the twenty downstreams
    assert len([c for c in b.github.calls if c.path.endswith(f"/pulls/{number}/files")]) == 1

    body = sent[0].body
    assert body["event_type"] == "pull_request"
    client_payload = body["client_payload"]
    assert client_payload["event_type"] == "pull_request"
    assert client_payload["delivery_id"] == "fan-20"
    assert client_payload["payload"] == payload  # the upstream body verbatim
    ours = client_payload["crcr_relay"]
    assert ours["changed_files"] == ["torch/a.py", "aten/b.cpp"]
    assert (ours["changed_files_count"], ours["changed_files_truncated"]) == (2, False)
    assert ours["merged"] is False
    claims = dispatch_token.verify(
        ours["dispatch_token"], secret=b.settings.dispatch_token_secret.get_secret_value()
    )
    repo = sent[0].path.split("/")[2] + "/" + sent[0].path.split("/")[3]
    assert (claims.repo, claims.delivery_id, claims.pr_number) == (repo, "fan-20", number)
    assert claims.head_sha == payload["pull_request"]["head"]["sha"]


def test_a_redelivered_webhook_adds_no_dispatch(
    bench: Callable[..., Any], example_events: Path
) -> None:
    b = bench({"L2": ["org/a", "org/b"]})
    payload = _pr(example_events)
    assert b.post("pull_request", payload, delivery_id="same").status_code == 202
    assert b.post("pull_request", payload, delivery_id="same").status_code == 200
    assert len(b.dispatches()) == 2


def test_dead_letters_and_their_retry(
    bench: Callable[..., Any], example_events: Path, github_answers: Any
) -> None:
    answers = github_answers
    b = bench({"L2": ["org/flaky", "org/gone"]}, operator_token="op-secret")
    b.github.script("org/flaky", *[answers.server_error(500)] * 4)
    b.github.script("org/gone", answers.server_error(404))
    assert b.post("pull_request", _pr(example_events)).status_code == 202
    b.settle()
    dead = b.client.get("/api/v1/dispatches", params={"state": "dead"}).json()["items"]
    by_repo = {d["downstream"]: d for d in dead}
    assert set(by_repo) == {"org/flaky", "org/gone"}
    assert by_repo["org/flaky"]["attempts"] == 4
    assert by_repo["org/flaky"]["last_error"].startswith("4 attempts spent: repository_dispatch")
    assert by_repo["org/gone"]["attempts"] == 1  # a 404 is not retried
    assert by_repo["org/gone"]["last_error"].startswith("refused: ")

    pk = by_repo["org/flaky"]["id"]
    url = f"/api/v1/dispatches/{pk}/retry"
    assert b.client.post(url).status_code == 401
    assert b.client.post(url, headers={"Authorization": "Bearer nope"}).status_code == 403
    assert b.states()["org/flaky"] == "dead"  # refused calls changed nothing
    ok = b.client.post(url, headers={"Authorization": "Bearer op-secret"})
    assert ok.status_code == 200 and ok.json()["state"] == "pending"
    again = b.client.post(url, headers={"Authorization": "Bearer op-secret"})
    assert again.status_code == 409
    b.settle()
    assert b.states() == {"org/flaky": "sent", "org/gone": "dead"}


def test_changed_files_are_cut_to_fit_60_kb(
    bench: Callable[..., Any], example_events: Path
) -> None:
    b = bench({"L2": ["org/a"]})
    payload = _pr(example_events)
    files = [f"torch/very/long/path/number/{i:05d}/module_with_a_long_name.py" for i in range(3000)]
    b.github.pr_files[("pytorch/pytorch", payload["number"])] = files
    assert b.post("pull_request", payload).status_code == 202
    b.settle()
    (call,) = b.github.dispatches()
    client_payload = call.body["client_payload"]
    assert len(json.dumps(client_payload, separators=(",", ":")).encode()) <= 60_000
    ours = client_payload["crcr_relay"]
    assert ours["changed_files_truncated"] is True
    assert ours["changed_files_count"] == 3000
    assert 0 < len(ours["changed_files"]) < 3000
    assert ours["changed_files"] == files[: len(ours["changed_files"])]


def test_installation_tokens_are_renewed_before_they_expire(
    bench: Callable[..., Any], example_events: Path
) -> None:
    b = bench({"L2": ["org/a", "org/b"]})
    b.github.token_lifetime = 200  # under the 300 s margin: never reused
    assert b.post("pull_request", _pr(example_events)).status_code == 202
    b.settle()
    # two dispatches and one files call, each with a fresh token
    assert len(b.github.token_requests()) == 3
    assert len(b.github.dispatches()) == 2


def test_paths_policy_skips_at_send_with_the_reason(
    bench: Callable[..., Any], example_events: Path
) -> None:
    policy = "downstreams:\n  org/docs:\n    paths: ['docs/**']\n"
    b = bench({"L2": ["org/docs", "org/all"]}, policy=policy)
    payload = _pr(example_events)
    b.github.pr_files[("pytorch/pytorch", payload["number"])] = ["torch/a.py"]
    assert b.post("pull_request", payload).status_code == 202
    b.settle()
    rows = {repo: d for d, repo, _ in b.dispatches()}
    assert rows["org/docs"].state == "skipped"
    assert rows["org/docs"].last_error == "no changed file matches docs/**"
    assert rows["org/all"].state == "sent"


def test_a_broker_outage_loses_no_dispatch(bench: Callable[..., Any], example_events: Path) -> None:
    b = bench({"L2": ["org/a", "org/b", "org/c"]})
    payload = _pr(example_events)
    for i in range(5):
        assert b.post("pull_request", payload, delivery_id=f"outage-{i}").status_code == 202
    assert len(b.dispatches()) == 15  # stored with their deliveries, whatever the broker does
    b.settle()  # what the sweeper sends once the broker is back
    assert len(b.github.dispatches()) == 15


def test_max_in_flight_holds_dispatches_back_without_spending_attempts(
    bench: Callable[..., Any], issuer: Any, example_events: Path
) -> None:
    from sqlalchemy import update

    from store.db import session_scope
    from store.models import Dispatch

    b = bench({"L2": ["org/busy"]}, policy="downstreams:\n  org/busy:\n    max_in_flight: 1\n")
    payload = _pr(example_events)
    assert b.post("pull_request", payload, delivery_id="busy-1").status_code == 202
    assert b.post("pull_request", payload, delivery_id="busy-2").status_code == 202
    b.send_due()
    rows = {delivery: d for d, _, delivery in b.dispatches()}
    assert rows["busy-1"].state == "sent"
    assert (rows["busy-2"].state, rows["busy-2"].attempts) == ("pending", 0)
    assert rows["busy-2"].last_error == "1 jobs in flight (max 1)"
    (call,) = b.github.dispatches()
    body = {
        **call.body["client_payload"],
        "workflow": {
            "status": "completed",
            "conclusion": "success",
            "name": "w",
            "url": "u",
            "run_id": "1",
            "run_attempt": "1",
            "job_name": "j",
            "check_run_id": "1-1",
            "completed_at": "2026-12-01T00:00:00Z",
        },
    }
    token = {"Authorization": f"Bearer {issuer.mint('org/busy')}"}
    assert b.client.post("/github/callback", json=body, headers=token).status_code == 200
    with session_scope(b.settings.database_url) as session:  # its wait is over
        session.execute(update(Dispatch).values(next_attempt_at=None))
    b.settle()
    assert {d: r.state for r, _, d in b.dispatches()} == {"busy-1": "sent", "busy-2": "sent"}


def test_a_crcr_dispatch_is_forwarded_from_the_stored_event_never_the_raw_body(
    bench: Callable[..., Any], example_events: Path
) -> None:
    """A relay in front of ours sent a CRCR repository_dispatch: the downstreams get the upstream
    payload inside it verbatim (every field, those no typed event holds too) under the upstream
    delivery id, read from what ingress stored; the raw body is not read again (here it is
    overwritten after ingress, and nothing changes)."""
    from sqlalchemy import update

    from store.db import session_scope
    from store.models import Delivery

    b = bench({"L2": ["org/down"]})
    inner = {**_pr(example_events), "extension": {"only": ["downstreams", "read", "this"]}}
    dispatch = {
        "action": "pull_request",
        "client_payload": {"event_type": "pull_request", "delivery_id": "up-1", "payload": inner},
    }
    assert b.post("repository_dispatch", dispatch, delivery_id="ours-1").status_code == 202
    with session_scope(b.settings.database_url) as session:
        session.execute(update(Delivery).values(raw_body=b"not read after ingress"))
        session.commit()
    b.settle()
    assert b.states() == {"org/down": "sent"}
    (call,) = b.github.dispatches()
    client_payload = call.body["client_payload"]
    assert (client_payload["event_type"], client_payload["delivery_id"]) == ("pull_request", "up-1")
    assert client_payload["payload"] == inner


def test_a_push_is_admitted_by_the_files_its_typed_event_carries(
    bench: Callable[..., Any], example_events: Path
) -> None:
    """A push's files are read from its commits once, at ingress (the typed event's
    ``changed_files``): the paths policy decides on them at send time without the raw body."""
    payload = json.loads((example_events / "push.main.json").read_text())
    payload["commits"] = [{"added": ["docs/a.md"], "modified": ["torch/x.py"]}]
    policy = (
        "downstreams:\n  org/torch:\n    paths: ['torch/**']\n  org/aten:\n    paths: ['aten/**']\n"
    )
    b = bench({"L2": ["org/torch", "org/aten"]}, policy=policy)
    assert b.post("push", payload).status_code == 202
    b.settle()
    assert b.states() == {"org/torch": "sent"}  # org/aten was not admitted with the delivery
    (call,) = b.github.dispatches()
    assert call.body["client_payload"]["crcr_relay"]["changed_files"] == ["docs/a.md", "torch/x.py"]
