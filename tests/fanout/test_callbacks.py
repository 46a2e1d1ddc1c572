"""POST /github/callback: CRCR's callback body authenticated by an OIDC token from a local
issuer (JWKS over HTTP), the dispatch token, the nonce, the job state machine's answers, the
rate limit, L1 ignored, the nightly self-report."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from wire.crcr import callback as crcr


class Caller:
    """A downstream that was dispatched to and calls back with what it received."""

    def __init__(self, bench: Any, issuer: Any, repo: str, client_payload: dict[str, Any]):
        self.bench, self.issuer, self.repo = bench, issuer, repo
        self.client_payload = client_payload

    def body(self, status: str = "in_progress", conclusion: str | None = None, **kw: Any) -> dict:
        now = datetime.now(UTC)
        built = crcr.build(
            event_type=self.client_payload["event_type"],
            delivery_id=self.client_payload["delivery_id"],
            payload=self.client_payload["payload"],
            status=status,  # type: ignore[arg-type]
            workflow_name="upstream-tests",
            url="https://github.com/x/y/actions/runs/77",
            run_id=kw.pop("run_id", "77"),
            run_attempt="1",
            job_name="test",
            started_at=now if status == "in_progress" else None,
            completed_at=now if status == "completed" else None,
            conclusion=conclusion,  # type: ignore[arg-type]
            test_results=crcr.TestCounts(passed=9, failed=1, skipped=0, total=10)
            if status == "completed"
            else None,
        )
        return {**built, "crcr_relay": copy.deepcopy(self.client_payload["crcr_relay"])}

    def post(self, body: dict[str, Any], token: str | None = None, **headers: str) -> Any:
        token = self.issuer.mint(self.repo) if token is None else token
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        return self.bench.client.post(
            "/github/callback", content=json.dumps(body), headers={**auth, **headers}
        )


@pytest.fixture
def dispatched(
    bench: Callable[..., Any], issuer: Any, example_events: Path
) -> Callable[..., Caller]:
    def make(level: str = "L2", repo: str = "org/down", **settings: Any) -> Caller:
        b = bench({level: [repo, "org/other"] if level != "L3" else [repo]}, **settings)
        payload = json.loads((example_events / "pull_request.opened.json").read_text())
        if level == "L3":
            payload["pull_request"]["labels"].append({"name": "ciflow/crcr/spyre"})
        assert b.post("pull_request", payload, delivery_id=f"cb-{level}").status_code == 202
        b.settle()
        (call,) = b.github.dispatches(repo)
        return Caller(b, issuer, repo, call.body["client_payload"])

    return make


def _jobs(caller: Caller) -> list[tuple[str, str | None, int]]:
    from sqlalchemy import select

    from store.db import session_scope
    from store.models import Job, JobTransition

    with session_scope(caller.bench.settings.database_url) as session:
        jobs = session.scalars(select(Job)).all()
        transitions = session.scalars(select(JobTransition)).all()
        return [
            (j.status, j.conclusion, len([t for t in transitions if t.job_pk == j.id]))
            for j in jobs
        ]


def test_valid_then_duplicate_then_conflict(dispatched: Callable[..., Caller]) -> None:
    c = dispatched()
    started = c.post(c.body())
    assert (started.status_code, started.json()) == (200, {"ok": True, "status": "in_progress"})
    again = c.post(c.body())
    assert (again.status_code, again.json()) == (200, {"ok": True, "status": "duplicate"})
    done = c.post(c.body("completed", "failure"))
    assert (done.status_code, done.json()) == (200, {"ok": True, "status": "completed"})
    assert c.post(c.body("completed", "failure")).json() == {"ok": True, "status": "duplicate"}
    conflict = c.post(c.body("completed", "success"))
    assert conflict.status_code == 409
    late = c.post(c.body())  # an in_progress arriving after completion changes nothing
    assert late.json() == {"ok": True, "status": "completed", "stale": True}
    assert _jobs(c) == [("completed", "failure", 2)]


def test_completed_before_in_progress(dispatched: Callable[..., Caller]) -> None:
    c = dispatched()
    assert c.post(c.body("completed", "success")).json()["status"] == "completed"
    assert c.post(c.body()).json() == {"ok": True, "status": "completed", "stale": True}
    assert _jobs(c) == [("completed", "success", 1)]


def test_job_rows_carry_the_results(dispatched: Callable[..., Caller]) -> None:
    from sqlalchemy import select

    from store.db import session_scope
    from store.models import Job

    c = dispatched()
    c.post(c.body())
    c.post(c.body("completed", "failure"))
    with session_scope(c.bench.settings.database_url) as session:
        job = session.scalars(select(Job)).one()
        assert (job.repo, job.delivery_id, job.run_id, job.tests_failed, job.tests_total) == (
            "org/down",
            "cb-L2",
            "77",
            1,
            10,
        )
        assert job.pr_number == c.client_payload["payload"]["number"]
        assert job.dispatch_pk is not None and job.started_at is not None


def test_unknown_dispatch_and_bad_schema(dispatched: Callable[..., Caller]) -> None:
    c = dispatched()
    body = c.body()
    del body["crcr_relay"]
    body["delivery_id"] = "never-dispatched"
    unknown = c.post(body)
    assert unknown.status_code == 400
    assert unknown.json() == {"error": "no dispatch of delivery 'never-dispatched' to org/down"}
    broken = c.body()
    del broken["workflow"]["run_id"]
    bad = c.post(broken)
    assert bad.status_code == 400 and bad.json()["error"].startswith(
        "not a CRCR callback body: workflow.run_id: Field required"
    )
    assert _jobs(c) == []


def test_without_dispatch_token_at_l2_matches_by_delivery(
    dispatched: Callable[..., Caller],
) -> None:
    c = dispatched()
    body = c.body()
    del body["crcr_relay"]
    assert c.post(body).json() == {"ok": True, "status": "in_progress"}


def test_dispatch_token_required_at_l3(dispatched: Callable[..., Caller]) -> None:
    c = dispatched("L3")
    body = c.body()
    del body["crcr_relay"]
    refused = c.post(body)
    assert (refused.status_code, refused.json()) == (
        401,
        {"error": "a dispatch token is required at L3"},
    )
    assert c.post(c.body()).json()["status"] == "in_progress"


@pytest.mark.parametrize(
    ("forge", "status", "error"),
    [
        ("no-token", 401, "missing Authorization: Bearer <OIDC token>"),
        ("audience", 401, "the token's audience is not 'pytorch-cross-repo-ci-relay'"),
        ("issuer", 401, "issuer 'https://evil.example' is not allowed"),
        ("expired", 401, "the token has expired"),
        ("unknown-key", 401, "the token's key id 'key-9' is not in the JWKS of {issuer}"),
        ("wrong-signature", 401, "the token is not valid: Signature verification failed"),
        ("other-repo", 403, "the dispatch token was issued to org/down, not org/other"),
        ("not-allowlisted", 403, "repository 'org/stranger' is not in the allowlist"),
        ("token-tampered", 401, "the dispatch token is not valid: Signature verification failed"),
    ],
)
def test_forged_callbacks_are_refused_and_store_nothing(
    dispatched: Callable[..., Caller], issuer: Any, forge: str, status: int, error: str
) -> None:
    from cryptography.hazmat.primitives.asymmetric import rsa

    c = dispatched()
    body = c.body()
    token: str | None = None
    if forge == "no-token":
        token = ""
    elif forge == "audience":
        token = issuer.mint(c.repo, audience="someone-else")
    elif forge == "issuer":
        token = issuer.mint(c.repo, issuer="https://evil.example")
    elif forge == "expired":
        token = issuer.mint(c.repo, expires_in=-60)
    elif forge == "unknown-key":
        token = issuer.mint(c.repo, kid="key-9", key=rsa.generate_private_key(65537, 2048))
    elif forge == "wrong-signature":
        token = issuer.mint(c.repo, key=rsa.generate_private_key(65537, 2048))
    elif forge == "other-repo":
        token = issuer.mint("org/other")
    elif forge == "not-allowlisted":
        token = issuer.mint("org/stranger")
    elif forge == "token-tampered":
        signed = body["crcr_relay"]["dispatch_token"]
        head, claims, sig = signed.split(".")
        flipped = ("A" if sig[0] != "A" else "B") + sig[1:]
        body["crcr_relay"]["dispatch_token"] = f"{head}.{claims}.{flipped}"
    answer = c.post(body, token=token)
    assert (answer.status_code, answer.json()) == (
        status,
        {"error": error.format(issuer=issuer.url)},
    )
    assert _jobs(c) == []


def test_a_dispatch_token_replayed_by_another_run(dispatched: Callable[..., Caller]) -> None:
    c = dispatched()
    assert c.post(c.body()).json()["status"] == "in_progress"
    replay = c.post(c.body(run_id="99999"))
    assert (replay.status_code, replay.json()) == (
        403,
        {"error": "the dispatch token was already used by another run"},
    )
    assert _jobs(c) == [("in_progress", None, 1)]


def test_jwks_refreshed_for_a_new_key_but_not_for_every_unknown_one(
    dispatched: Callable[..., Caller], issuer: Any
) -> None:
    from cryptography.hazmat.primitives.asymmetric import rsa

    c = dispatched(oidc_jwks_refresh_seconds=0)
    assert c.post(c.body()).status_code == 200
    fetched = issuer.jwks_fetches
    issuer.add_key("key-2")  # the issuer rotates
    ok = c.post(c.body("completed", "success"), token=issuer.mint(c.repo, kid="key-2"))
    assert ok.json()["status"] == "completed"
    assert issuer.jwks_fetches == fetched + 1
    c.bench.client.app.state.oidc_verifier.refresh_interval = 3600
    for i in range(5):
        made_up = issuer.mint(c.repo, kid=f"nope-{i}", key=rsa.generate_private_key(65537, 2048))
        assert c.post(c.body(), token=made_up).status_code == 401
    assert issuer.jwks_fetches == fetched + 1  # no fetch per made-up key id


def test_rate_limit_per_repository(dispatched: Callable[..., Caller]) -> None:
    c = dispatched(callback_rate_per_minute=3)
    codes = [c.post(c.body()).status_code for _ in range(5)]
    assert codes == [200, 200, 200, 429, 429]


def test_l1_is_acknowledged_and_ignored(dispatched: Callable[..., Caller]) -> None:
    c = dispatched("L1")
    answer = c.post(c.body())
    assert (answer.status_code, answer.json()) == (200, {"ok": True, "status": "ignored"})
    assert _jobs(c) == []


def test_nightly_self_report(dispatched: Callable[..., Caller]) -> None:
    c = dispatched()
    sha = "f" * 40
    c.client_payload = {
        "event_type": "nightly",
        "delivery_id": sha,
        "payload": {"repository": {"full_name": "pytorch/pytorch"}, "head_sha": sha},
        "crcr_relay": {},
    }
    body = c.body("completed", "success")
    del body["crcr_relay"]
    assert c.post(body).json() == {"ok": True, "status": "completed"}
    started = c.body()
    del started["crcr_relay"]
    refused = c.post(started)
    assert (refused.status_code, refused.json()) == (
        400,
        {"error": "a nightly self-report can only be completed"},
    )
    assert _jobs(c) == [("completed", "success", 1)]


def test_a_pinned_repository_id_must_match(dispatched: Callable[..., Caller], issuer: Any) -> None:
    c = dispatched(repo="org/down")
    c.bench.policy.write_text("downstreams:\n  org/down:\n    repository_id: 4242\n")
    other = c.post(c.body(), token=issuer.mint("org/down", repository_id="999"))
    assert (other.status_code, other.json()) == (
        403,
        {"error": "the token's repository_id is not the one pinned for org/down"},
    )
    assert c.post(c.body(), token=issuer.mint("org/down", repository_id="4242")).status_code == 200
