"""A GitHub delivery as the relay reads it: its envelope (which upstream event, which payload, a
CRCR dispatch unwrapped) and the typed :class:`UpstreamEvent` every later stage works from.

Ingress parses a delivery once: :func:`open_envelope` then :func:`normalize`. The store keeps
the event's JSON (``Delivery.normalized``) and the upstream payload CRCR forwards verbatim
(``Delivery.upstream_payload``) beside the raw bytes; later stages load the event with
:func:`load_event` and never read the raw bytes again (tests/test_architecture.py checks).
:data:`LIMITS` is the one table of the sizes a delivery's values may have.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, field_validator

from wire.values import MAX_INT, text_problem

#: Events the relay accepts from the upstream repository (CRCR's set).
SUPPORTED_EVENTS = frozenset({"pull_request", "push", "check_run", "check_suite"})
#: pull_request actions that start downstream work.
PR_ACTIONS = frozenset({"opened", "reopened", "synchronize", "closed"})
CIFLOW_LABEL_PREFIX = "ciflow/crcr/"


class EventError(ValueError):
    """The stored payload cannot be understood as the event it claims to be."""


#: the largest PR number (and any other count) a payload may carry: PostgreSQL's INTEGER
MAX_NUMBER = MAX_INT
#: The one table of limits: the most characters each value of a delivery may have (a SHA:
#: SHA-1 or SHA-256 hex, or the short / symbolic revisions the relay's own events use; ``text``:
#: any other string of the event, such as refs, names, reasons and file paths). The store's
#: columns are at least this wide (tests/test_architecture.py checks).
LIMITS = {
    "delivery_id": 100,
    "upstream_delivery_id": 100,
    "event": 50,
    "action": 50,
    "source": 30,
    "hook_id": 50,
    "repo": 200,
    "sha": 64,
    "text": 1000,
}
#: a delivery id (X-GitHub-Delivery, or a CRCR dispatch's): a GUID
MAX_DELIVERY_ID = LIMITS["delivery_id"]
#: the version of :class:`UpstreamEvent`'s stored JSON (2: draft, fork and a push's files)
EVENT_SCHEMA_VERSION = "2"


def limit_of(field: str) -> int:
    """The most characters field ``field`` of a delivery may have (:data:`LIMITS`)."""
    if field.endswith("_sha"):
        return LIMITS["sha"]
    return LIMITS.get(field, LIMITS["text"])


class UpstreamEvent(BaseModel):
    """What every later stage needs from an upstream event, independent of its wire shape."""

    schema_version: str = EVENT_SCHEMA_VERSION
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
    draft: bool = False
    fork: bool = False  # a pull request whose head is in another repository than its base
    ref: str | None = None
    before_sha: str | None = None
    after_sha: str | None = None
    check_name: str | None = None
    #: a push's files, from its commits (None: not a push, or commits not in GitHub's shape:
    #: who cannot know the files decides conservatively)
    changed_files: list[str] | None = None
    actionable: bool = True
    reason: str = ""

    @field_validator("*", mode="after")
    @classmethod
    def _in_range(cls, value: Any, info: Any) -> Any:
        """Text (valid UTF-8 without NUL) of bounded length, numbers within the store's INTEGER."""
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                limit = limit_of(info.field_name)
                if len(item) > limit:
                    raise ValueError(f"longer than {limit} characters")
                problem = text_problem(item)
                if problem is not None:
                    raise ValueError(problem)
            elif (
                isinstance(item, int) and not isinstance(item, bool) and not 0 <= item <= MAX_NUMBER
            ):
                raise ValueError(f"out of range (0 to {MAX_NUMBER})")
        return value


class StoredEventError(ValueError):
    """A stored event that is not of this :data:`EVENT_SCHEMA_VERSION` (or missing): the store
    needs its migrations (``relay db upgrade``)."""


