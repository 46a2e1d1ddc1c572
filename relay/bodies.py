"""A POST's body, read from the socket at most to its limit before anything else looks at it.

A ``Content-Length`` over the limit is refused before a byte is read; a chunked body (or one
that lies about its length) is cut as soon as it passes the limit. Nothing is parsed or
authenticated before this: an unauthenticated client can make the server hold at most the
limit of the one request it sends.
"""

from __future__ import annotations

from starlette.requests import Request


class TooLarge(Exception):
    """The body passed its limit (answer 413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"body exceeds the limit of {limit} bytes")
        self.limit = limit


async def read_limited(request: Request, limit: int) -> bytes:
    """The body of ``request``, or TooLarge once it would pass ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise TooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise TooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)
