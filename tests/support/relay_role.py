"""A relay-role test bench: an allowlist of downstreams, a migrated database, the app in process
(TestClient) with the fake GitHub API as its GitHub, signed webhooks, and a settle helper that
sends the outbox until nothing is due (the sender's own code, in this process: dispatches, check
runs created and updated)."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from config.settings import Settings
from fanout.checks import create_for_dispatch, update_for_dispatch
from fanout.github import GitHubApi
from fanout.send import SendResult, send_one
from store import check_updates, outbox
from store.db import session_scope
from store.models import Dispatch, DispatchState
from tests.support.fake_github import FakeGitHub
from wire.github.signature import sign

SECRET = "relay-role-test-secret"
UPSTREAM = "pytorch/pytorch"


def allowlist_text(repos: dict[str, list[str]]) -> str:
    """``{"L2": ["org/a", ...], "L4": [...]}`` as CRCR's allowlist (L3 under device "spyre")."""
    lines = []
    for level, names in repos.items():
        lines.append(f"{level}:" + (" []" if not names else ""))
        if level == "L3" and names:
            lines.append("  spyre:")
            lines += [f"    {n}: []" for n in names]
        else:
            lines += [f"  - {n}" for n in names]
    return "\n".join(lines) + "\n"


def client_class() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        from starlette.testclient import TestClient
    return TestClient


@dataclass
class Bench:
    settings: Settings
    github: FakeGitHub
    client: Any
    allowlist: Path
    policy: Path
    api: GitHubApi | None = None

    def github_api(self) -> GitHubApi:
        if self.api is None:
            self.api = GitHubApi(
                base_url=self.settings.github_api_url,
                app_id=self.settings.github_app_id,
                private_key=self.settings.github_app_private_key.get_secret_value()
                if self.settings.github_app_private_key
                else None,
                timeout=self.settings.dispatch_timeout_seconds,
            )
        return self.api

    def post(self, event: str, payload: dict[str, Any], delivery_id: str | None = None) -> Any:
        body = json.dumps(payload).encode()
        return self.client.post(
            "/github/webhook",
            content=body,
            headers={
                "Content-Type": "application/json",
                "X-GitHub-Event": event,
                "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
                "X-Hub-Signature-256": sign(SECRET.encode(), body),
            },
        )

    def dispatches(self) -> list[tuple[Dispatch, str, str]]:
        with session_scope(self.settings.database_url) as session:
            return outbox.listing(session, limit=1000)

    def states(self) -> dict[str, str]:
        return {repo: d.state for d, repo, _ in self.dispatches()}

    def send_due(self, rng: random.Random | None = None) -> list[SendResult]:
        """Send the due outbox rows, and create (update) the check runs whose (re)try is due."""
        with session_scope(self.settings.database_url) as session:
            outbox.release_expired(session)
            due = outbox.due(session)
        sent = [send_one(pk, settings=self.settings, api=self.github_api(), rng=rng) for pk in due]
        with session_scope(self.settings.database_url) as session:
            checks_due = outbox.checks_due(session)
        for pk in checks_due:
            create_for_dispatch(self.settings, self.github_api(), pk, rng=rng)
        with session_scope(self.settings.database_url) as session:
            updates_due = check_updates.due(session)
        for pk in updates_due:
            update_for_dispatch(self.settings, self.github_api(), pk, rng=rng)
        return sent

    def settle(self, timeout: float = 30.0) -> None:
        """Send until no outbox row is pending or being sent (retries included)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.send_due(random.Random(7))
            busy = [
                d
                for d, _, _ in self.dispatches()
                if (
                    d.state in (DispatchState.PENDING.value, DispatchState.SENDING.value)
                    or d.check_state in ("pending", "creating")
                    or (
                        d.check_run_id is not None
                        and d.check_update_state in ("pending", "updating")
                    )
                )
                and d.target != "runner"
            ]
            if not busy:
                return
            time.sleep(0.05)
        raise AssertionError(f"the outbox did not settle: {self.states()}")


@contextmanager
def serve_app(app: Any) -> Iterator[str]:
    """The app under a real uvicorn server on loopback; yields its base URL."""
    import socket

    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class OwnRedis:
    """A redis-server of the test's own (no persistence) that the test can kill and restart."""

    def __init__(self, tmp: Path, port: int) -> None:
        self.tmp, self.port = tmp, port
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        import redis

        binary = shutil.which("redis-server")
        assert binary
        self.proc = subprocess.Popen(
            [
                binary,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.tmp),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if redis.Redis.from_url(self.url).ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.1)
        raise AssertionError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # no persistence: whatever was queued is gone
            self.proc.wait()
