"""A POST's body, read from the socket at most to its limit before anything else looks at it.

A ``Content-Length`` over the limit is refused before a byte is read; a chunked body (or one
that lies about its length) is cut as soon as it passes the limit. Nothing is parsed or
authenticated before this: an unauthenticated client can make the server hold at most the
limit of the one request it sends. And all requests together hold at most the process's budget
of bytes in flight (RELAY_MAX_BODIES_IN_FLIGHT_BYTES): a read that would pass it is refused with
503 and Retry-After, so many clients at once cannot grow the process by more than the budget.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

#: the OpenAPI entry of the answer to a read refused by the budget
BUSY_RESPONSE = {"description": "the server is reading too many request bodies; retry later"}


class TooLarge(Exception):
    """The body passed its limit (answer 413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"body exceeds the limit of {limit} bytes")
        self.limit = limit


class Busy(Exception):
    """The bodies being read passed the process's budget (answer 503, retry later)."""

    def __init__(self, budget: int) -> None:
        super().__init__(f"the server is reading {budget} bytes of request bodies; retry later")
        self.budget = budget


class _InFlight:
    """Bytes of request bodies this process holds while reading them (one event loop: no
    await between the check and the count, so no lock is needed)."""

    held = 0


async def read_limited(request: Request, limit: int, *, budget: int | None = None) -> bytes:
    """The body of ``request``, or TooLarge once it would pass ``limit`` bytes, or Busy once the
    bodies all requests are reading would pass ``budget`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise TooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise TooLarge(limit)
            if budget is not None and _InFlight.held + len(chunk) > budget:
                raise Busy(budget)
            _InFlight.held += len(chunk)
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        _InFlight.held -= sum(map(len, chunks))


def busy_answer(exc: Busy) -> JSONResponse:
    """503 with Retry-After: the body was not read for lack of room, not for what it says."""
    return JSONResponse(status_code=503, content={"error": str(exc)}, headers={"Retry-After": "5"})