def load_event(stored: dict[str, Any] | None) -> UpstreamEvent:
    """The typed event ingress validated and the store keeps (``Delivery.normalized``), loaded
    without validating it again (raises StoredEventError when it is missing or of another
    schema version)."""
    if stored is None or stored.get("schema_version") != EVENT_SCHEMA_VERSION:
        version = None if stored is None else stored.get("schema_version")
        raise StoredEventError(
            f"the delivery has no stored event of schema {EVENT_SCHEMA_VERSION} (it has "
            f"{version!r}): the store needs `relay db upgrade`"
        )
    return UpstreamEvent.model_construct(**stored)


def load_payload(stored: dict[str, Any] | None) -> dict[str, Any]:
    """The upstream payload ingress stored (``Delivery.upstream_payload``) to forward and echo
    verbatim, as CRCR's ``client_payload.payload`` (raises StoredEventError when missing)."""
    if stored is None:
        raise StoredEventError(
            "the delivery has no stored upstream payload: the store needs `relay db upgrade`"
        )
    return stored


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


def _object(d: Any, *path: str) -> dict[str, Any]:
    value = _require(d, *path)
    if not isinstance(value, dict):
        raise EventError(f"payload's {'.'.join(path)} is not an object")
    return value


def _text(d: Any, *path: str, required: bool = False) -> str | None:
    value = _require(d, *path) if required else _get(d, *path)
    if value is not None and not isinstance(value, str):
        raise EventError(f"payload's {'.'.join(path)} is not a string")
    return value


def _number(value: Any, where: str) -> int:
    """A positive integer (a JSON number or a string of digits) within MAX_NUMBER."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 10:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise EventError(f"payload's {where} is not an integer")
    if not 0 < value <= MAX_NUMBER:
        raise EventError(f"payload's {where} {value} is out of range (1 to {MAX_NUMBER})")
    return value


def push_files(payload: dict[str, Any]) -> list[str] | None:
    """The files a push changed, from its commits (None when the payload lists no commits, or
    lists them in another shape than GitHub's: commits of objects whose ``added``, ``removed``
    and ``modified`` are lists of strings, each text within :data:`LIMITS`)."""
    commits = payload.get("commits")
    if not isinstance(commits, list):
        return None
    seen: dict[str, None] = {}
    for commit in commits:
        if not isinstance(commit, dict):
            return None
        for key in ("added", "removed", "modified"):
            names = commit.get(key)
            if names is None:
                continue
            if not isinstance(names, list) or not all(_is_text(n) for n in names):
                return None
            seen.update(dict.fromkeys(names))
    return list(seen)


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= LIMITS["text"] and text_problem(value) is None


def _fork(pr: dict[str, Any]) -> bool:
    """A pull request whose head repository is another than its base's."""
    head = _get(pr, "head", "repo", "full_name")
    return bool(head) and head != _get(pr, "base", "repo", "full_name")


def _list(d: Any, *path: str) -> list[Any]:
    value = _get(d, *path)
    if value is None:
        return []
    if not isinstance(value, list):
        raise EventError(f"payload's {'.'.join(path)} is not a list")
    return value


#: how a form-encoded delivery starts (GitHub's ``application/x-www-form-urlencoded`` content
#: type: the JSON is the ``payload`` field); a JSON body cannot start so
FORM_PREFIX = b"payload="


def body_json(raw_body: bytes) -> bytes:
    """The JSON of a delivery's body as it was signed and stored: the body itself, or the
    ``payload`` field of a form-encoded one (raises EventError when that is not one field of
    percent-encoded UTF-8)."""
    if not raw_body.startswith(FORM_PREFIX):
        return raw_body
    try:
        fields = urllib.parse.parse_qs(
            raw_body.decode("ascii"), strict_parsing=True, max_num_fields=20, errors="strict"
        )
    except (UnicodeError, ValueError) as exc:
        raise EventError(f"malformed form body: not percent-encoded UTF-8: {exc}") from exc
    values = fields.get("payload", [])
    if len(values) != 1:
        raise EventError("malformed form body: it needs exactly one payload field")
    return values[0].encode("utf-8")


