"""A recording HTTP receiver standing in for a CRCR relay's `POST /github/callback`."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class Receiver:
    url: str
    calls: list[Recorded] = field(default_factory=list)


@contextmanager
def recording_receiver() -> Iterator[Receiver]:
    calls: list[Recorded] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            with lock:
                calls.append(
                    Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
            status = body.get("workflow", {}).get("status")
            payload = json.dumps({"ok": True, "status": status}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Receiver(
            url=f"http://127.0.0.1:{server.server_address[1]}/github/callback", calls=calls
        )
    finally:
        server.shutdown()
        server.server_close()
