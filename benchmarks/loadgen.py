"""A bounded HTTP load generator, run as its own process on loopback.

python -m benchmarks.loadgen --url URL --count N --concurrency C --max-seconds T [--webhook ...]

Posts signed pull_request deliveries (unique delivery ids) or GETs the URL, stops after N
requests or T seconds, whichever comes first, and prints one JSON line with rps, latencies and
its own CPU time (so a run shows whether the load generator, not the server, was the limit).

Each of the C connections is a keep-alive HTTP/1.1 connection written and read directly on
asyncio streams (uvloop when installed): an HTTP client library costs the generator more CPU per
request than the server's /healthz, and on a 2-core machine that CPU is taken from the server.
The body is signed once (only the delivery id header changes between requests, and the signature
covers the body alone). The connections are opened (one GET /healthz each) before the timer
starts. Both sides of a comparison (/healthz and the webhook) go through the same code.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

from wire.github.signature import sign


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


class _Connection:
    """One keep-alive HTTP/1.1 connection: a request, then its whole response, in turn."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, head: bytes, body: bytes = b"") -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(head + body)
        response = await self.reader.readuntil(b"\r\n\r\n")
        status = int(response[9:12])
        length = 0
        close = False
        for line in response.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
        if length:
            await self.reader.readexactly(length)
        if close:
            await self.close()
        return status

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


async def _run(args: argparse.Namespace) -> dict[str, object]:
    url = urlsplit(args.url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    body = Path(args.body).read_bytes() if args.body else b""
    signature = sign(args.secret, body) if args.webhook else ""
    get_head = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
    post_prefix = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"X-GitHub-Event: pull_request\r\nX-Hub-Signature-256: {signature}\r\n"
        f"Content-Length: {len(body)}\r\nX-GitHub-Delivery: "
    ).encode()
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    issued = 0
    deadline = time.monotonic() + args.max_seconds

    async def one(conn: _Connection) -> None:
        nonlocal issued
        while issued < args.count and time.monotonic() < deadline:
            issued += 1
            start = time.perf_counter()
            if args.webhook:
                head = post_prefix + str(uuid.uuid4()).encode() + b"\r\n\r\n"
                status = await conn.request(head, body)
            else:
                status = await conn.request(get_head)
            latencies.append(time.perf_counter() - start)
            statuses[status] = statuses.get(status, 0) + 1

    conns = [_Connection(host, port) for _ in range(args.concurrency)]
    # connect before the timer, as `relay replay` does (it checks /healthz first): every row of
    # a comparison then times requests on open connections
    warm = f"GET /healthz HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
    await asyncio.gather(*(c.request(warm) for c in conns))
    cpu = time.process_time()
    began = time.perf_counter()
    await asyncio.gather(*(one(c) for c in conns))
    elapsed = time.perf_counter() - began
    cpu = time.process_time() - cpu
    for c in conns:
        await c.close()
    return {
        "count": len(latencies),
        "seconds": elapsed,
        "rps": len(latencies) / elapsed if elapsed else 0.0,
        "p50_ms": 1000 * statistics.median(latencies) if latencies else float("nan"),
        "p99_ms": 1000 * _percentile(latencies, 0.99),
        "statuses": statuses,
        "loadgen_cpu_s": cpu,  # the generator's own CPU time over the timed part
    }


def run_loadgen(
    url: str,
    *,
    count: int,
    concurrency: int,
    max_seconds: float,
    signed: tuple[Path, str] | None = None,
    timeout: float,
) -> dict[str, object]:
    """Run this generator as its own process and return its JSON line.

    ``signed`` is (body, secret) for signed webhook deliveries; without it the URL is GET.
    A failed run raises with the generator's stderr (its last 2,000 characters).
    """
    cmd = [sys.executable, "-m", "benchmarks.loadgen", "--url", url]
    cmd += ["--count", str(count), "--concurrency", str(concurrency)]
    cmd += ["--max-seconds", str(max_seconds)]
    if signed is not None:
        cmd += ["--webhook", "--body", str(signed[0]), "--secret", signed[1]]
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=root)
    if out.returncode != 0:
        raise RuntimeError(f"loadgen failed on {url}: {out.stderr.strip()[-2000:]}")
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-seconds", type=float, default=60)
    parser.add_argument("--webhook", action="store_true")
    parser.add_argument("--body", default="")
    parser.add_argument("--secret", default="")
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvicorn[standard] installs it
        runner = asyncio.run
    else:
        runner = uvloop.run
    print(json.dumps(runner(_run(args))))


if __name__ == "__main__":
    main()