def parse_body(raw_body: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(body_json(raw_body))
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
    """Parse one upstream payload. Raises EventError when a field the event needs is missing or
    of the wrong type, and pydantic's ValidationError (a ValueError) when a value is out of
    range (a number past the store's INTEGER, a string too long or with a NUL)."""
    common: dict[str, Any] = {
        "delivery_id": delivery_id,
        "upstream_delivery_id": upstream_delivery_id,
        "event": event,
        "action": _text(payload, "action"),
        "repo": _text(payload, "repository", "full_name", required=True),
        "sender": _text(payload, "sender", "login"),
    }
    if event == "pull_request":
        return _pull_request(common, payload)
    if event == "push":
        return _push(common, payload)
    if event in ("check_run", "check_suite"):
        return _check(common, payload, event)
    if event in ("nightly", "periodic"):
        return _self_report(common, payload)
    raise EventError(f"unsupported event {event!r}")


def _pull_request(common: dict[str, Any], payload: dict[str, Any]) -> UpstreamEvent:
    """A pull_request event: actionable for the forwarded actions and ciflow/ labels."""
    action = common["action"]
    pr = _object(payload, "pull_request")
    labels = []
    for lb in _list(pr, "labels"):
        name = _text(lb, "name") if isinstance(lb, dict) else None
        labels.append(name or "")
    merged = pr.get("merged") is True or (action == "closed" and "Merged" in labels)
    actionable, reason = True, ""
    if action == "labeled":
        label = _text(payload, "label", "name") or ""
        actionable = label.startswith(CIFLOW_LABEL_PREFIX)
        reason = "" if actionable else f"label {label!r} is not a {CIFLOW_LABEL_PREFIX}* label"
    elif action not in PR_ACTIONS:
        actionable, reason = False, f"pull_request action {action!r} is not forwarded"
    number = payload.get("number")
    return UpstreamEvent(
        **common,
        pr_number=_number(number if number is not None else _require(pr, "number"), "number"),
        head_sha=_text(pr, "head", "sha", required=True),
        head_ref=_text(pr, "head", "ref"),
        base_sha=_text(pr, "base", "sha"),
        base_ref=_text(pr, "base", "ref", required=True),
        labels=labels,
        merged=merged,
        author_association=_text(pr, "author_association"),
        draft=pr.get("draft") is True,
        fork=_fork(pr),
        actionable=actionable,
        reason=reason,
    )


def _push(common: dict[str, Any], payload: dict[str, Any]) -> UpstreamEvent:
    """A push event: actionable unless it deleted the branch."""
    deleted = payload.get("deleted") is True
    return UpstreamEvent(
        **common,
        ref=_text(payload, "ref", required=True),
        before_sha=_text(payload, "before"),
        after_sha=_text(payload, "after", required=True),
        head_sha=_text(payload, "after"),
        base_ref=_text(payload, "base_ref"),
        changed_files=push_files(payload),
        actionable=not deleted,
        reason="branch deleted" if deleted else "",
    )


def _check(common: dict[str, Any], payload: dict[str, Any], event: str) -> UpstreamEvent:
    """A check_run or check_suite event: actionable when it re-requests a crcr/ check."""
    action = common["action"]
    obj = _object(payload, event)
    name = _text(obj, "name") or _text(obj, "app", "slug")
    prs = _list(obj, "pull_requests")
    first = prs[0] if prs and isinstance(prs[0], dict) else None
    pr_number = first.get("number") if first is not None else None
    actionable = action == "rerequested" and str(name or "").startswith("crcr/")
    return UpstreamEvent(
        **common,
        head_sha=_text(obj, "head_sha"),
        pr_number=_number(pr_number, f"{event}.pull_requests[0].number")
        if pr_number is not None
        else None,
        check_name=name,
        actionable=actionable,
        reason="" if actionable else f"{event}.{action} on {name!r} is not a crcr/ re-run",
    )


def _self_report(common: dict[str, Any], payload: dict[str, Any]) -> UpstreamEvent:
    """A nightly or periodic self-report (CRCR's shape: the tested upstream SHA is the delivery
    id); a release replay names the two versions it compares (our extension)."""
    sha = _text(payload, "head_sha", required=True)
    return UpstreamEvent(
        **{**common, "upstream_delivery_id": sha},
        head_sha=sha,
        after_sha=sha,
        base_ref=_text(payload, "base_version"),
        head_ref=_text(payload, "head_version"),
    )
