"""A dispatch's ``client_payload``: CRCR's shape (``event_type``, ``delivery_id``, ``payload``:
the upstream body verbatim) plus, under :data:`PAYLOAD_KEY`, the signed dispatch token and the
changed-file list, cut (with the full count) so the whole stays under 60 KB.
"""

from __future__ import annotations

import json
from typing import Any

from fanout.model import MAX_CLIENT_PAYLOAD, PAYLOAD_KEY

PAYLOAD_VERSION = "1"


class PayloadTooLarge(ValueError):
    pass


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


def build(
    *,
    event_type: str,
    delivery_id: str,
    upstream_payload: dict[str, Any],
    dispatch_token: str,
    changed_files: list[str] | None,
    merged: bool | None = None,
    limit: int = MAX_CLIENT_PAYLOAD,
) -> dict[str, Any]:
    """The client_payload; raises PayloadTooLarge when even CRCR's part passes ``limit``."""
    files = list(changed_files or [])
    ours: dict[str, Any] = {
        "version": PAYLOAD_VERSION,
        "dispatch_token": dispatch_token,
        "changed_files": [],
        "changed_files_count": len(files) if changed_files is not None else None,
        "changed_files_truncated": False,
        # a pull_request's merged state as the relay read it (closed and merged, or closed with
        # a Merged label): the relayed payload's own merged field is unreliable
        "merged": merged,
    }
    body = {
        "event_type": event_type,
        "delivery_id": delivery_id,
        "payload": upstream_payload,
        PAYLOAD_KEY: ours,
    }
    base = _size(body)
    if base > limit:
        raise PayloadTooLarge(
            f"client_payload is {base} bytes without changed files (limit {limit})"
        )
    room = limit - base
    kept: list[str] = []
    for name in files:
        cost = _size(name) + (1 if kept else 0)
        if cost > room:
            break
        kept.append(name)
        room -= cost
    ours["changed_files"] = kept
    ours["changed_files_truncated"] = len(kept) < len(files)
    return body
