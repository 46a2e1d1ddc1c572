"""Sending one outbox row: claim it, build CRCR's client_payload with our token and the changed
files, call GitHub's ``repository_dispatch``, and record what happened: SENT, a retry at
``next_attempt_at`` (backoff with jitter, or what ``Retry-After`` / the rate-limit reset says),
SKIPPED by the policy's paths, or DEAD once the attempts are spent or GitHub refuses for good.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy.orm import Session

from config.logs import bind
from config.settings import Settings
from fanout import checks
from fanout import dispatch_token as tokens
from fanout import payload as payloads
from fanout import policy as policies
from fanout.github import GitHubApi, GitHubError
from fanout.model import AllowlistedDownstream
from fanout.role import policy_from_json, subject_of
from store import outbox
from store.db import session_scope
from store.models import DispatchState, utcnow
from wire.crcr.allowlist import AllowlistEntry, Level
from wire.github.events import UpstreamEvent, load_event, load_payload

log = logging.getLogger("fanout.send")

#: how long a dispatch waits when its downstream has max_in_flight jobs running
IN_FLIGHT_WAIT_SECONDS = 60.0


@dataclass(frozen=True)
class SendResult:
    state: str  # a DispatchState value, or "not-due" when another sender has it
    detail: str = ""
    retry_in: float | None = None  # seconds until the next attempt (state pending)
    check_retry_in: float | None = None  # the check run's next attempt (its creation failed)


class _FilesCache:
    """A PR's changed files, fetched once per delivery for all its downstreams."""

    def __init__(self, size: int = 256) -> None:
        self._items: OrderedDict[str, list[str]] = OrderedDict()
        self._lock = threading.Lock()
        self.size = size

    def get(self, key: str) -> list[str] | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: str, value: list[str]) -> None:
        with self._lock:
            self._items[key] = value
            while len(self._items) > self.size:
                self._items.popitem(last=False)


FILES = _FilesCache()


def changed_files(api: GitHubApi, *, settings: Settings, event: UpstreamEvent) -> list[str] | None:
    """A push's files (from the event), a pull request's (from GitHub, once per delivery)."""
    if event.event == "push":
        return event.changed_files
    if event.event == "pull_request" and event.pr_number is not None:
        key = f"{event.delivery_id}:{event.pr_number}"
        files = FILES.get(key)
        if files is None:
            files = api.pull_request_files(settings.upstream_repo, event.pr_number)
            FILES.put(key, files)
        return files
    return None


def send_one(
    pk: int, *, settings: Settings, api: GitHubApi, rng: random.Random | None = None
) -> SendResult:
    """One attempt at outbox row ``pk``."""
    with session_scope(settings.database_url) as session:
        if not outbox.claim(session, pk=pk, lease_seconds=settings.outbox_claim_seconds):
            return SendResult("not-due")
        attempt = _Attempt.load(session, pk, settings, rng or random.Random())
    with bind(delivery_id=attempt.event.delivery_id, dispatch_pk=pk, downstream=attempt.repo):
        return attempt.send(api)


