"""What a planner hands the runner, and how it is stored with the job and read back.

One shape on the whole way from the planner to the shard runner: a :class:`RunPlan` is the
pytest node ids per shard, the backend's :class:`~backends.base.RunnerConfig`, the upstream
under test (:class:`~upstream.undertest.UpstreamUnderTest`, the environment they run in) and the
:class:`~selector.SelectionPlan` that chose the tests (absent for a planner that does not use the
selector). :meth:`RunPlan.stored` is the job's Selection row; :class:`StoredPlan` is how the
runner and the API read that row back.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from backends.base import RunnerConfig
from selector import SelectionPlan
from selector.plan import UniverseInfo
from upstream.undertest import UpstreamUnderTest, installed_under_test


class RunPlan(BaseModel):
    shards: list[list[str]]  # pytest node ids, runnable from runner.rootdir
    runner: RunnerConfig
    selection: SelectionPlan | None = None
    base_rev: str | None = None
    head_rev: str | None = None
    # the PyTorch the shards run in (default: the worker's own interpreter)
    upstream: UpstreamUnderTest = Field(default_factory=installed_under_test)

    @property
    def total(self) -> int:
        return sum(len(s) for s in self.shards)

    def runner_seconds(self) -> dict[str, float]:
        """Each selected test's estimated runner-seconds (the selection's ``seconds``, schema 2)
        by the pytest node id it runs as; empty without a selection."""
        if self.selection is None:
            return {}
        seconds = {t.test_id: t.seconds for t in self.selection.tests}
        chosen = [s for s in self.selection.shards if s]
        return {
            node: seconds[tid]
            for ids, nodes in zip(chosen, self.shards, strict=False)
            for tid, node in zip(ids, nodes, strict=False)
            if tid in seconds
        }

    def stored(self) -> dict[str, Any]:
        """The columns of the job's Selection row, compact: ``plan`` is the SelectionPlan JSON
        without its per-variant lists (with their sizes under ``"counts"`` and the runner
        configuration under ``"runner"``); ``variants`` are the SelectionTest rows (selected
        tests with rank, shard, mode and reasons; cut ones with the budget's reason; removed
        ones), which the store keeps one per row and the API pages."""
        sel = self.selection
        plan = sel.model_dump(mode="json", exclude=set(PER_VARIANT)) if sel is not None else {}
        if sel is not None:
            plan["counts"] = {
                "selected": len(sel.tests),
                "cut": len(sel.cut),
                "removed": len(sel.removed),
                "shards": [len(s) for s in sel.shards],
            }
        return {
            "base_rev": self.base_rev,
            "head_rev": self.head_rev,
            "stage_counts": {}
            if sel is None
            else {s.stage: {"in": s.count_in, "out": s.count_out} for s in sel.funnel},
            "fallbacks": [] if sel is None else [f.model_dump(mode="json") for f in sel.fallbacks],
            "estimated_device_seconds": None if sel is None else sel.estimated_device_seconds,
            # no host's paths: each worker resolves the recipe against its own install
            "plan": {
                **plan,
                "runner": self.runner.portable().model_dump(mode="json"),
                "upstream_under_test": self.upstream.model_dump(mode="json"),
            },
            "variants": [] if sel is None else _variant_rows(sel),
        }


#: the SelectionPlan fields kept as rows (SelectionTest, Shard), not in the plan's JSON
PER_VARIANT = ("tests", "cut", "removed", "shards")
VARIANT_COLUMNS = (
    "kind", "test_id", "rank", "shard", "risk", "seconds", "seconds_source", "mode", "gating",
    "flag", "signals", "reasons",
)  # fmt: skip


def _variant_rows(sel: SelectionPlan) -> list[dict[str, Any]]:
    shard_of = {t: i for i, shard in enumerate(sel.shards) for t in shard}
    rows: list[dict[str, Any]] = [
        {
            "kind": "selected",
            "test_id": t.test_id,
            "rank": t.rank,
            "shard": shard_of.get(t.test_id),
            "risk": t.risk,
            "seconds": t.seconds,
            "seconds_source": t.seconds_source,
            "mode": t.mode,
            "gating": t.gating,
            "flag": t.flag,
            "signals": list(t.signals),
            "reasons": list(t.reasons),
        }
        for t in sel.tests
    ]
    rows += [
        {"kind": "cut", "test_id": c.test_id, "rank": c.rank, "risk": c.risk,
         "seconds": c.seconds, "signals": [], "reasons": [c.reason]}
        for c in sel.cut
    ]  # fmt: skip
    rows += [
        {"kind": "removed", "test_id": r.test_id, "signals": [], "reasons": [r.reason]}
        for r in sel.removed
    ]
    blank = dict.fromkeys(VARIANT_COLUMNS)
    return [{**blank, **r} for r in rows]  # one key set: one multi-row INSERT


class PlanCounts(BaseModel):
    selected: int = 0
    cut: int = 0
    removed: int = 0
    shards: list[int] = Field(default_factory=list)


class StoredPlan(BaseModel):
    """The parts of a stored plan that are read back: the runner's recipe, the universe the
    selection chose from and how many variants it selected, cut and removed (the variants
    themselves are SelectionTest rows)."""

    model_config = ConfigDict(extra="ignore")

    runner: RunnerConfig
    # plans stored before the upstream under test was named ran on the worker's interpreter
    upstream_under_test: UpstreamUnderTest = Field(default_factory=UpstreamUnderTest)
    universe: UniverseInfo | None = None
    counts: PlanCounts | None = None
    estimated_runner_seconds: float | None = None  # the plan's cost (plans before schema 2: none)
    full_runner_seconds: float | None = None
    workers: int | None = None
    estimated_finish_seconds: float | None = None  # wall time on ``workers`` runners
    budget_seconds: float | None = None
    budget_reason: str = ""
