"""An event handler the test stacks install (RELAY_EVENT_HANDLERS): it fails the first
processing of a pull request labelled ``test/fail-once`` and lets every later one through, the
way a transient downstream outage would. Used to test redelivery after a failed processing."""

from __future__ import annotations

import os
from pathlib import Path

from config.settings import Settings
from wire.github.events import UpstreamEvent

LABEL = "test/fail-once"
DOTTED = "tests.support.handlers:fail_once_when_labelled"


def fail_once_when_labelled(event: UpstreamEvent, settings: Settings) -> None:
    if LABEL not in event.labels:
        return
    marker = Path(os.environ["RELAY_TEST_MARKER_DIR"]) / event.delivery_id
    if not marker.exists():
        marker.write_text("failed once\n")
        raise RuntimeError("injected transient failure (first processing of this delivery)")
