"""What a planner hands the runner, and how it is stored with the job and read back.

One shape on the whole way from the planner to the shard runner: a :class:`RunPlan` is the
pytest node ids per shard, the backend's :class:`~backends.base.RunnerConfig` and the
:class:`~selector.SelectionPlan` that chose the tests (absent for a planner that does not use the
selector). :meth:`RunPlan.stored` is the job's Selection row; :class:`StoredPlan` is how the
runner and the API read that row back.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from backends.base import RunnerConfig
from selector import SelectionPlan
from selector.plan import UniverseInfo


class RunPlan(BaseModel):
    shards: list[list[str]]  # pytest node ids, runnable from runner.rootdir
    runner: RunnerConfig
    selection: SelectionPlan | None = None
    base_rev: str | None = None
    head_rev: str | None = None

    @property
    def total(self) -> int:
        return sum(len(s) for s in self.shards)

    def stored(self) -> dict[str, Any]:
        """The columns of the job's Selection row (``plan``: the SelectionPlan JSON with the
        runner configuration under ``"runner"``)."""
        sel = self.selection
        plan = sel.model_dump(mode="json") if sel is not None else {}
        return {
            "base_rev": self.base_rev,
            "head_rev": self.head_rev,
            "stage_counts": {}
            if sel is None
            else {s.stage: {"in": s.count_in, "out": s.count_out} for s in sel.funnel},
            "fallbacks": [] if sel is None else [f.model_dump(mode="json") for f in sel.fallbacks],
            "estimated_device_seconds": None if sel is None else sel.estimated_device_seconds,
            "plan": {**plan, "runner": self.runner.model_dump(mode="json")},
        }


class StoredPlan(BaseModel):
    """The parts of a stored plan that are read back: the runner's recipe and the universe the
    selection chose from (the tests and reasons stay in the row, unparsed)."""

    model_config = ConfigDict(extra="ignore")

    runner: RunnerConfig
    universe: UniverseInfo | None = None