@dataclass
class _Attempt:
    """One claimed outbox row on its way to GitHub, and how to record what became of it."""

    pk: int
    settings: Settings
    rng: random.Random
    attempts: int
    nonce: str
    downstream: AllowlistedDownstream
    downstream_pk: int
    event: UpstreamEvent  # the typed event ingress stored
    payload: Any  # the upstream payload CRCR forwards verbatim

    @classmethod
    def load(cls, session: Session, pk: int, settings: Settings, rng: random.Random) -> _Attempt:
        loaded = outbox.load(session, pk=pk)
        assert loaded is not None
        dispatch, delivery, row = loaded
        entry = AllowlistEntry(repo=row.repo, level=Level(row.level), device=row.device)
        return cls(
            pk=pk,
            settings=settings,
            rng=rng,
            attempts=dispatch.attempts,
            nonce=dispatch.nonce or tokens.new_nonce(),
            downstream=AllowlistedDownstream(
                entry=entry, policy=policy_from_json(row.policy or {})
            ),
            downstream_pk=row.id,
            event=load_event(delivery.normalized),
            payload=load_payload(delivery.upstream_payload),
        )

    @property
    def repo(self) -> str:
        return self.downstream.repo

    def send(self, api: GitHubApi) -> SendResult:
        """The changed files, the policy's admission, the signed body, the dispatch."""
        event = self.event
        try:
            files = changed_files(api, settings=self.settings, event=event)
        except GitHubError as exc:
            return self.retry_or_dead(str(exc), exc.status, exc.retryable, exc.retry_after)
        held = self.held(files)
        if held is not None:
            return held
        try:
            body = self.body(files)
        except payloads.PayloadTooLarge as exc:
            return self.retry_or_dead(str(exc), None, False, None)
        try:
            status = api.repository_dispatch(self.repo, event_type=event.event, client_payload=body)
        except GitHubError as exc:
            return self.retry_or_dead(str(exc), exc.status, exc.retryable, exc.retry_after)
        self.finish(DispatchState.SENT, http_status=status)
        log.info("dispatched", extra={"attempts": self.attempts})
        if checks.wants_check(self.downstream.level.value, self.downstream.entry.device, event):
            # the dispatch stands whatever happens to its check run, retried on its own
            with session_scope(self.settings.database_url) as session:
                outbox.want_check(session, pk=self.pk)
            check = checks.create_for_dispatch(self.settings, api, self.pk, rng=self.rng)
            return SendResult(DispatchState.SENT.value, check_retry_in=check.retry_in)
        return SendResult(DispatchState.SENT.value)

    def held(self, files: list[str] | None) -> SendResult | None:
        """SKIPPED when the policy's paths do not admit the change; a later attempt when the
        downstream has its policy's max_in_flight jobs running; else None (send it)."""
        policy = self.downstream.policy
        if policy.paths is not None:
            decision = policies.admit(self.downstream, subject_of(self.event, files or []))
            if not decision.admitted:
                self.finish(DispatchState.SKIPPED, error=decision.reason)
                return SendResult(DispatchState.SKIPPED.value, decision.reason)
        if policy.max_in_flight is None:
            return None
        with session_scope(self.settings.database_url) as session:
            since = utcnow() - timedelta(seconds=policy.start_timeout + policy.run_timeout)
            busy = outbox.in_flight(session, downstream_pk=self.downstream_pk, since=since)
        if busy < policy.max_in_flight:
            return None
        wait = IN_FLIGHT_WAIT_SECONDS
        self.finish(
            DispatchState.PENDING,
            error=f"{busy} jobs in flight (max {policy.max_in_flight})",
            next_attempt_at=utcnow() + timedelta(seconds=wait),
            refund_attempt=True,
        )
        return SendResult(DispatchState.PENDING.value, "in flight", retry_in=wait)

    def body(self, files: list[str] | None) -> dict[str, Any]:
        """CRCR's client_payload with our signed dispatch token (PayloadTooLarge past the cap)."""
        event, policy = self.event, self.downstream.policy
        claims = tokens.DispatchClaims(
            delivery_id=event.upstream_delivery_id or event.delivery_id,
            repo=self.repo,
            upstream_repo=event.repo,
            pr_number=event.pr_number,
            head_sha=event.head_sha,
            nonce=self.nonce,
            expires_at=int(time.time()) + policy.start_timeout + policy.run_timeout + 3600,
        )
        secret = self.settings.dispatch_token_secret.get_secret_value()
        return payloads.build(
            event_type=event.event,
            delivery_id=claims.delivery_id,
            upstream_payload=self.payload,
            dispatch_token=tokens.sign(claims, secret=secret),
            changed_files=files,
            merged=event.merged if event.event == "pull_request" else None,
        )

    def finish(self, state: DispatchState, **kw: Any) -> None:
        with session_scope(self.settings.database_url) as session:
            outbox.finish(session, pk=self.pk, state=state, **kw)

    def retry_or_dead(
        self, error: str, status: int | None, retryable: bool, hint: float | None
    ) -> SendResult:
        settings, attempts = self.settings, self.attempts
        if not retryable or attempts >= settings.dispatch_max_attempts:
            why = "refused" if not retryable else f"{attempts} attempts spent"
            self.finish(DispatchState.DEAD, error=f"{why}: {error}", http_status=status)
            log.warning("dispatch dead-lettered: %s", error)
            return SendResult(DispatchState.DEAD.value, error)
        wait = checks.backoff(
            attempts,
            base=settings.dispatch_backoff_seconds,
            cap=settings.dispatch_backoff_max_seconds,
            rng=self.rng,
        )
        if hint is not None:
            wait = hint + self.rng.random() * min(1.0, hint / 10 + 0.1)
        self.finish(
            DispatchState.PENDING,
            error=error,
            http_status=status,
            next_attempt_at=utcnow() + timedelta(seconds=wait),
        )
        log.info("dispatch will be retried in %.1f s: %s", wait, error)
        return SendResult(DispatchState.PENDING.value, error, retry_in=wait)
