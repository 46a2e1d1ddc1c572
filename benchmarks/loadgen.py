"""A bounded HTTP load generator, run as its own process on loopback.

python -m benchmarks.loadgen --url URL --count N --concurrency C --max-seconds T [--webhook ...]

Posts signed pull_request deliveries (unique delivery ids) or GETs the URL, stops after N
requests or T seconds, whichever comes first, and prints one JSON line with rps and latencies.
Its C connections are opened (one GET /healthz each) before the timer starts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from pathlib import Path

import httpx

from wire.github.signature import sign


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def _run(args: argparse.Namespace) -> dict[str, object]:
    body = Path(args.body).read_bytes() if args.body else b""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    issued = 0
    deadline = time.monotonic() + args.max_seconds

    async def one(client: httpx.AsyncClient) -> None:
        nonlocal issued
        while issued < args.count and time.monotonic() < deadline:
            issued += 1
            start = time.perf_counter()
            if args.webhook:
                headers = {
                    "Content-Type": "application/json",
                    "X-GitHub-Event": "pull_request",
                    "X-GitHub-Delivery": str(uuid.uuid4()),
                    "X-Hub-Signature-256": sign(args.secret, body),
                }
                response = await client.post(args.url, content=body, headers=headers)
            else:
                response = await client.get(args.url)
            latencies.append(time.perf_counter() - start)
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

    limits = httpx.Limits(max_connections=args.concurrency)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        # connect before the timer, as `relay replay` does (it checks /healthz first): every
        # row of a comparison then times requests on open connections
        floor = str(httpx.URL(args.url).copy_with(path="/healthz", query=None))
        await asyncio.gather(*(client.get(floor) for _ in range(args.concurrency)))
        began = time.perf_counter()
        await asyncio.gather(*(one(client) for _ in range(args.concurrency)))
        elapsed = time.perf_counter() - began
    return {
        "count": len(latencies),
        "seconds": elapsed,
        "rps": len(latencies) / elapsed if elapsed else 0.0,
        "p50_ms": 1000 * statistics.median(latencies) if latencies else float("nan"),
        "p99_ms": 1000 * _percentile(latencies, 0.99),
        "statuses": statuses,
    }


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
    print(json.dumps(asyncio.run(_run(args))))


if __name__ == "__main__":
    main()
