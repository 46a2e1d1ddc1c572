"""The GitHub REST API as the relay role uses it: installation tokens of a GitHub App (or a
plain token), ``repository_dispatch``, a PR's changed files, check runs.

Every answer that is not a success becomes :class:`GitHubError` with whether it is worth
retrying and, when GitHub says, how long to wait (``Retry-After``, or the rate limit's reset).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
import jwt

log = logging.getLogger("fanout.github")

#: an installation token is renewed this long before GitHub says it expires
TOKEN_MARGIN_SECONDS = 300
API_VERSION = "2022-11-28"
MAX_PR_FILES = 3000  # GitHub lists at most 3,000 files of a pull request


class GitHubError(Exception):
    def __init__(
        self, message: str, *, status: int | None, retryable: bool, retry_after: float | None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after


def _wait_hint(response: httpx.Response, now: float) -> float | None:
    retry_after = response.headers.get("retry-after")
    if retry_after is not None:
        try:
            return max(0.0, float(retry_after))
        except ValueError:
            return None
    if response.headers.get("x-ratelimit-remaining") == "0":
        reset = response.headers.get("x-ratelimit-reset")
        if reset is not None and reset.isdigit():
            return max(0.0, int(reset) - now)
    return None


def error_of(response: httpx.Response, what: str) -> GitHubError:
    """The error a non-2xx answer stands for."""
    status = response.status_code
    hint = _wait_hint(response, time.time())
    text = " ".join(response.text[:200].split())
    rate_limited = status == 429 or (status == 403 and hint is not None)
    retryable = status >= 500 or rate_limited or status in (401, 408)
    kind = "rate limited" if rate_limited else f"HTTP {status}"
    return GitHubError(
        f"{what}: {kind}: {text}", status=status, retryable=retryable, retry_after=hint
    )


@dataclass
class _Token:
    value: str
    expires_at: float


class GitHubApi:
    """One client per process; tokens are cached across calls (thread-safe)."""

    def __init__(
        self,
        *,
        base_url: str,
        app_id: str | None = None,
        private_key: str | None = None,
        token: str | None = None,
        timeout: float = 10.0,
    ) -> None:
        if not token and not (app_id and private_key):
            raise ValueError(
                "GitHub credentials missing: set RELAY_GITHUB_APP_ID and "
                "RELAY_GITHUB_APP_PRIVATE_KEY, or RELAY_GITHUB_TOKEN"
            )
        self.base_url = base_url.rstrip("/")
        self.app_id = app_id
        self.private_key = private_key
        self.token = token
        self.client = httpx.Client(base_url=self.base_url, timeout=timeout)
        self._lock = threading.Lock()
        self._installations: dict[str, int] = {}  # owner -> installation id
        self._tokens: dict[int, _Token] = {}
        self.tokens_minted = 0

    def close(self) -> None:
        self.client.close()

    def _headers(self, auth: str) -> dict[str, str]:
        return {
            "Authorization": auth,
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION,
            "User-Agent": "crcr-relay",
        }

    def app_jwt(self) -> str:
        now = int(time.time())
        assert self.app_id and self.private_key
        return jwt.encode(
            {"iat": now - 60, "exp": now + 540, "iss": self.app_id},
            self.private_key,
            algorithm="RS256",
        )

    def _request(self, method: str, url: str, what: str, auth: str, **kw: Any) -> httpx.Response:
        try:
            response = self.client.request(method, url, headers=self._headers(auth), **kw)
        except httpx.HTTPError as exc:
            raise GitHubError(
                f"{what}: {type(exc).__name__}: {exc}",
                status=None,
                retryable=True,
                retry_after=None,
            ) from exc
        if response.status_code >= 300:
            raise error_of(response, what)
        return response

    def auth_for(self, repo: str) -> str:
        """The Authorization header for calls on ``repo`` (an installation token, cached)."""
        if self.token:
            return f"Bearer {self.token}"
        owner = repo.split("/", 1)[0]
        with self._lock:
            installation = self._installations.get(owner)
        if installation is None:
            response = self._request(
                "GET",
                f"/repos/{repo}/installation",
                f"installation of {repo}",
                f"Bearer {self.app_jwt()}",
            )
            installation = int(response.json()["id"])
            with self._lock:
                self._installations[owner] = installation
        with self._lock:
            cached = self._tokens.get(installation)
            if cached is not None and cached.expires_at - TOKEN_MARGIN_SECONDS > time.time():
                return f"Bearer {cached.value}"
        response = self._request(
            "POST",
            f"/app/installations/{installation}/access_tokens",
            f"token of installation {installation}",
            f"Bearer {self.app_jwt()}",
        )
        body = response.json()
        expires = datetime.fromisoformat(str(body["expires_at"]).replace("Z", "+00:00"))
        with self._lock:
            self._tokens[installation] = _Token(str(body["token"]), expires.timestamp())
            self.tokens_minted += 1
        return f"Bearer {body['token']}"

    def forget_token(self, repo: str) -> None:
        """Drop the cached token of ``repo``'s installation (GitHub answered 401)."""
        owner = repo.split("/", 1)[0]
        with self._lock:
            installation = self._installations.get(owner)
            if installation is not None:
                self._tokens.pop(installation, None)

    def repository_dispatch(
        self, repo: str, *, event_type: str, client_payload: dict[str, Any]
    ) -> int:
        auth = self.auth_for(repo)
        try:
            response = self._request(
                "POST",
                f"/repos/{repo}/dispatches",
                f"repository_dispatch to {repo}",
                auth,
                json={"event_type": event_type, "client_payload": client_payload},
            )
        except GitHubError as exc:
            if exc.status == 401:
                self.forget_token(repo)
            raise
        return response.status_code

    def pull_request_files(self, repo: str, number: int) -> list[str]:
        auth = self.auth_for(repo)
        files: list[str] = []
        page = 1
        while len(files) < MAX_PR_FILES:
            response = self._request(
                "GET",
                f"/repos/{repo}/pulls/{number}/files",
                f"files of {repo}#{number}",
                auth,
                params={"per_page": 100, "page": page},
            )
            batch = response.json()
            files += [str(f["filename"]) for f in batch if isinstance(f, dict)]
            if len(batch) < 100:
                break
            page += 1
        return files

    def create_check_run(self, repo: str, body: dict[str, Any]) -> dict[str, Any]:
        auth = self.auth_for(repo)
        response = self._request(
            "POST", f"/repos/{repo}/check-runs", f"check run on {repo}", auth, json=body
        )
        result: dict[str, Any] = response.json()
        return result

    def update_check_run(self, repo: str, check_run_id: int, body: dict[str, Any]) -> None:
        auth = self.auth_for(repo)
        self._request(
            "PATCH",
            f"/repos/{repo}/check-runs/{check_run_id}",
            f"check run {check_run_id}",
            auth,
            json=body,
        )

    def has_open_pull(self, repo: str, *, head: str) -> bool:
        """Whether ``repo`` has an open pull request from ``head`` (``owner:branch``)."""
        auth = self.auth_for(repo)
        response = self._request(
            "GET",
            f"/repos/{repo}/pulls",
            f"pull requests of {repo} from {head}",
            auth,
            params={"head": head, "state": "open", "per_page": 1},
        )
        pulls = response.json()
        return isinstance(pulls, list) and len(pulls) > 0

    def branch_head(self, repo: str, branch: str) -> str:
        """The commit SHA at the head of ``repo``'s ``branch``."""
        auth = self.auth_for(repo)
        response = self._request(
            "GET", f"/repos/{repo}/commits/{branch}", f"head of {repo}@{branch}", auth
        )
        return str(response.json()["sha"])
