"""Process helpers for whoever starts test processes: `relay up`, the harness, ground-truth runs."""

from __future__ import annotations

import ctypes
import json
import signal
from pathlib import Path
from typing import Any


def die_with_parent() -> None:
    """In a child process (``preexec_fn``, or right after ``fork``): get SIGKILL when the parent
    dies (Linux ``PR_SET_PDEATHSIG``), so no worker or test process outlives whoever started it."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class EventTail:
    """The whole new lines of a growing JSON-lines file (the events a test process writes as it
    goes): each ``read`` returns those completed since the last one; a line still being
    written waits for its end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        return [json.loads(line) for line in lines if line.strip()]
