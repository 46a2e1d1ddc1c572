"""A local OIDC issuer standing in for GitHub Actions' (or Buildkite's): RSA keys with key ids,
its JWKS served over real HTTP on loopback (fetches counted), and tokens minted with the claims
GitHub puts in an Actions OIDC token (``repository``, ``repository_id``, ``run_id``...)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

AUDIENCE = "pytorch-cross-repo-ci-relay"


class Issuer:
    def __init__(self) -> None:
        self.url = ""
        self.keys: dict[str, Any] = {}  # kid -> private key (published)
        self.jwks_fetches = 0
        self.add_key("key-1")

    @property
    def jwks_url(self) -> str:
        return f"{self.url}/.well-known/jwks"

    def add_key(self, kid: str) -> Any:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.keys[kid] = key
        return key

    def jwks(self) -> dict[str, Any]:
        out = []
        for kid, key in self.keys.items():
            jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
            out.append({**jwk, "kid": kid, "use": "sig", "alg": "RS256"})
        return {"keys": out}

    def mint(
        self,
        repository: str,
        *,
        kid: str = "key-1",
        key: Any = None,
        issuer: str | None = None,
        audience: str = AUDIENCE,
        expires_in: int = 300,
        **claims: Any,
    ) -> str:
        now = int(time.time())
        body = {
            "iss": issuer or self.url,
            "aud": audience,
            "sub": f"repo:{repository}:ref:refs/heads/main",
            "repository": repository,
            "repository_owner": repository.split("/")[0],
            "iat": now - 5,
            "nbf": now - 5,
            "exp": now + expires_in,
            **claims,
        }
        signing = key if key is not None else self.keys[kid]
        return jwt.encode(body, signing, algorithm="RS256", headers={"kid": kid})


@contextmanager
def serve_issuer() -> Iterator[Issuer]:
    issuer = Issuer()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/.well-known/jwks":
                with lock:
                    issuer.jwks_fetches += 1
                data = json.dumps(issuer.jwks()).encode()
                status = 200
            elif self.path == "/.well-known/openid-configuration":
                data = json.dumps({"issuer": issuer.url, "jwks_uri": issuer.jwks_url}).encode()
                status = 200
            else:
                data, status = b"{}", 404
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    issuer.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield issuer
    finally:
        server.shutdown()
        server.server_close()
