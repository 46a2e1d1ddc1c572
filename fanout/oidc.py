"""OIDC tokens of a callback: RS256 JWTs from an allowed issuer (GitHub Actions, Buildkite),
verified against the issuer's JWKS fetched over HTTP, cached, and fetched again when a token
names a key id the cache does not know (at most once per ``refresh_interval``: a flood of
tokens with made-up key ids cannot make us hammer the issuer). A token valid for longer than
``max_lifetime`` (``exp - iat``; GitHub's live 5 to 10 minutes) is refused: a leaked one must
not serve for years.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import jwt

ALGORITHMS = ["RS256"]


class OidcError(ValueError):
    """The token is refused; the message says why in one line."""


@dataclass
class _Keys:
    keys: dict[str, Any] = field(default_factory=dict)  # kid -> public key
    fetched_at: float = 0.0


def _lifetime(claims: dict[str, Any]) -> float | None:
    """``exp - iat`` of verified claims (None when either is not a number)."""
    exp, iat = claims.get("exp"), claims.get("iat")
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (exp, iat))
    return float(exp) - float(iat) if numbers else None  # type: ignore[arg-type]


class OidcVerifier:
    def __init__(
        self,
        *,
        issuers: dict[str, str],
        audience: str,
        refresh_interval: float = 60.0,
        max_age: float = 3600.0,
        timeout: float = 5.0,
        max_lifetime: float = 3600.0,
    ) -> None:
        self.issuers = dict(issuers)  # issuer -> JWKS URL
        self.audience = audience
        self.refresh_interval = refresh_interval
        self.max_age = max_age
        self.timeout = timeout
        self.max_lifetime = max_lifetime  # the longest exp - iat a token may have
        self._cache: dict[str, _Keys] = {}
        self._lock = threading.Lock()
        self.fetches = 0

    def _fetch(self, issuer: str) -> _Keys:
        url = self.issuers[issuer]
        try:
            response = httpx.get(url, timeout=self.timeout)
            response.raise_for_status()
            document = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise OidcError(f"cannot fetch the JWKS of {issuer}: {type(exc).__name__}") from exc
        keys: dict[str, Any] = {}
        for jwk in document.get("keys", []) if isinstance(document, dict) else []:
            try:
                parsed = jwt.PyJWK.from_dict(jwk)
            except (jwt.PyJWKError, jwt.InvalidKeyError):
                continue
            if parsed.key_id:
                keys[parsed.key_id] = parsed.key
        self.fetches += 1
        return _Keys(keys=keys, fetched_at=time.monotonic())

    def _key(self, issuer: str, kid: str) -> Any:
        with self._lock:
            cached = self._cache.get(issuer)
            now = time.monotonic()
            stale = cached is None or now - cached.fetched_at > self.max_age
            unknown = cached is not None and kid not in cached.keys
            may_refresh = cached is None or now - cached.fetched_at >= self.refresh_interval
            if stale or (unknown and may_refresh):
                cached = self._cache[issuer] = self._fetch(issuer)
            assert cached is not None
            key = cached.keys.get(kid)
        if key is None:
            raise OidcError(f"the token's key id {kid[:64]!r} is not in the JWKS of {issuer}")
        return key

    def verify(self, token: str) -> dict[str, Any]:
        """The token's claims; raises OidcError."""
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.InvalidTokenError as exc:
            raise OidcError(f"not a JWT: {exc}") from exc
        if header.get("alg") not in ALGORITHMS:
            raise OidcError(f"algorithm {str(header.get('alg'))[:20]!r} is not RS256")
        issuer = unverified.get("iss")
        if not isinstance(issuer, str) or issuer not in self.issuers:
            raise OidcError(f"issuer {str(issuer)[:100]!r} is not allowed")
        kid = header.get("kid")
        if not isinstance(kid, str):
            raise OidcError("the token has no key id")
        key = self._key(issuer, kid)
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=ALGORITHMS,
                audience=self.audience,
                issuer=issuer,
                options={"require": ["exp", "iat", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError as exc:
            raise OidcError("the token has expired") from exc
        except jwt.InvalidAudienceError as exc:
            raise OidcError(f"the token's audience is not {self.audience!r}") from exc
        except jwt.InvalidTokenError as exc:
            raise OidcError(f"the token is not valid: {exc}") from exc
        lifetime = _lifetime(claims)
        if lifetime is None or lifetime > self.max_lifetime:
            raise OidcError(
                f"the token's lifetime (exp - iat) is over {self.max_lifetime:.0f} seconds"
            )
        repository = claims.get("repository")
        if not isinstance(repository, str) or "/" not in repository:
            raise OidcError("the token has no repository claim")
        return claims
