"""From an upstream event to a planned run: the shards of pytest node ids to execute.

The planner is pluggable (RELAY_PLANNER, "module:function") so a deployment can plan differently;
the default asks the selector's four stages.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from relay.github.events import UpstreamEvent
from relay.settings import Settings


@dataclass
class PlannedRun:
    shards: list[list[str]]  # pytest node ids, runnable from `rootdir`
    rootdir: str  # where pytest runs (the repo root for the bundled suites, or a checkout)
    plan: dict[str, Any] = field(default_factory=dict)  # the SelectionPlan JSON
    stage_counts: dict[str, Any] = field(default_factory=dict)
    fallbacks: list[Any] = field(default_factory=list)
    estimated_device_seconds: float | None = None
    base_rev: str | None = None
    head_rev: str | None = None
    # extra pytest arguments and environment for this run (plugins, spec files, device env)
    pytest_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    preload: list[str] = field(default_factory=list)  # modules the warm pool imports once

    @property
    def total(self) -> int:
        return sum(len(s) for s in self.shards)


Planner = Callable[[UpstreamEvent, Settings], PlannedRun]


def load_planner(path: str) -> Planner:
    module, _, attr = path.partition(":")
    planner: Planner = getattr(importlib.import_module(module), attr)
    return planner


def selector_planner(event: UpstreamEvent, settings: Settings) -> PlannedRun:
    """Plan with the selector's four stages over the bundled universe on the spyre backend."""
    from workers.selector_bridge import plan_with_selector

    return plan_with_selector(event, settings)
