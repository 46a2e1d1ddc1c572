"""A GitHub delivery as the relay reads it: its envelope (which upstream event, which payload, a
CRCR dispatch unwrapped) and the normalized :class:`UpstreamEvent` every later stage works from.

Ingress parses a delivery once: :func:`open_envelope` then :func:`normalize`, and the store keeps
the normalized event beside the raw bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

#: Events the relay accepts from the upstream repository (CRCR's set).
SUPPORTED_EVENTS = frozenset({"pull_request", "push", "check_run", "check_suite"})
#: pull_request actions that start downstream work.
PR_ACTIONS = frozenset({"opened", "reopened", "synchronize", "closed"})
CIFLOW_LABEL_PREFIX = "ciflow/crcr/"


class EventError(ValueError):
    """The stored payload cannot be understood as the event it claims to be."""


class UpstreamEvent(BaseModel):
    """What every later stage needs from an upstream event, independent of its wire shape."""

    schema_version: str = "1"
    delivery_id: str
    upstream_delivery_id: str | None = None
    event: str
    action: str | None = None
    repo: str
    sender: str | None = None
    pr_number: int | None = None
    head_sha: str | None = None
    head_ref: str | None = None
    base_sha: str | None = None
    base_ref: str | None = None
    labels: list[str] = Field(default_factory=list)
    merged: bool = False
    author_association: str | None = None
    ref: str | None = None
    before_sha: str | None = None
    after_sha: str | None = None
    check_name: str | None = None
    actionable: bool = True
    reason: str = ""


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def _require(d: Any, *path: str) -> Any:
    value = _get(d, *path)
    if value is None:
        raise EventError(f"payload has no {'.'.join(path)}")
    return value


def parse_body(raw_body: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(raw_body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EventError(f"body is not JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise EventError("body is not a JSON object")
    return payload


def unwrap_dispatch(payload: dict[str, Any]) -> tuple[str, str, dict[str, Any]] | None:
    """(event_type, delivery_id, inner payload) of a CRCR repository_dispatch, else None."""
    cp = payload.get("client_payload")
    if not isinstance(cp, dict):
        return None
    event_type, delivery_id, inner = cp.get("event_type"), cp.get("delivery_id"), cp.get("payload")
    if isinstance(event_type, str) and isinstance(delivery_id, str) and isinstance(inner, dict):
        return event_type, delivery_id, inner
    return None


@dataclass(frozen=True)
class Envelope:
    """One delivery as the upstream sent it: the upstream event and payload (a CRCR
    ``repository_dispatch`` unwrapped to the event inside) and where it came from."""

    event: str
    payload: dict[str, Any]
    source: str = "webhook"  # webhook | repository_dispatch | nightly | replay
    upstream_delivery_id: str | None = None  # a CRCR dispatch's id of the upstream delivery

    @property
    def repo(self) -> str | None:
        name = _get(self.payload, "repository", "full_name")
        return name if isinstance(name, str) else None


def open_envelope(event: str, payload: dict[str, Any], *, source: str = "webhook") -> Envelope:
    """The envelope of a delivery of ``event``; a ``repository_dispatch`` must carry CRCR's
    ``client_payload`` (raises EventError otherwise)."""
    if event == "repository_dispatch":
        unwrapped = unwrap_dispatch(payload)
        if unwrapped is None:
            raise EventError(
                "repository_dispatch without a CRCR client_payload {event_type, delivery_id, payload}"
            )
        inner_event, upstream_delivery_id, inner = unwrapped
        return Envelope(inner_event, inner, "repository_dispatch", upstream_delivery_id)
    return Envelope(event, payload, source)


def stored_envelope(raw_body: bytes, *, event: str, source: str) -> Envelope:
    """The envelope of a stored delivery (its upstream ``event``, its raw body and source)."""
    payload = parse_body(raw_body)
    if source == "repository_dispatch":
        return open_envelope("repository_dispatch", payload)
    return Envelope(event, payload, source)


def normalize_envelope(envelope: Envelope, *, delivery_id: str) -> UpstreamEvent:
    """:func:`normalize` of an envelope. Raises EventError (or pydantic's ValueError) when the
    payload is not the event it claims to be."""
    return normalize(
        event=envelope.event,
        payload=envelope.payload,
        delivery_id=delivery_id,
        upstream_delivery_id=envelope.upstream_delivery_id,
    )


def normalize(
    *,
    event: str,
    payload: dict[str, Any],
    delivery_id: str,
    upstream_delivery_id: str | None = None,
) -> UpstreamEvent:
    """Parse one upstream payload. Raises EventError when required fields are missing."""
    common: dict[str, Any] = {
        "delivery_id": delivery_id,
        "upstream_delivery_id": upstream_delivery_id,
        "event": event,
        "action": payload.get("action"),
        "repo": _require(payload, "repository", "full_name"),
        "sender": _get(payload, "sender", "login"),
    }
    if event == "pull_request":
        pr = _require(payload, "pull_request")
        labels = [lb.get("name", "") for lb in pr.get("labels") or [] if isinstance(lb, dict)]
        merged = bool(pr.get("merged")) or (
            payload.get("action") == "closed" and "Merged" in labels
        )
        action = payload.get("action")
        actionable, reason = True, ""
        if action == "labeled":
            label = _get(payload, "label", "name") or ""
            actionable = label.startswith(CIFLOW_LABEL_PREFIX)
            reason = "" if actionable else f"label {label!r} is not a {CIFLOW_LABEL_PREFIX}* label"
        elif action not in PR_ACTIONS:
            actionable, reason = False, f"pull_request action {action!r} is not forwarded"
        return UpstreamEvent(
            **common,
            pr_number=int(payload.get("number") or _require(pr, "number")),
            head_sha=_require(pr, "head", "sha"),
            head_ref=_get(pr, "head", "ref"),
            base_sha=_get(pr, "base", "sha"),
            base_ref=_require(pr, "base", "ref"),
            labels=labels,
            merged=merged,
            author_association=pr.get("author_association"),
            actionable=actionable,
            reason=reason,
        )
    if event == "push":
        deleted = bool(payload.get("deleted"))
        return UpstreamEvent(
            **common,
            ref=_require(payload, "ref"),
            before_sha=payload.get("before"),
            after_sha=_require(payload, "after"),
            head_sha=payload.get("after"),
            base_ref=payload.get("base_ref"),
            actionable=not deleted,
            reason="branch deleted" if deleted else "",
        )
    if event in ("check_run", "check_suite"):
        obj = _require(payload, event)
        action = payload.get("action")
        name = obj.get("name") or _get(obj, "app", "slug")
        prs = obj.get("pull_requests") or []
        actionable = action == "rerequested" and str(name or "").startswith("crcr/")
        return UpstreamEvent(
            **common,
            head_sha=obj.get("head_sha"),
            pr_number=_get(prs[0], "number") if prs else None,
            check_name=name,
            actionable=actionable,
            reason="" if actionable else f"{event}.{action} on {name!r} is not a crcr/ re-run",
        )
    if event in ("nightly", "periodic"):
        # CRCR's self-report shape: the tested upstream SHA is the delivery id.
        sha = _require(payload, "head_sha")
        return UpstreamEvent(
            **{**common, "upstream_delivery_id": sha},
            head_sha=sha,
            after_sha=sha,
            # a release replay names the two versions it compares (our extension)
            base_ref=payload.get("base_version"),
            head_ref=payload.get("head_version"),
        )
    raise EventError(f"unsupported event {event!r}")
