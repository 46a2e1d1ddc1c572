"""The baseline of the fan-out benchmark: a relay that dispatches inside the webhook request,
as PyTorch's deployed relay does (verify the signature, then one repository_dispatch per
downstream on a pool of up to 32 threads, then answer). Run as its own process:

python -m benchmarks.fanout_baseline --port P --github URL --repos N --secret S --token T
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from wire.github.signature import verify


def build(github: str, repos: list[str], secret: str, token: str) -> FastAPI:
    app = FastAPI()
    client = httpx.Client(base_url=github, timeout=30, limits=httpx.Limits(max_connections=64))
    pool = ThreadPoolExecutor(max_workers=32)

    @app.get("/healthz")
    def healthz() -> dict[str, bool]:
        return {"ok": True}

    @app.post("/github/webhook")
    async def webhook(request: Request) -> JSONResponse:
        body = await request.body()
        if not verify([secret.encode()], body, request.headers.get("x-hub-signature-256", "")):
            return JSONResponse(status_code=401, content={"error": "signature does not match"})
        payload = json.loads(body)
        client_payload = {
            "event_type": "pull_request",
            "delivery_id": request.headers.get("x-github-delivery", ""),
            "payload": payload,
        }

        def send(repo: str) -> int:
            try:
                return client.post(
                    f"/repos/{repo}/dispatches",
                    json={"event_type": "pull_request", "client_payload": client_payload},
                    headers={"Authorization": f"Bearer {token}"},
                ).status_code
            except httpx.HTTPError:
                return 0  # as the deployed relay does: logged, not retried

        statuses = list(pool.map(send, repos))  # synchronous: the request waits for all
        return JSONResponse(status_code=200, content={"ok": True, "dispatched": len(statuses)})

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--github", required=True)
    parser.add_argument("--repos", type=int, required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--token", required=True)
    args = parser.parse_args()
    repos = [f"bench/down{i:02d}" for i in range(args.repos)]
    app = build(args.github, repos, args.secret, args.token)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", timeout_keep_alive=60)


if __name__ == "__main__":
    main()
