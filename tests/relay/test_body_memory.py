"""Bounded reads before authentication, measured (issue #31): the API under a real uvicorn
process while 8 clients each send a 100 MB body to the POST endpoints (half with the length
declared, half chunked), with made-up credentials. Every POST reads at most its limit from the
socket before parsing or authenticating, so the process's peak resident memory grows by less
than 50 MB (on main it grew by hundreds), every client is refused (413 over its limit, 503
while the bodies in flight fill the process's budget), and /healthz answers throughout."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

MB = 1024 * 1024
BODY = 100 * MB
CLIENTS = 8
#: the goal: the process's peak RSS over its RSS before the clients
GOAL = 50 * MB
# (path, headers): the callback (1 MB limit) with any bearer token, the HUD ingest (2 MB) with
# its token, the webhook (its limit) with no signature at all
TARGETS = [
    ("/github/callback", {"Authorization": "Bearer x"}),
    ("/api/crcr/results", {"x-hud-internal-bot": "bot"}),
    ("/github/webhook", {"X-GitHub-Event": "push", "X-GitHub-Delivery": "memory-1"}),
]
#: each 100 MB body is refused: over its endpoint's limit (413), or, while the bodies being read
#: fill the process's budget (RELAY_MAX_BODIES_IN_FLIGHT_BYTES, 32 MiB), for lack of room (503)
REFUSED = {"HTTP/1.1 413 Request Entity Too Large", "HTTP/1.1 503 Service Unavailable"}


def _kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"/proc/{pid}/status has no {field}")


@pytest.fixture
def api(tmp_path: Path, repo_root: Path, free_port: Callable[[], int]) -> Iterator[Any]:
    """The API alone under uvicorn (a real process), on a migrated SQLite database."""
    from store import migrate

    database_url = f"sqlite:///{tmp_path}/relay.sqlite"
    migrate.upgrade(database_url)
    port = free_port()
    env = {
        **os.environ,
        "RELAY_ENV": "development",
        "RELAY_VAR_DIR": str(tmp_path / "var"),
        "RELAY_DATABASE_URL": database_url,
        "RELAY_BROKER_URL": f"sqla+sqlite:///{tmp_path}/broker.sqlite",
        "RELAY_WEBHOOK_SECRETS": '["webhook-secret"]',
        "RELAY_HUD_BOT_TOKEN": "bot",
        "RELAY_LOG_JSON": "false",
    }
    log = open(tmp_path / "uvicorn.log", "wb")  # noqa: SIM115 - the subprocess's, closed below
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "relay.app:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=repo_root,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):  # bounded: up to about a minute on a loaded machine
            if proc.poll() is not None:
                raise AssertionError((tmp_path / "uvicorn.log").read_text())
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise AssertionError("uvicorn did not answer /healthz")
        yield proc, port, base
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def _send(port: int, path: str, headers: dict[str, str], chunked: bool) -> str:
    """POST a 100 MB body (1 MB at a time) until it is sent or the server stops taking it;
    the status line the server answered ("" for none)."""
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {BODY}")
    piece = b"x" * MB
    frame = f"{MB:x}\r\n".encode() + piece + b"\r\n" if chunked else piece
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        try:
            for _ in range(BODY // MB):  # bounded: at most the 100 MB
                sock.sendall(frame)
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        except OSError:  # the server answered and closed, or stopped reading
            pass
        try:
            return sock.recv(200).split(b"\r\n", 1)[0].decode("latin-1")
        except OSError:
            return ""


def test_eight_100_mb_bodies_do_not_grow_the_api_by_50_mb(api: Any) -> None:
    proc, port, base = api
    # warm up every path once (imports, the database, the OIDC verifier) before measuring
    for path, headers in TARGETS:
        assert httpx.post(f"{base}{path}", content=b"{}", headers=headers).status_code < 500
    before = _kib(proc.pid, "VmRSS")
    Path(f"/proc/{proc.pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
    answers: list[str] = []
    health: list[tuple[int, float]] = []
    done = threading.Event()

    # (target, chunked): three chunked webhooks (each may be read up to its 25 MB limit: only
    # the budget keeps three from holding 75 MB), one chunked and one declared of the others
    plan = [
        (2, True),
        (2, True),
        (2, True),
        (2, False),
        (0, True),
        (0, False),
        (1, True),
        (1, False),
    ]

    def client(i: int) -> None:
        target, chunked = plan[i]
        path, headers = TARGETS[target]
        answers.append(_send(port, path, headers, chunked=chunked))

    def poll_health() -> None:
        with httpx.Client(base_url=base, timeout=5) as http:
            while not done.is_set():
                start = time.perf_counter()
                status = http.get("/healthz").status_code
                health.append((status, time.perf_counter() - start))
                time.sleep(0.05)

    poller = threading.Thread(target=poll_health)
    poller.start()
    clients = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in clients:
        t.start()
    for t in clients:
        t.join(timeout=300)
    done.set()
    poller.join(timeout=30)
    peak = _kib(proc.pid, "VmHWM")
    slowest = max(seconds for _, seconds in health)
    print(
        f"RSS before {before / MB:.1f} MB, peak {peak / MB:.1f} MB "
        f"(+{(peak - before) / MB:.1f} MB); /healthz {len(health)} answers, "
        f"slowest {slowest * 1000:.0f} ms"
    )
    assert not any(t.is_alive() for t in clients)
    assert len(answers) == CLIENTS and set(answers) <= REFUSED, answers
    assert peak - before < GOAL, f"peak grew by {(peak - before) / MB:.0f} MB"
    assert health and all(status == 200 for status, _ in health)
