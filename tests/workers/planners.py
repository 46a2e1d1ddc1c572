"""Planners for the runner tests (RELAY_PLANNER=tests.workers.planners:labelled_planner).

The PR label ``plan:<name>`` picks a named plan from the JSON file in RELAY_TEST_PLANS:
``{"<name>": {"shards": [[node ids]], "env": {...}, "pytest_args": [...], "preload": [...]}}``.
Selection itself is the selector's job (and tested there); these tests exercise the loop.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from backends.base import RunnerConfig
from planner import RunPlan
from store.settings import Settings
from wire.github.events import UpstreamEvent

ROOT = Path(__file__).resolve().parents[2]


def labelled_planner(event: UpstreamEvent, settings: Settings) -> RunPlan:
    plans = json.loads(Path(os.environ["RELAY_TEST_PLANS"]).read_text())
    names = [label.split(":", 1)[1] for label in event.labels if label.startswith("plan:")]
    name = names[0] if names else "default"
    chosen = plans[name]
    return RunPlan(
        shards=chosen["shards"],
        runner=RunnerConfig(
            rootdir=str(ROOT),
            pytest_args=chosen.get("pytest_args", []),
            env=chosen.get("env", {}),
            preload=chosen.get("preload", []),
            device_time_property=chosen.get("device_time_property"),
        ),
        head_rev=event.head_sha,
    )
