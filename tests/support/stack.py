"""A running relay for tests: `relay up` (uvicorn + one real Celery worker process) in a
subprocess, on a free loopback port, with its own database and broker.

This is exactly what `make run` starts; tests drive it through real HTTP. The ``relay_up``
fixture hands out a :class:`RelayUp`; benchmarks call :func:`start_stack` directly.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from store.db import session_scope
from store.models import Delivery, Job, TestResult
from tests.support import handlers
from tests.support.services import (
    REPO_ROOT,
    free_port,
    fresh_postgres_database,
    fresh_redis_url,
)
from wire.github.signature import sign

SECRETS = ["It's a Secret to Everybody", "rotated-second-secret"]
#: the upstream the test stacks serve: the repository of tests/data/github's payloads
UPSTREAM = "example-org/upstream"
MAX_BODY = 200_000
#: the two configurations every end-to-end test runs on (the ``kind`` of :meth:`RelayUp.running`)
KINDS = ("sqlite+embedded", "postgres+redis")


@dataclass
class Stack:
    base_url: str
    database_url: str
    broker_url: str
    log_path: Path
    proc: subprocess.Popen[bytes]
    env: dict[str, str] = field(default_factory=dict)
    log_file: Any = None
    #: after a graceful stop: the processes of the stack still running when `relay up` was gone
    outlived: list[int] = field(default_factory=list)

    @property
    def webhook(self) -> str:
        return f"{self.base_url}/github/webhook"

    def headers(
        self,
        event: str,
        body: bytes,
        *,
        delivery_id: str | None = None,
        secret: str | None = SECRETS[0],
    ) -> dict[str, str]:
        h = {
            "Content-Type": "application/json",
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
            "X-GitHub-Hook-ID": "4242",
            "User-Agent": "GitHub-Hookshot/test",
        }
        if secret is not None:
            h["X-Hub-Signature-256"] = sign(secret, body)
        return h

    def post(
        self,
        event: str,
        body: bytes,
        *,
        delivery_id: str | None = None,
        secret: str | None = SECRETS[0],
    ) -> httpx.Response:
        return httpx.post(
            self.webhook,
            content=body,
            headers=self.headers(event, body, delivery_id=delivery_id, secret=secret),
            timeout=30,
        )

    def submit(self, body: bytes, event: str = "pull_request") -> str:
        """Post a signed delivery under a new id; it must be accepted (202). Its id."""
        delivery_id = str(uuid.uuid4())
        response = self.post(event, body, delivery_id=delivery_id)
        assert response.status_code == 202, response.text
        return delivery_id

    def delivery(self, delivery_id: str) -> Delivery | None:
        with session_scope(self.database_url) as session:
            row = session.scalar(select(Delivery).where(Delivery.delivery_id == delivery_id))
            if row is not None:
                session.expunge(row)
            return row

    def job_for(self, delivery_id: str) -> Job | None:
        with session_scope(self.database_url) as s:
            job = s.scalar(select(Job).where(Job.delivery_id == delivery_id))
            if job is not None:
                s.expunge(job)
            return job

    def wait_job(self, delivery_id: str, *, timeout: float = 120) -> Job:
        """The job of ``delivery_id`` once it is completed."""

        def done() -> Job | None:
            job = self.job_for(delivery_id)
            return job if job is not None and job.status == "completed" else None

        return self.wait_for(done, timeout=timeout, what=f"job of {delivery_id} completed")

    def results(self, job_pk: int) -> dict[str, str]:
        """{test name (the last part of its node id): outcome} of one job."""
        with session_scope(self.database_url) as s:
            rows = s.execute(
                select(TestResult.test_id, TestResult.outcome).where(TestResult.job_pk == job_pk)
            ).all()
        return {test_id.split("::")[-1]: outcome for test_id, outcome in rows}

    def wait_for(self, predicate: Callable[[], Any], *, timeout: float = 60, what: str = "") -> Any:
        """Settle helper: poll until ``predicate()`` is truthy (or fail with the log tail)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"relay up exited ({self.proc.returncode}):\n{self.log_tail()}"
                )
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what or predicate}:\n{self.log_tail()}")

    def wait_state(self, delivery_id: str, states: set[str], *, timeout: float = 60) -> Delivery:
        def done() -> Delivery | None:
            row = self.delivery(delivery_id)
            return row if row is not None and row.state in states else None

        return self.wait_for(done, timeout=timeout, what=f"delivery {delivery_id} in {states}")

    def log_lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                with contextlib.suppress(json.JSONDecodeError):
                    out.append(json.loads(line))
        return out

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def processes(self) -> list[int]:
        """`relay up` and every process below it (its workers, their pools, warm pools and
        test processes; Linux /proc), parents first."""
        return [self.proc.pid, *_descendants(self.proc.pid)]

    @staticmethod
    def still_running(pids: list[int]) -> list[int]:
        """Those of ``pids`` that still run (not exited, not a zombie)."""
        return [pid for pid in pids if _alive(pid)]

    def stop(self, *, graceful: bool = False) -> int | None:
        """End `relay up` and every process it started; `relay up`'s exit code.

        By default a test's teardown kills them all at once (SIGKILL): a Celery worker's warm
        shutdown on the embedded broker takes seconds (it drains the broker once more), which
        the suite would pay for every stack it starts. ``graceful``: SIGTERM, as a service
        manager or Ctrl-C stops it, and wait for `relay up` to stop its workers itself
        (tests/cli/test_up_workers.py checks it does): what still runs then is ``outlived``,
        and killed."""
        tree = self.processes()
        if self.proc.poll() is None:
            if graceful:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                _wait_gone(tree[1:], timeout=10)  # what dies with its parent goes in a moment
                self.outlived = self.still_running(tree[1:])
            else:
                self.proc.kill()  # first: its supervisor would restart a worker killed before it
            self.proc.wait()
        for pid in tree[1:]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        _wait_gone(tree[1:])
        if self.log_file is not None:
            self.log_file.close()
        return self.proc.returncode


