"""Fixtures of the web service's tests.

In process (fast): ``app_settings`` (a fresh SQLite database migrated in ``tmp_path``, the
secrets, upstream and a small body limit of the test stacks), ``enqueued`` (the broker as the
outbox publisher sees it: what a publisher pass would send), ``client`` (FastAPI's TestClient on ``create_app``) and ``webhook``
(signed posts to ``/github/webhook`` through that client, and the stored rows), ``jobs`` (jobs
written the way the plan stage writes them).

End to end: ``stack``, `relay up` once on SQLite + the embedded broker and once on PostgreSQL +
Redis (per module).
"""

from __future__ import annotations

import contextlib
import uuid
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from config.settings import Settings
    from store.models import Delivery
    from tests.support.job_rows import Jobs
    from tests.support.stack import RelayUp, Stack

#: the in-process app's body limit (tests/data/github's payloads are all below 32 KiB)
MAX_BODY = 64_000


@pytest.fixture(scope="module", params=["sqlite+embedded", "postgres+redis"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, relay_up: RelayUp
) -> Iterator[Stack]:
    """`relay up` against SQLite and the embedded broker, then against PostgreSQL and Redis."""
    tmp: Path = tmp_path_factory.mktemp(request.param.replace("+", "-"))
    with relay_up.running(request.param, tmp) as running:
        yield running


def _test_client() -> type:
    # starlette warns that it prefers httpx2 to the httpx this project pins; nothing to act on
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        from starlette.testclient import TestClient
    return TestClient


@dataclass
class Recorder:
    """The broker as the outbox publisher sees it: ``calls`` runs one publisher pass
    (workers.publish.Publisher) over the app's database and lists every message published so
    far as ``(delivery_pk, delivery_id)``; ``result`` False stands for a broker that cannot
    take a message (the rows stay in the outbox)."""

    sent: list[tuple[int, str]] = field(default_factory=list)
    result: bool = True
    settings: Any = None  # the app's, set by Webhook

    def send_task(self, name: str, *, args: list[int], headers: dict[str, str], **_: Any) -> None:
        if not self.result:
            raise ConnectionError("the broker is down")
        self.sent.append((args[0], headers["delivery_id"]))

    @property
    def calls(self) -> list[tuple[int, str]]:
        from workers.publish import BrokerUnavailable, Publisher

        with contextlib.suppress(BrokerUnavailable):  # a broker that is down: nothing sent
            Publisher(self.settings, self).publish_once()  # type: ignore[arg-type]
        return list(self.sent)


@pytest.fixture
def enqueued() -> Recorder:
    return Recorder()


@pytest.fixture
def app_settings(tmp_path: Path, relay_up: RelayUp) -> Settings:
    """Settings of an in-process app: a fresh migrated SQLite database, a broker file nothing
    uses (the recorder stands in for it), the test stacks' secrets and upstream."""
    from config.settings import Settings
    from store import migrate

    database_url = f"sqlite:///{tmp_path}/relay.sqlite"
    migrate.upgrade(database_url)
    return Settings(
        env="development",
        database_url=database_url,
        broker_url=f"sqla+sqlite:///{tmp_path}/broker.sqlite",
        webhook_secrets=relay_up.SECRETS,
        upstream_repo=relay_up.UPSTREAM,
        max_body_bytes=MAX_BODY,
        log_json=False,
    )


@pytest.fixture
def make_client() -> Iterator[Any]:
    """``make_client(settings)``: a TestClient on ``create_app``, its lifespan started (and shut
    down after the test)."""
    from relay.app import create_app

    test_client = _test_client()
    opened: list[Any] = []

    def make(settings: Settings) -> Any:
        client = test_client(create_app(settings))
        client.__enter__()  # the app's lifespan: its shutdown stops the group-commit writer
        opened.append(client)
        return client

    yield make
    for client in opened:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client: Any, app_settings: Settings, enqueued: Recorder) -> Any:
    return make_client(app_settings)


