"""Structured logging bound to the delivery being handled (request to worker).

``bind(delivery_id=...)`` stores context in a contextvar; every record emitted while it is bound
carries the fields, rendered as one JSON object per line (or key=value text when RELAY_LOG_JSON
is false).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "relay_log_context", default=None
)

_RESERVED = set(vars(logging.LogRecord("x", 0, "x", 0, "", None, None))) | {"message", "asctime"}


@contextlib.contextmanager
def bind(**fields: Any) -> Iterator[None]:
    """Bind fields (e.g. delivery_id) to every log record emitted inside the block."""
    merged = {**(_context.get() or {}), **fields}
    token = _context.set(merged)
    try:
        yield
    finally:
        _context.reset(token)


class ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in (_context.get() or {}).items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RESERVED and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(
            f"{k}={v}"
            for k, v in vars(record).items()
            if k not in _RESERVED and not k.startswith("_")
        )
        base = f"{record.levelname.lower():7} {record.name}: {record.getMessage()}"
        text = f"{base} {extras}".rstrip()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def configure(level: str = "INFO", json_lines: bool = True) -> None:
    """Install the relay's handler on the root logger (idempotent)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_relay", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler._relay = True  # type: ignore[attr-defined]
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level.upper())
