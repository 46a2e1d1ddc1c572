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

from config.logs import bind
from config.settings import Settings
from fanout import checks
from fanout import dispatch_token as tokens
from fanout import payload as payloads
from fanout import policy as policies
from fanout.github import GitHubApi, GitHubError
from fanout.model import Downstream
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
    rng = rng or random.Random()
    lease = settings.outbox_claim_seconds
    with session_scope(settings.database_url) as session:
        if not outbox.claim(session, pk=pk, lease_seconds=lease):
            return SendResult("not-due")
        loaded = outbox.load(session, pk=pk)
        assert loaded is not None
        dispatch, delivery, row = loaded
        attempts, nonce, repo = dispatch.attempts, dispatch.nonce or tokens.new_nonce(), row.repo
        level, device, downstream_pk = row.level, row.device, row.id
        policy = policy_from_json(row.policy or {})
        # the typed event ingress stored, and the upstream payload CRCR forwards verbatim
        event = load_event(delivery.normalized)
        payload = load_payload(delivery.upstream_payload)
    downstream = Downstream(
        entry=AllowlistEntry(repo=repo, level=Level(level), device=device), policy=policy
    )

    def finish(state: DispatchState, **kw: Any) -> None:
        with session_scope(settings.database_url) as session:
            outbox.finish(session, pk=pk, state=state, **kw)

    def retry_or_dead(
        error: str, status: int | None, retryable: bool, hint: float | None
    ) -> SendResult:
        if not retryable or attempts >= settings.dispatch_max_attempts:
            why = "refused" if not retryable else f"{attempts} attempts spent"
            finish(DispatchState.DEAD, error=f"{why}: {error}", http_status=status)
            log.warning("dispatch dead-lettered: %s", error)
            return SendResult(DispatchState.DEAD.value, error)
        wait = checks.backoff(
            attempts,
            base=settings.dispatch_backoff_seconds,
            cap=settings.dispatch_backoff_max_seconds,
            rng=rng,
        )
        if hint is not None:
            wait = hint + rng.random() * min(1.0, hint / 10 + 0.1)
        finish(
            DispatchState.PENDING,
            error=error,
            http_status=status,
            next_attempt_at=utcnow() + timedelta(seconds=wait),
        )
        log.info("dispatch will be retried in %.1f s: %s", wait, error)
        return SendResult(DispatchState.PENDING.value, error, retry_in=wait)

    with bind(delivery_id=event.delivery_id, dispatch_pk=pk, downstream=repo):
        try:
            files = changed_files(api, settings=settings, event=event)
        except GitHubError as exc:
            return retry_or_dead(str(exc), exc.status, exc.retryable, exc.retry_after)
        if policy.paths is not None:
            decision = policies.admit(downstream, subject_of(event, files or []))
            if not decision.admitted:
                finish(DispatchState.SKIPPED, error=decision.reason)
                return SendResult(DispatchState.SKIPPED.value, decision.reason)
        if policy.max_in_flight is not None:
            with session_scope(settings.database_url) as session:
                since = utcnow() - timedelta(seconds=policy.start_timeout + policy.run_timeout)
                busy = outbox.in_flight(session, downstream_pk=downstream_pk, since=since)
            if busy >= policy.max_in_flight:
                wait = IN_FLIGHT_WAIT_SECONDS
                finish(
                    DispatchState.PENDING,
                    error=f"{busy} jobs in flight (max {policy.max_in_flight})",
                    next_attempt_at=utcnow() + timedelta(seconds=wait),
                    refund_attempt=True,
                )
                return SendResult(DispatchState.PENDING.value, "in flight", retry_in=wait)
        claims = tokens.DispatchClaims(
            delivery_id=event.upstream_delivery_id or event.delivery_id,
            repo=repo,
            upstream_repo=event.repo,
            pr_number=event.pr_number,
            head_sha=event.head_sha,
            nonce=nonce,
            expires_at=int(time.time()) + policy.start_timeout + policy.run_timeout + 3600,
        )
        signed = tokens.sign(claims, secret=settings.dispatch_token_secret.get_secret_value())
        try:
            body = payloads.build(
                event_type=event.event,
                delivery_id=claims.delivery_id,
                upstream_payload=payload,
                dispatch_token=signed,
                changed_files=files,
                merged=event.merged if event.event == "pull_request" else None,
            )
        except payloads.PayloadTooLarge as exc:
            return retry_or_dead(str(exc), None, False, None)
        try:
            status = api.repository_dispatch(repo, event_type=event.event, client_payload=body)
        except GitHubError as exc:
            return retry_or_dead(str(exc), exc.status, exc.retryable, exc.retry_after)
        finish(DispatchState.SENT, http_status=status)
        log.info("dispatched", extra={"attempts": attempts})
        if checks.wants_check(level, device, event):
            # the dispatch stands whatever happens to its check run, retried on its own
            with session_scope(settings.database_url) as session:
                outbox.want_check(session, pk=pk)
            check = checks.create_for_dispatch(settings, api, pk, rng=rng)
            return SendResult(DispatchState.SENT.value, check_retry_in=check.retry_in)
        return SendResult(DispatchState.SENT.value)