class Webhook:
    """Signed deliveries to the in-process app, and what it stored."""

    path = "/github/webhook"

    def __init__(self, client: Any, settings: Settings, enqueued: Recorder, secrets: list[str]):
        self.client = client
        self.settings = settings
        self.enqueued = enqueued
        enqueued.settings = settings
        self.secrets = secrets
        self.max_body = settings.max_body_bytes
        self.upstream = settings.upstream_repo

    def headers(
        self,
        event: str,
        body: bytes,
        *,
        delivery_id: str | None = None,
        secret: str | None = "",
        omit: Iterable[str] = (),
    ) -> dict[str, str]:
        from wire.github.signature import sign

        h = {
            "Content-Type": "application/json",
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
            "X-GitHub-Hook-ID": "4242",
            "User-Agent": "GitHub-Hookshot/test",
        }
        if secret is not None:
            h["X-Hub-Signature-256"] = sign(secret or self.secrets[0], body)
        for name in omit:
            del h[name]
        return h

    def post(
        self,
        event: str,
        body: bytes,
        *,
        delivery_id: str | None = None,
        secret: str | None = "",
        omit: Iterable[str] = (),
        chunked: bool = False,
    ) -> Any:
        """POST ``body`` signed with ``secret`` (default: the first configured; None: unsigned),
        without the headers named in ``omit``; ``chunked``: streamed in 16 KiB pieces with no
        Content-Length."""
        headers = self.headers(event, body, delivery_id=delivery_id, secret=secret, omit=omit)
        if not chunked:
            return self.client.post(self.path, content=body, headers=headers)

        def chunks() -> Iterator[bytes]:
            for i in range(0, len(body), 16_384):
                yield body[i : i + 16_384]

        return self.client.post(self.path, content=chunks(), headers=headers)

    def stored(self, delivery_id: str) -> Delivery | None:
        from sqlalchemy import select

        from store.db import session_scope
        from store.models import Delivery

        with session_scope(self.settings.database_url) as session:
            row = session.scalar(select(Delivery).where(Delivery.delivery_id == delivery_id))
            if row is not None:
                session.expunge(row)
            return row

    def count(self) -> int:
        from sqlalchemy import func, select

        from store.db import session_scope
        from store.models import Delivery

        with session_scope(self.settings.database_url) as session:
            return int(session.scalar(select(func.count()).select_from(Delivery)) or 0)


@pytest.fixture
def webhook(client: Any, app_settings: Settings, enqueued: Recorder, relay_up: RelayUp) -> Webhook:
    return Webhook(client, app_settings, enqueued, list(relay_up.SECRETS))


@pytest.fixture
def make_webhook(make_client: Any, enqueued: Recorder, relay_up: RelayUp) -> Any:
    """``make_webhook(settings)``: the webhook of another in-process app (e.g. another body
    limit) recording into ``enqueued``."""

    def make(settings: Settings) -> Webhook:
        return Webhook(make_client(settings), settings, enqueued, list(relay_up.SECRETS))

    return make


@pytest.fixture
def served() -> Any:
    """``with served(app) as url``: the app under a real uvicorn server on loopback (real HTTP,
    where the TestClient would re-encode what a test sends)."""
    from tests.support.relay_role import serve_app

    return serve_app


@pytest.fixture(params=["sqlite", "postgres"])
def any_database(
    request: pytest.FixtureRequest, app_settings: Settings, fresh_postgres_database: Any
) -> Iterator[Settings]:
    """The in-process app's settings on SQLite, then on a fresh PostgreSQL database (dropped
    once the app is shut down: this fixture is set up before the app's)."""
    if request.param == "sqlite":
        yield app_settings
        return
    from store import migrate
    from store.db import dispose_engines

    with fresh_postgres_database() as url:
        migrate.upgrade(url)
        yield app_settings.model_copy(update={"database_url": url})
        dispose_engines()


@pytest.fixture
def jobs(app_settings: Settings, repo_root: Path) -> Jobs:
    """Jobs written in ``app_settings``' database the way the plan stage writes them."""
    from tests.support.job_rows import Jobs

    return Jobs(app_settings, repo_root)
