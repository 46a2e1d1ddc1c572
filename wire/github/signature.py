"""GitHub's `X-Hub-Signature-256`: HMAC-SHA256 of the raw body, hex, prefixed with ``sha256=``."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

PREFIX = "sha256="


def sign(secret: bytes | str, body: bytes) -> str:
    key = secret.encode() if isinstance(secret, str) else secret
    return PREFIX + hmac.new(key, body, hashlib.sha256).hexdigest()


def verify(secrets: Iterable[bytes], body: bytes, header: str) -> bool:
    """True when ``header`` is a valid signature of ``body`` under any of ``secrets``.

    Every secret is compared (constant time, no early exit) so timing does not reveal which
    one matched or how many are configured.
    """
    if not header.startswith(PREFIX):
        return False
    given = header.encode("ascii", "replace")
    ok = False
    for secret in secrets:
        expected = sign(secret, body).encode()
        ok |= hmac.compare_digest(expected, given)
    return ok
