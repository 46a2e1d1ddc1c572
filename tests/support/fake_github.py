"""A fake GitHub REST API served over real HTTP on loopback, speaking GitHub's wire format for
what the relay role calls: a GitHub App's installation lookup and installation tokens (the app's
JWT verified with its public key), ``repository_dispatch``, a pull request's files and check
runs. It records every call and can be scripted, per repository, to answer 5xx, 403
rate-limited with ``Retry-After`` (or an ``X-RateLimit-Reset``), or slowly. It also serves plain
files (an allowlist by URL, with an ETag).
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import threading
import time
import urllib.parse
from collections import defaultdict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int
    at: float


@dataclass
class Scripted:
    """One scripted answer: a status with headers, after an optional delay."""

    status: int = 204
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    body: Any = None


def server_error(status: int = 502) -> Scripted:
    return Scripted(status=status, body={"message": "Server Error"})


def rate_limited(retry_after: float | None = 1, reset_in: int | None = None) -> Scripted:
    headers = {"x-ratelimit-remaining": "0"}
    if retry_after is not None:
        headers["retry-after"] = str(retry_after)
    if reset_in is not None:
        headers["x-ratelimit-reset"] = str(int(time.time()) + reset_in)
    return Scripted(
        status=403,
        headers=headers,
        body={"message": "You have exceeded a secondary rate limit."},
    )


def slow(seconds: float) -> Scripted:
    return Scripted(status=204, delay=seconds)


class FakeGitHub:
    def __init__(self, *, app_id: str = "4242", token_lifetime: int = 3600) -> None:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.private_key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        self._public_key = key.public_key()
        self.app_id = app_id
        self.token_lifetime = token_lifetime
        self.url = ""
        self.calls: list[Call] = []
        self.scripts: dict[str, deque[Scripted]] = defaultdict(deque)  # repo -> next answers
        self.files: dict[str, str] = {}  # path -> content of plain files
        self.file_delay: dict[str, float] = {}  # path -> seconds its GET takes
        # upstream repo -> branches of its open pull requests (GET /repos/{repo}/pulls?head=)
        self.open_pulls: dict[str, set[str]] = defaultdict(set)
        self.heads: dict[str, str] = {}  # "repo@branch" -> head commit SHA
        self.pr_files: dict[tuple[str, int], list[str]] = {}
        self.installations: dict[str, int] = {}  # owner -> installation id
        self.tokens: dict[str, tuple[int, float]] = {}  # token -> (installation, expiry)
        self.check_runs: dict[int, dict[str, Any]] = {}
        self.dispatch_delay = 0.0  # seconds every accepted repository_dispatch takes
        self.lock = threading.Lock()

    # --- what tests read
    def dispatches(self, repo: str | None = None) -> list[Call]:
        return [
            c
            for c in self.calls
            if c.method == "POST"
            and c.path.endswith("/dispatches")
            and c.status == 204
            and (repo is None or c.path == f"/repos/{repo}/dispatches")
        ]

    def dispatch_count(self) -> int:
        with self.lock:
            return sum(
                1
                for c in self.calls
                if c.status == 204 and c.method == "POST" and c.path.endswith("/dispatches")
            )

    def check_run_updates(self, status: int | None = 200) -> list[Call]:
        """The PATCHes of check runs (answered ``status``; None: all of them)."""
        with self.lock:
            return [
                c
                for c in self.calls
                if c.method == "PATCH"
                and "/check-runs/" in c.path
                and (status is None or c.status == status)
            ]

    def token_requests(self) -> list[Call]:
        return [c for c in self.calls if c.path.endswith("/access_tokens")]

    def script(self, repo: str, *answers: Scripted) -> None:
        with self.lock:
            self.scripts[repo].extend(answers)

    # --- the API
    def _app_jwt_ok(self, auth: str) -> bool:
        try:
            claims = jwt.decode(
                auth.removeprefix("Bearer "), self._public_key, algorithms=["RS256"]
            )
        except jwt.InvalidTokenError:
            return False
        return str(claims.get("iss")) == self.app_id

    def _installation_token_ok(self, auth: str) -> bool:
        with self.lock:
            found = self.tokens.get(auth.removeprefix("Bearer "))
        return found is not None and found[1] > time.time()

    def handle(self, method: str, path: str, headers: dict[str, str], body: Any) -> Scripted:
        auth = headers.get("authorization", "")
        if method == "GET" and path in self.files:
            text = self.files[path]
            delay = self.file_delay.get(path, 0.0)
            etag = '"' + hashlib.sha256(text.encode()).hexdigest()[:16] + '"'
            if headers.get("if-none-match") == etag:
                return Scripted(status=304, headers={"etag": etag}, delay=delay)
            return Scripted(status=200, headers={"etag": etag}, body=text, delay=delay)
        if m := re.fullmatch(r"/repos/([^/]+)/([^/]+)/installation", path):
            if not self._app_jwt_ok(auth):
                return Scripted(401, body={"message": "A JSON web token could not be decoded"})
            owner = m.group(1)
            with self.lock:
                installation = self.installations.setdefault(owner, 1000 + len(self.installations))
            return Scripted(200, body={"id": installation, "account": {"login": owner}})
        if m := re.fullmatch(r"/app/installations/(\d+)/access_tokens", path):
            if method != "POST" or not self._app_jwt_ok(auth):
                return Scripted(401, body={"message": "A JSON web token could not be decoded"})
            token = "ghs_" + secrets.token_hex(18)
            expires = time.time() + self.token_lifetime
            with self.lock:
                self.tokens[token] = (int(m.group(1)), expires)
            stamp = datetime.fromtimestamp(expires, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            return Scripted(201, body={"token": token, "expires_at": stamp})
        if not self._installation_token_ok(auth):
            return Scripted(401, body={"message": "Bad credentials"})
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/dispatches", path):
            with self.lock:
                queue = self.scripts.get(m.group(1))
                scripted = queue.popleft() if queue else None
            if scripted is not None:
                return scripted
            if not isinstance(body, dict) or not isinstance(body.get("event_type"), str):
                return Scripted(422, body={"message": "Invalid request."})
            if len(json.dumps(body.get("client_payload", {}))) > 65_535:
                return Scripted(422, body={"message": "client_payload is too large"})
            return Scripted(204, delay=self.dispatch_delay)
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/pulls/(\d+)/files", path):
            files = self.pr_files.get((m.group(1), int(m.group(2))), [])
            page = int(headers.get("x-page", "1"))
            chunk = files[(page - 1) * 100 : page * 100]
            return Scripted(200, body=[{"filename": f, "status": "modified"} for f in chunk])
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/commits/([^/]+)", path):
            sha = self.heads.get(f"{m.group(1)}@{m.group(2)}")
            if sha is None:
                return Scripted(422, body={"message": f"No commit found for SHA: {m.group(2)}"})
            return Scripted(200, body={"sha": sha, "commit": {"message": "head"}})
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/pulls", path):
            # GitHub's list filter: head=owner:branch, state=open
            head = headers.get("x-query-head", "")
            owner, _, branch = head.partition(":")
            with self.lock:
                found = owner == m.group(1).split("/")[0] and branch in self.open_pulls[m.group(1)]
            pulls = [{"number": 1, "state": "open", "head": {"ref": branch}}] if found else []
            return Scripted(200, body=pulls)
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/check-runs", path):
            with self.lock:
                queue = self.scripts.get(f"check-runs:{m.group(1)}")
                scripted = queue.popleft() if queue else None
            if scripted is not None:
                return scripted
            with self.lock:
                run_id = len(self.check_runs) + 1
                self.check_runs[run_id] = {"repo": m.group(1), **(body or {})}
            return Scripted(201, body={"id": run_id, **(body or {})})
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/check-runs/(\d+)", path):
            with self.lock:
                queue = self.scripts.get(f"check-run-update:{m.group(1)}")
                scripted = queue.popleft() if queue else None
            if scripted is not None:
                return scripted
            with self.lock:
                run = self.check_runs.get(int(m.group(2)))
                if run is None:
                    return Scripted(404, body={"message": "Not Found"})
                run.update(body or {})
            return Scripted(200, body=run)
        return Scripted(404, body={"message": "Not Found"})


@contextmanager
def serve(fake: FakeGitHub) -> Iterator[FakeGitHub]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            path, _, query = self.path.partition("?")
            headers = {k.lower(): v for k, v in self.headers.items()}
            page = re.search(r"(?:^|&)page=(\d+)", query)
            if page:
                headers["x-page"] = page.group(1)
            head = re.search(r"(?:^|&)head=([^&]*)", query)
            if head:
                headers["x-query-head"] = urllib.parse.unquote(head.group(1))
            answer = fake.handle(self.command, path, headers, body)
            if answer.delay:
                time.sleep(answer.delay)
            with fake.lock:
                fake.calls.append(
                    Call(self.command, path, headers, body, answer.status, time.time())
                )
            if isinstance(answer.body, str):
                data, ctype = answer.body.encode(), "text/plain"
            elif answer.body is not None:
                data, ctype = json.dumps(answer.body).encode(), "application/json"
            else:
                data, ctype = b"", "application/json"
            self.send_response(answer.status)
            for k, v in answer.headers.items():
                self.send_header(k, v)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = _serve

        def log_message(self, *args: Any) -> None:
            return None

    class Server(ThreadingHTTPServer):
        request_queue_size = 256  # hundreds of concurrent dispatches (benchmarks) are not refused

    server = Server(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


def expiry_in(seconds: int) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
