"""The dispatch token: a signed, one-shot statement that this relay dispatched this delivery to
this downstream repository for this PR and head SHA (RFC-0054's provenance token). It travels
in the dispatch's ``client_payload`` under our own key and comes back in the callback, where it
is checked when present and required at L3/L4; its nonce binds it to the first run that uses it.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

import jwt

ISSUER = "crcr-relay"
AUDIENCE = "crcr-relay-callback"
ALGORITHM = "HS256"


class DispatchTokenError(ValueError):
    """The token is not one this relay signed, or it is expired or malformed."""


@dataclass(frozen=True)
class DispatchClaims:
    delivery_id: str
    repo: str  # the downstream repository the dispatch went to
    upstream_repo: str
    pr_number: int | None
    head_sha: str | None
    nonce: str
    expires_at: int  # epoch seconds


def new_nonce() -> str:
    return secrets.token_hex(16)


def sign(claims: DispatchClaims, *, secret: str) -> str:
    body: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": claims.repo,
        "iat": int(time.time()),
        "exp": claims.expires_at,
        "delivery_id": claims.delivery_id,
        "upstream_repo": claims.upstream_repo,
        "pr": claims.pr_number,
        "head_sha": claims.head_sha,
        "nonce": claims.nonce,
    }
    return jwt.encode(body, secret, algorithm=ALGORITHM)


def verify(token: str, *, secret: str, now: float | None = None) -> DispatchClaims:
    try:
        body = jwt.decode(
            token,
            secret,
            algorithms=[ALGORITHM],
            audience=AUDIENCE,
            issuer=ISSUER,
            options={"require": ["exp", "sub", "aud", "iss"], "verify_exp": now is None},
        )
    except jwt.ExpiredSignatureError as exc:
        raise DispatchTokenError("the dispatch token has expired") from exc
    except jwt.InvalidTokenError as exc:
        raise DispatchTokenError(f"the dispatch token is not valid: {exc}") from exc
    if now is not None and body["exp"] <= now:
        raise DispatchTokenError("the dispatch token has expired")
    nonce, delivery = body.get("nonce"), body.get("delivery_id")
    if not isinstance(nonce, str) or not isinstance(delivery, str):
        raise DispatchTokenError("the dispatch token has no nonce or delivery")
    pr = body.get("pr")
    return DispatchClaims(
        delivery_id=delivery,
        repo=str(body["sub"]),
        upstream_repo=str(body.get("upstream_repo") or ""),
        pr_number=pr if isinstance(pr, int) else None,
        head_sha=body.get("head_sha") if isinstance(body.get("head_sha"), str) else None,
        nonce=nonce,
        expires_at=int(body["exp"]),
    )
