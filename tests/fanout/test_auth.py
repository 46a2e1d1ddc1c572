"""Every state-changing endpoint refuses a caller without credentials or with wrong ones, and
stores nothing: the webhook (HMAC; a missing signature is CRCR's 400), the callback (OIDC),
the HUD ingest (bot token), a dead letter's retry (operator token)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import func, select


def _counts(url: str) -> dict[str, int]:
    from store.db import session_scope
    from store.models import CrcrResult, Delivery, Dispatch, Job

    with session_scope(url) as session:
        return {
            m.__tablename__: int(session.scalar(select(func.count()).select_from(m)) or 0)
            for m in (Delivery, Dispatch, Job, CrcrResult)
        }


def test_state_changing_endpoints_need_credentials(
    bench: Callable[..., Any], issuer: Any, example_events: Path, github_answers: Any
) -> None:
    from cryptography.hazmat.primitives.asymmetric import rsa

    b = bench(
        {"L2": ["org/down"]}, hud_bot_token="hud-bot-secret", operator_token="operator-secret"
    )
    b.github.script("org/down", *[github_answers.server_error(500)] * 4)
    payload = json.loads((example_events / "pull_request.opened.json").read_text())
    assert b.post("pull_request", payload, delivery_id="auth-1").status_code == 202
    b.settle()
    (dead,) = [d for d, _, _ in b.dispatches() if d.state == "dead"]
    before = _counts(b.settings.database_url)
    body = json.dumps(payload).encode()
    callback = json.dumps(
        {
            "event_type": "pull_request",
            "delivery_id": "auth-1",
            "payload": payload,
            "workflow": {
                "status": "in_progress",
                "name": "w",
                "url": "u",
                "run_id": "1",
                "run_attempt": "1",
                "job_name": "j",
                "check_run_id": "1-1",
                "started_at": "2026-12-01T00:00:00Z",
            },
        }
    )
    forged = issuer.mint("org/down", key=rsa.generate_private_key(65537, 2048))
    envelope = json.dumps({"trusted": {"verified_repo": "org/down"}, "untrusted": {}})
    hook = {"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "auth-2"}
    c = b.client
    answers = {
        "webhook, no signature": c.post("/github/webhook", content=body, headers=hook),
        "webhook, wrong signature": c.post(
            "/github/webhook",
            content=body,
            headers={**hook, "X-Hub-Signature-256": "sha256=" + "0" * 64},
        ),
        "callback, no token": c.post("/github/callback", content=callback),
        "callback, forged token": c.post(
            "/github/callback", content=callback, headers={"Authorization": f"Bearer {forged}"}
        ),
        "HUD ingest, no token": c.post("/api/crcr/results", content=envelope),
        "HUD ingest, wrong token": c.post(
            "/api/crcr/results", content=envelope, headers={"x-hud-internal-bot": "guess"}
        ),
        "retry, no token": c.post(f"/api/v1/dispatches/{dead.id}/retry"),
        "retry, wrong token": c.post(
            f"/api/v1/dispatches/{dead.id}/retry", headers={"Authorization": "Bearer guess"}
        ),
    }
    assert {k: a.status_code for k, a in answers.items()} == {
        "webhook, no signature": 400,
        "webhook, wrong signature": 401,
        "callback, no token": 401,
        "callback, forged token": 401,
        "HUD ingest, no token": 401,
        "HUD ingest, wrong token": 403,
        "retry, no token": 401,
        "retry, wrong token": 403,
    }
    assert _counts(b.settings.database_url) == before
    assert b.states() == {"org/down": "dead"}
