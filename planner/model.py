"""What a planner hands the runner, and how it is stored with the job and read back.

One shape on the whole way from the planner to the shard runner: a :class:`RunPlan` is the
pytest node ids per shard (the planner's order; once :func:`planner.sharding.cut_shards` cut
them, the split the job runs, with each shard's estimated runner-seconds), the backend's
:class:`~backends.base.RunnerConfig`, the upstream under test
(:class:`~upstream.undertest.UpstreamUnderTest`, the environment they run in) and the
:class:`~selector.SelectionPlan` that chose the tests (absent for a planner that does not use the
selector). :meth:`RunPlan.stored` is the job's Selection row; :class:`StoredPlan` is how the
runner and the API read that row back.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from backends.base import RunnerConfig
from selector import SelectionPlan
from selector.plan import UniverseInfo
from upstream.undertest import UpstreamUnderTest, installed_under_test


def finish_seconds(shard_seconds: Sequence[float], parallel: int) -> float:
    """Wall seconds until the last shard ends: shards run longest first, each taken by the
    next free one of ``parallel`` shard workers."""
    workers = [0.0] * max(1, parallel)
    for seconds in sorted(shard_seconds, reverse=True):
        heapq.heapreplace(workers, workers[0] + seconds)
    return round(max(workers), 6)


class RunPlan(BaseModel):
    shards: list[list[str]]  # pytest node ids, runnable from runner.rootdir
    runner: RunnerConfig
    selection: SelectionPlan | None = None
    # a selected test id -> the pytest node id it runs as, where the two differ
    node_ids: dict[str, str] = Field(default_factory=dict)
    # once cut (planner.sharding.cut_shards): each shard's estimated runner-seconds, and the
    # shard workers running at once that the finish estimate assumes
    shard_seconds: list[float] | None = None
    workers: int = 1
    base_rev: str | None = None
    head_rev: str | None = None
    # the PyTorch the shards run in (default: the worker's own interpreter)
    upstream: UpstreamUnderTest = Field(default_factory=installed_under_test)

    @classmethod
    def for_selection(
        cls,
        selection: SelectionPlan,
        node_ids: Mapping[str, str],
        *,
        runner: RunnerConfig,
        **fields: Any,
    ) -> RunPlan:
        """The plan that runs ``selection``'s tests in rank order (one group until the runner
        cuts it), each as its node id in ``node_ids`` (a test id missing there runs as itself);
        ``base_rev`` / ``head_rev`` default to the selection's revisions."""
        nodes = {t: node_ids[t] for t in selection.test_ids if t in node_ids and node_ids[t] != t}
        fields.setdefault("base_rev", selection.base_resolved or selection.base)
        fields.setdefault("head_rev", selection.head_resolved or selection.head)
        ids = [nodes.get(t, t) for t in selection.test_ids]
        return cls(
            shards=[ids] if ids else [],
            runner=runner,
            selection=selection,
            node_ids=nodes,
            **fields,
        )

    @property
    def total(self) -> int:
        return sum(len(s) for s in self.shards)

    def node_id(self, test_id: str) -> str:
        return self.node_ids.get(test_id, test_id)

    def runner_seconds(self) -> dict[str, float]:
        """Each selected test's estimated runner-seconds by the pytest node id it runs as;
        empty without a selection."""
        if self.selection is None:
            return {}
        return {self.node_id(t.test_id): t.seconds for t in self.selection.tests}

    def estimated_finish_seconds(self) -> float | None:
        """Wall seconds the cut shards should take on ``workers`` shard workers (None before
        the runner cut them)."""
        if self.shard_seconds is None:
            return None
        return finish_seconds(self.shard_seconds, self.workers)

    def stored(self) -> dict[str, Any]:
        """The columns of the job's Selection row, compact: ``plan`` is the SelectionPlan JSON
        without its per-variant lists (with their sizes under ``"counts"`` and the runner
        configuration under ``"runner"``); ``variants`` are the SelectionTest rows (selected
        tests with rank, shard, mode and reasons; cut ones with the budget's reason; removed
        ones), which the store keeps one per row and the API pages. The shards, their counts,
        seconds and the finish estimate are this plan's (the runner's split)."""
        sel = self.selection
        plan = sel.model_dump(mode="json", exclude=set(PER_VARIANT)) if sel is not None else {}
        if sel is not None:
            plan["counts"] = {
                "selected": len(sel.tests),
                "cut": len(sel.cut),
                "removed": len(sel.removed),
                "shards": [len(s) for s in self.shards],
            }
            plan["shard_seconds"] = self.shard_seconds
            plan["workers"] = self.workers
            plan["estimated_finish_seconds"] = self.estimated_finish_seconds()
        return {
            "base_rev": self.base_rev,
            "head_rev": self.head_rev,
            "stage_counts": {}
            if sel is None
            else {s.stage: {"in": s.count_in, "out": s.count_out} for s in sel.funnel},
            "fallbacks": [] if sel is None else plan["fallbacks"],
            "estimated_device_seconds": None if sel is None else sel.estimated_device_seconds,
            # no host's paths: each worker resolves the recipe against its own install
            "plan": {
                **plan,
                "runner": self.runner.portable().model_dump(mode="json"),
                "upstream_under_test": self.upstream.model_dump(mode="json"),
            },
            "variants": [] if sel is None else _variant_rows(self, sel),
        }


#: the SelectionPlan fields kept as rows (SelectionTest), not in the plan's JSON
PER_VARIANT = ("tests", "cut", "removed")


def _variant_rows(plan: RunPlan, sel: SelectionPlan) -> list[dict[str, Any]]:
    """Selected tests (each record with the index of the shard that runs it), then cut, then
    removed: the selector's records as they are, the store fills the columns a kind lacks."""
    shard_of = {node: i for i, shard in enumerate(plan.shards) for node in shard}
    rows: list[dict[str, Any]] = [
        {"kind": "selected", **_record(t), "shard": shard_of.get(plan.node_id(t.test_id))}
        for t in sel.tests
    ]
    rows += [
        {"kind": "cut", **_record(c, "reason"), "signals": [], "reasons": [c.reason]}
        for c in sel.cut
    ]
    rows += [
        {"kind": "removed", "test_id": r.test_id, "signals": [], "reasons": [r.reason]}
        for r in sel.removed
    ]
    return rows


def _record(record: Any, *drop: str) -> dict[str, Any]:
    """A selector record's fields as a row's columns (tuples as the JSON columns' lists)."""
    return {
        f.name: list(v) if isinstance(v := getattr(record, f.name), tuple) else v
        for f in dataclasses.fields(record)
        if f.name not in drop
    }


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
    workers: int | None = None  # shard workers running at once (the runner's parallel)
    estimated_finish_seconds: float | None = None  # wall time of the job's shards on ``workers``
    budget_seconds: float | None = None
    budget_reason: str = ""
