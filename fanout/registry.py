"""The downstreams the relay serves: the CRCR allowlist (a file or a URL) with the policy file,
loaded once and reloaded when either changes.

A reload that finds a broken file keeps serving the last good set and says why
(:attr:`Snapshot.error`); a broken file at start is an error the caller reports. With
``background=True`` (the web service) an allowlist URL is re-fetched by a thread of its own:
``current()`` never waits on the network, it answers the last set and starts the fetch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from fanout import policy as policy_file
from fanout.model import AllowlistedDownstream
from wire.crcr import allowlist

log = logging.getLogger("fanout.registry")


class RegistryError(ValueError):
    """The allowlist or the policy cannot be loaded; ``problems`` are ``file:line: what``."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass(frozen=True)
class Snapshot:
    downstreams: tuple[AllowlistedDownstream, ...] = ()
    digest: str = ""  # of the allowlist and policy bytes: changes when either does
    loaded_at: float = 0.0
    error: str | None = None  # the last reload's problem (the set above is the last good one)
    by_repo: dict[str, AllowlistedDownstream] = field(default_factory=dict, compare=False)

    def get(self, repo: str) -> AllowlistedDownstream | None:
        return self.by_repo.get(repo)


def _is_url(source: str) -> bool:
    return source.startswith(("http://", "https://"))


class Registry:
    """``current()`` is the snapshot in force, re-read at most every ``interval`` seconds."""

    def __init__(
        self,
        *,
        allowlist_source: str,
        policy_path: Path | None = None,
        interval: float = 5.0,
        background: bool = False,
    ) -> None:
        self.allowlist_source = allowlist_source
        self.policy_path = policy_path
        self.interval = interval
        self.background = background and _is_url(allowlist_source)
        self._reloading: threading.Thread | None = None
        self._lock = threading.Lock()
        self._reload_lock = threading.Lock()
        self._checked = 0.0
        self._etag: str | None = None
        self._url_text: str | None = None
        self._snapshot = self._load()  # raises RegistryError: the caller reports it

    def _read_allowlist(self) -> tuple[str, str]:
        source = self.allowlist_source
        if not _is_url(source):
            try:
                return Path(source).read_text(), source
            except OSError as exc:
                raise RegistryError([f"{source}:1: cannot read: {exc.strerror}"]) from exc
        headers = {"If-None-Match": self._etag} if self._etag else {}
        try:
            response = httpx.get(source, headers=headers, timeout=10.0, follow_redirects=True)
        except httpx.HTTPError as exc:
            raise RegistryError([f"{source}:1: cannot fetch: {type(exc).__name__}: {exc}"]) from exc
        if response.status_code == 304 and self._url_text is not None:
            return self._url_text, source
        if response.status_code != 200:
            raise RegistryError([f"{source}:1: cannot fetch: HTTP {response.status_code}"])
        self._etag = response.headers.get("etag")
        self._url_text = response.text
        return response.text, source

    def _load(self) -> Snapshot:
        text, name = self._read_allowlist()
        policy_text = ""
        if self.policy_path is not None:
            try:
                policy_text = self.policy_path.read_text()
            except OSError as exc:
                raise RegistryError([f"{self.policy_path}:1: cannot read: {exc.strerror}"]) from exc
        digest = hashlib.sha256(text.encode() + b"\0" + policy_text.encode()).hexdigest()
        current = getattr(self, "_snapshot", None)
        if current is not None and current.digest == digest:
            return dataclasses.replace(current, error=None) if current.error else current
        try:
            entries = allowlist.parse(text, path=name)
            downstreams = (
                policy_file.parse(policy_text, entries=entries, path=str(self.policy_path))
                if self.policy_path is not None
                else policy_file.with_defaults(entries)
            )
        except (allowlist.AllowlistError, policy_file.PolicyError) as exc:
            raise RegistryError(exc.problems) from exc
        log.info("downstreams loaded", extra={"downstreams": len(downstreams), "digest": digest})
        return Snapshot(
            downstreams=tuple(downstreams),
            digest=digest,
            loaded_at=time.time(),
            by_repo={d.repo: d for d in downstreams},
        )

    def current(self) -> Snapshot:
        now = time.monotonic()
        if now - self._checked < self.interval:
            return self._snapshot
        if self.background:
            with self._lock:
                running = self._reloading is not None and self._reloading.is_alive()
                if not running and now - self._checked >= self.interval:
                    self._checked = now
                    self._reloading = threading.Thread(
                        target=self.reload, name="allowlist-reload", daemon=True
                    )
                    self._reloading.start()
            return self._snapshot
        with self._lock:
            if now - self._checked < self.interval:
                return self._snapshot
            self._checked = now
            return self.reload()

    def reload(self) -> Snapshot:
        """Read the allowlist and policy now (a broken one keeps the last good set)."""
        with self._reload_lock:
            try:
                self._snapshot = self._load()
            except RegistryError as exc:
                if self._snapshot.error != str(exc):
                    log.error("downstreams not reloaded, the last good set stays: %s", exc)
                self._snapshot = Snapshot(
                    downstreams=self._snapshot.downstreams,
                    digest=self._snapshot.digest,
                    loaded_at=self._snapshot.loaded_at,
                    error=str(exc),
                    by_repo=self._snapshot.by_repo,
                )
            return self._snapshot
