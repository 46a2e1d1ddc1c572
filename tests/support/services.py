"""Real services for tests: fresh PostgreSQL databases and Redis databases from the servers that
`.ci/run` starts (RELAY_TEST_POSTGRES_URL, RELAY_TEST_REDIS_URL), a free port, and the paths the
tests read (the project root and the tests' own data, tests/data).

Outside CI a missing server skips the test with the reason; under CI (CI=true) it fails, so a
broken CI set-up can never pass by skipping.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

REPO_ROOT = Path(__file__).resolve().parents[2]
#: the tests' own data (everything a test reads lives in the repository)
TEST_DATA = REPO_ROOT / "tests" / "data"
#: GitHub webhook payloads written for the tests, GitHub's layout: ``<event>/<name>.payload.json``
GITHUB_FIXTURES = TEST_DATA / "github"


def _missing(name: str) -> None:
    message = f"{name} is not set: run the suite through `bash .ci/run`, which starts the server"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def postgres_admin_url() -> str:
    url = os.environ.get("RELAY_TEST_POSTGRES_URL")
    if not url:
        _missing("RELAY_TEST_POSTGRES_URL")
    assert url
    return url


def redis_url() -> str:
    url = os.environ.get("RELAY_TEST_REDIS_URL")
    if not url:
        _missing("RELAY_TEST_REDIS_URL")
    assert url
    return url


@contextmanager
def fresh_postgres_database() -> Iterator[str]:
    """CREATE a uniquely named database for one test or module; DROP it afterwards."""
    import psycopg

    admin = make_url(postgres_admin_url())
    name = f"relay_test_{uuid.uuid4().hex[:12]}"
    dsn = admin.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin.set(database=name).render_as_string(hide_password=False)
    finally:
        from store.db import dispose_engines

        dispose_engines()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


#: the Redis database indexes tests hand out (a default server has 16; 0 is the URL's own)
REDIS_INDEXES = range(1, 16)
_redis_turn = itertools.count()


def redis_indexes() -> list[int]:
    """The indexes this test process may hand out. Under pytest-xdist (``make test``) each worker
    gets its own share, so one worker never flushes the queues of a stack another is running;
    a serial run has them all. More than 15 workers share them again, two by two."""
    count = min(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1), len(REDIS_INDEXES))
    worker = int((os.environ.get("PYTEST_XDIST_WORKER") or "gw0").removeprefix("gw"))
    return [i for n, i in enumerate(REDIS_INDEXES) if n % count == worker % count]


def fresh_redis_url() -> str:
    """A Redis database index of its own (flushed) so runs never see each other's queues: the
    process's indexes in turn, so the stacks of one test never share one either."""
    import redis

    base = make_url(redis_url())
    mine = redis_indexes()
    index = mine[next(_redis_turn) % len(mine)]
    url = base.set(database=str(index)).render_as_string(hide_password=False)
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    return url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_python(
    code: str, env: dict[str, str] | None = None, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    """Run a snippet in a fresh interpreter in the project root (import-order and crash tests)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
