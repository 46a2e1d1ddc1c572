"""The embedded (SQLite) broker's poll: short while messages arrive, slow once it is quiet."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kombu import Connection

import workers.celery_app as celery_app


def test_a_worker_polls_fast_while_messages_arrive_and_slowly_when_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Connection(f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}") as conn:
        transport = conn.transport
        assert transport.polling_interval == celery_app.EMBEDDED_BROKER_POLL_SECONDS
        got: list[object] = []
        queue = conn.SimpleQueue("control")
        queue.put({"n": 1})
        transport._callbacks["control"] = got.append  # what a consumer registers
        transport._deliver({"body": "x"}, "control")  # a message handed to the consumer
        assert got == [{"body": "x"}]
        assert transport.polling_interval == celery_app.EMBEDDED_BROKER_BUSY_POLL_SECONDS
        assert queue.get(timeout=1).payload == {"n": 1}  # the transport still works
        # quiet for longer than the window: back to the idle poll
        later = time.monotonic() + celery_app.EMBEDDED_BROKER_BUSY_WINDOW_SECONDS + 0.01
        monkeypatch.setattr(celery_app.time, "monotonic", lambda: later)
        assert transport.polling_interval == celery_app.EMBEDDED_BROKER_POLL_SECONDS