def _descendants(pid: int) -> list[int]:
    """Every live process below ``pid``, parents first (from each process's parent in /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out: list[int] = []
    todo = [pid]
    while todo:
        kids = children.get(todo.pop(0), [])
        out += kids
        todo += kids
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _wait_gone(pids: list[int], timeout: float = 30) -> None:
    """Wait until none of ``pids`` runs any more (killed processes go in a moment)."""
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def pull_request_opened(
    base: str | None = None,
    head: str | None = None,
    *,
    upstream: str = UPSTREAM,
    login: str = "someone",
) -> bytes:
    """A GitHub ``pull_request`` (opened) body for ``base..head`` on ``upstream`` under a new PR
    number; a missing SHA is a new random one (a head no checkout knows)."""
    number = uuid.uuid4().int % 10**6 + 1000
    pull = {
        "number": number,
        "state": "open",
        "merged": False,
        "labels": [],
        "head": {"sha": head or uuid.uuid4().hex + "abcdefgh", "ref": "feature"},
        "base": {"sha": base or uuid.uuid4().hex + "12345678", "ref": "main"},
        "author_association": "MEMBER",
        "user": {"login": login},
    }
    body = {
        "action": "opened",
        "number": number,
        "pull_request": pull,
        "repository": {"full_name": upstream},
        "sender": {"login": login},
    }
    return json.dumps(body).encode()


def start_local_stack(
    tmp: Path,
    *,
    extra_env: dict[str, str] | None = None,
    workers: int = 1,
    cwd: Path = REPO_ROOT,
) -> Stack:
    """``relay up`` on the embedded default: a SQLite database and the SQLite broker in ``tmp``."""
    return start_stack(
        tmp=tmp,
        database_url=f"sqlite:///{tmp / 'relay.sqlite'}",
        broker_url=f"sqla+sqlite:///{tmp / 'broker.sqlite'}",
        port=free_port(),
        extra_env=extra_env,
        workers=workers,
        cwd=cwd,
    )


def start_stack(
    *,
    tmp: Path,
    database_url: str,
    broker_url: str,
    port: int | None = None,
    extra_env: dict[str, str] | None = None,
    workers: int = 1,
    cwd: Path = REPO_ROOT,
) -> Stack:
    """``relay up`` in ``cwd`` (the project folder unless told) with ``tmp`` its var dir."""
    port = port or free_port()
    env = {
        **os.environ,
        "RELAY_ENV": "development",
        "RELAY_VAR_DIR": str(tmp),
        "RELAY_DATABASE_URL": database_url,
        "RELAY_BROKER_URL": broker_url,
        "RELAY_UPSTREAM_REPO": UPSTREAM,
        "RELAY_WEBHOOK_SECRETS": json.dumps(SECRETS),
        "RELAY_MAX_BODY_BYTES": str(MAX_BODY),
        "RELAY_EVENT_HANDLERS": json.dumps([handlers.DOTTED]),
        "RELAY_TEST_MARKER_DIR": str(tmp / "markers"),
        "RELAY_LOG_JSON": "true",
        "RELAY_RUNNER_ENABLED": "false",
        "RELAY_DEMO_REPLAY": "",
        "RELAY_NIGHTLY_CRON": "",
        # no stack starts a traced import map's learning (20+ minutes of a planner process): a
        # job without the map is planned without it and says so; a map the seed holds is used
        "RELAY_IMPORT_MAP_LEARNING": "false",
        **(extra_env or {}),
    }
    if env["RELAY_RUNNER_ENABLED"].strip().lower() in ("1", "true", "yes", "on"):
        _seed_has_the_spyre_core(env.get("RELAY_CACHE_SEED", ""))  # what its workers copy
    (tmp / "markers").mkdir(parents=True, exist_ok=True)
    log_path = tmp / "relay-up.log"
    log = open(log_path, "wb")  # noqa: SIM115 - owned by the subprocess for its lifetime
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "up", "--port", str(port), "--workers", str(workers)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        start_new_session=True,
    )
    stack = Stack(
        base_url=f"http://127.0.0.1:{port}",
        database_url=database_url,
        broker_url=broker_url,
        log_path=log_path,
        proc=proc,
        env=env,
        log_file=log,
    )

    def ready() -> bool:
        try:
            return httpx.get(f"{stack.base_url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        stack.wait_for(ready, timeout=90, what="relay up to become ready")
        # The worker logs "ready" once it consumes from the broker.
        stack.wait_for(
            lambda: (
                log_path.read_bytes().count(b"ready.") >= 3
                and b"beat: Starting" in log_path.read_bytes()
            ),
            timeout=90,
            what="the three Celery workers (control, planner, shards) and the beat",
        )
        if _warms_at_boot(env):
            # each shard worker process starts its warm pool when it boots: a stack is ready
            # when they are (or said why not; the first shard then tries again)
            stack.wait_for(
                lambda: (
                    log_path.read_bytes().count(b"warm pool ready")
                    + log_path.read_bytes().count(b"warm pool failed")
                    >= workers
                ),
                timeout=180,
                what=f"the warm pools of {workers} shard worker process(es)",
            )
    except BaseException:
        stack.stop()
        raise
    return stack


@functools.cache
def _seed_has_the_spyre_core(seed: str) -> None:
    """Build the spyre C++ core into the cache seed the stacks copy it from (tests/conftest.py:
    the session's var dir), once, when it has none: else every stack's shard worker would build
    it into its own fresh var dir (a minute each)."""
    folder = Path(seed) / "torch_extensions" if seed.strip() else None
    if folder is None or any(folder.glob("*/built.json")):
        return
    subprocess.run(
        [sys.executable, "-m", "spyre_stack"],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
        env={**os.environ, "SPYRE_EXTENSIONS_DIR": str(folder)},
        timeout=900,
    )


def _warms_at_boot(env: dict[str, str]) -> bool:
    def on(name: str, default: str) -> bool:
        return env.get(name, default).strip().lower() in ("1", "true", "yes", "on")

    return (
        on("RELAY_RUNNER_ENABLED", "true")
        and on("RELAY_WARM_POOL", "true")
        and on("RELAY_WARM_POOL_AT_BOOT", "true")
    )


class RelayUp:
    """What the ``relay_up`` fixture hands a test: starts stacks, and the configuration every
    stack shares (its webhook secrets, the upstream it serves, its body limit, the label its
    fail-once event handler reacts to)."""

    SECRETS = SECRETS
    UPSTREAM = UPSTREAM
    MAX_BODY = MAX_BODY
    KINDS = KINDS
    FAIL_ONCE_LABEL = handlers.LABEL
    Stack = Stack
    pull_request = staticmethod(pull_request_opened)

    @staticmethod
    def start(
        *,
        tmp: Path,
        database_url: str,
        broker_url: str,
        port: int | None = None,
        extra_env: dict[str, str] | None = None,
        workers: int = 1,
    ) -> Stack:
        """``relay up`` on the given database and broker (the caller stops it)."""
        return start_stack(
            tmp=tmp,
            database_url=database_url,
            broker_url=broker_url,
            port=port,
            extra_env=extra_env,
            workers=workers,
        )

    @staticmethod
    def local(
        tmp: Path,
        *,
        extra_env: dict[str, str] | None = None,
        workers: int = 1,
        cwd: Path = REPO_ROOT,
    ) -> Stack:
        """``relay up`` on SQLite and the embedded broker in ``tmp``, run in ``cwd`` (the
        caller stops it)."""
        return start_local_stack(tmp, extra_env=extra_env, workers=workers, cwd=cwd)

    @staticmethod
    @contextlib.contextmanager
    def running(
        kind: str, tmp: Path, *, extra_env: dict[str, str] | None = None
    ) -> Iterator[Stack]:
        """``relay up`` for the duration of a ``with``: ``kind`` "sqlite+embedded" (files in
        ``tmp``) or "postgres+redis" (a fresh database and Redis index of the CI servers)."""
        if kind == "sqlite+embedded":
            stack = start_local_stack(tmp, extra_env=extra_env)
            try:
                yield stack
            finally:
                stack.stop()
        elif kind == "postgres+redis":
            broker = fresh_redis_url()
            with fresh_postgres_database() as database_url:
                stack = start_stack(
                    tmp=tmp, database_url=database_url, broker_url=broker, extra_env=extra_env
                )
                try:
                    yield stack
                finally:
                    stack.stop()
        else:
            raise ValueError(f"unknown stack kind {kind!r} (expected one of {KINDS})")
