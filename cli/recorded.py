"""Recorded webhook events: the JSON Lines format `relay deliveries export` writes and
`relay replay --events` reads (one ``{"event", "delivery_id"?, "payload", "received_at"?}``
object a line), or a folder of GitHub example payloads (``<event>/<name>.json`` or
``<event>.<name>.json``, as the project's ``examples/events``). Every bad line
is reported at once.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from cli.relay_client import ReplayError
from wire.github.events import MAX_DELIVERY_ID

#: the keys a JSON Lines record may carry (received_at is informational, written by the export)
RECORD_KEYS = frozenset({"event", "delivery_id", "payload", "received_at"})


@dataclass(frozen=True)
class RecordedEvent:
    n: int  # position in the replay, from 1
    origin: str  # file:line, or the payload file
    event: str  # X-GitHub-Event
    delivery_id: str  # X-GitHub-Delivery
    body: bytes  # exactly the bytes signed and posted
    derived_id: bool = False  # the delivery id was derived (stable), not recorded

    @property
    def action(self) -> str | None:
        try:
            value = json.loads(self.body).get("action")
        except (ValueError, AttributeError):
            return None
        return value if isinstance(value, str) else None


def derive_delivery_id(position: int, payload: Any) -> str:
    """A stable delivery id for a record that has none: its line number (or position in the
    folder) and a hash of its canonical JSON, so replaying the same file again is a duplicate."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return f"replay-{position}-{hashlib.sha256(canonical).hexdigest()[:16]}"


def event_record(
    *, event: str, delivery_id: str, payload: dict[str, Any], received_at: datetime | None = None
) -> str:
    """One JSON Lines record (what `relay deliveries export` writes and --events reads)."""
    record: dict[str, Any] = {"event": event, "delivery_id": delivery_id, "payload": payload}
    if received_at is not None:
        record["received_at"] = received_at.isoformat()
    return json.dumps(record, separators=(",", ":"))


def as_upstream(payload: dict[str, Any], repo: str | None) -> dict[str, Any]:
    """``payload`` with ``repository.full_name`` set to ``repo`` (the configured upstream);
    a CRCR ``repository_dispatch`` keeps its own repository, the upstream payload inside it is
    renamed."""
    if not repo:
        return payload
    inner = payload.get("client_payload")
    if isinstance(inner, dict) and isinstance(inner.get("payload"), dict):
        as_upstream(inner["payload"], repo)
        return payload
    if isinstance(payload.get("repository"), dict):
        payload["repository"]["full_name"] = repo
    return payload


def event_of_file(path: Path, root: Path | None = None) -> str | None:
    """The GitHub event a payload file holds: its folder's name under ``root``
    (``pull_request/opened.json``), else its name up to the first dot
    (``pull_request.opened.json``); None when neither tells (``loose.json``)."""
    if root is not None:
        rel = path.relative_to(root)
        if len(rel.parts) >= 2:
            return rel.parts[0]
    event, dot, _ = path.name.removesuffix(".json").partition(".")
    return event if dot and event else None


def load_events(path: Path, *, upstream_repo: str | None = None) -> list[RecordedEvent]:
    """Read a JSON Lines file or a folder of payloads; every problem is reported at once
    (``ReplayError``), so nothing is sent from a file with a bad line. ``upstream_repo``
    rewrites each payload's repository.full_name (like `relay submit --as-upstream`)."""
    if path.is_dir():
        return _load_folder(path, upstream_repo)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ReplayError([f"{path}: cannot read the events file: {exc}"]) from exc
    events: list[RecordedEvent] = []
    errors: list[str] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.append(f"{where}: not JSON: {exc.msg} (column {exc.colno})")
            continue
        problems = _record_problems(record)
        if problems:
            errors.extend(f"{where}: {p}" for p in problems)
            continue
        payload = as_upstream(record["payload"], upstream_repo)
        recorded = record.get("delivery_id")
        events.append(
            RecordedEvent(
                n=len(events) + 1,
                origin=where,
                event=record["event"],
                delivery_id=recorded or derive_delivery_id(lineno, payload),
                body=json.dumps(payload).encode(),
                derived_id=recorded is None,
            )
        )
    if errors:
        raise ReplayError(errors)
    if not events:
        raise ReplayError([f"{path}: no events (the file is empty)"])
    return events


def _record_problems(record: Any) -> list[str]:
    if not isinstance(record, dict):
        return [f"a record must be a JSON object, not {type(record).__name__}"]
    problems = []
    unknown = sorted(set(record) - RECORD_KEYS)
    if unknown:
        problems.append(
            f"unknown key(s) {', '.join(map(repr, unknown))} (expected {sorted(RECORD_KEYS)})"
        )
    event = record.get("event")
    if not isinstance(event, str) or not event.strip():
        problems.append('"event" must be a non-empty string (the X-GitHub-Event name)')
    if "payload" not in record:
        problems.append('"payload" is missing')
    elif not isinstance(record["payload"], dict):
        problems.append('"payload" must be a JSON object (the webhook body)')
    if "delivery_id" in record:
        did = record["delivery_id"]
        if not isinstance(did, str) or not did.strip():
            problems.append('"delivery_id" must be a non-empty string when given')
        elif len(did) > MAX_DELIVERY_ID:
            problems.append(f'"delivery_id" is longer than {MAX_DELIVERY_ID} characters')
    return problems


def _load_folder(root: Path, upstream_repo: str | None) -> list[RecordedEvent]:
    """``<root>/<event>/<name>.json`` (the event is the folder name, as in GitHub's
    payload-examples) or ``<root>/<event>.<name>.json`` (as the project's examples/events);
    files in sorted path order."""
    files = sorted(root.rglob("*.json"), key=lambda p: p.relative_to(root).as_posix())
    errors: list[str] = []
    events: list[RecordedEvent] = []
    for position, file in enumerate(files, start=1):
        rel = file.relative_to(root)
        event = event_of_file(file, root)
        if event is None:
            errors.append(
                f"{file}: cannot tell its event: name it <event>.<name>.json or put it in a "
                "folder named after its event"
            )
            continue
        try:
            body = file.read_bytes()
            payload = json.loads(body)
        except OSError as exc:
            errors.append(f"{file}: cannot read: {exc}")
            continue
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            errors.append(f"{file}: not JSON: {exc}")
            continue
        if not isinstance(payload, dict):
            errors.append(f"{file}: the payload must be a JSON object")
            continue
        if upstream_repo:
            body = json.dumps(as_upstream(payload, upstream_repo)).encode()
        events.append(
            RecordedEvent(
                n=len(events) + 1,
                origin=str(file),
                event=event,
                delivery_id=derive_delivery_id(position, {"path": rel.as_posix(), "body": payload}),
                body=body,  # the file's own bytes unless rewritten
                derived_id=True,
            )
        )
    if errors:
        raise ReplayError(errors)
    if not events:
        raise ReplayError([f"{root}: no <event>/<name>.json or <event>.<name>.json payloads"])
    return events
