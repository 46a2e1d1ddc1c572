"""Send callbacks to a CRCR relay (ours or PyTorch's) over HTTP, with bounded retries."""

from __future__ import annotations

import logging
import time
from typing import Any

import httpx

log = logging.getLogger("wire.crcr.client")


class CallbackError(RuntimeError):
    pass


def send(
    url: str,
    body: dict[str, Any],
    *,
    token: str | None,
    attempts: int = 3,
    backoff: float = 0.5,
    timeout: float = 15.0,
) -> dict[str, Any]:
    """POST one callback. Retries transport errors, 429 and 5xx; a 4xx is final (the body is wrong)."""
    headers = {"Content-Type": "application/json", "User-Agent": "crcr-relay-runner"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    last: str = ""
    for attempt in range(1, attempts + 1):
        try:
            response = httpx.post(url, json=body, headers=headers, timeout=timeout)
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
        else:
            if response.status_code < 300:
                try:
                    return dict(response.json())
                except ValueError:
                    return {}
            last = f"HTTP {response.status_code}: {response.text[:500]}"
            if response.status_code < 500 and response.status_code != 429:
                raise CallbackError(f"callback refused: {last}")
        log.warning("callback attempt %d failed: %s", attempt, last)
        if attempt < attempts:
            time.sleep(backoff * 2 ** (attempt - 1))
    raise CallbackError(f"callback failed after {attempts} attempts: {last}")
