"""The SelectionPlan, and :func:`select`, the selector's one entry point.

:func:`select` chains the four stages over one :class:`SelectionRequest`: the change facts, the
universe, the costs the planner priced it with (history, runner-seconds and device-seconds
estimates), the signals' inputs and the budget. It is pure and deterministic for the same
request (``reader`` reads upstream files; nothing else is touched). A change that cannot be
analysed (no readable revisions, a nightly run) is planned with :func:`unanalysed` facts and
``force_all``: every variant, with the reason as the fallback.

The plan ranks and cuts; it does not split the selection into shards: the runner's split
(:mod:`planner.sharding`) is the only one, stored with the job.

``SCHEMA_VERSION`` changelog: 1: first version. 2: costs in runner-seconds: tests' ``seconds``,
``shard_seconds`` and ``budget_seconds`` are runner-seconds; ``estimated_runner_seconds``,
``full_runner_seconds`` (the applicable universe), ``workers``, ``estimated_finish_seconds``
and ``duration_sources`` added; the simulated device-seconds stay beside them. 3: ``shards``,
``shard_seconds``, ``workers`` and ``estimated_finish_seconds`` removed (the runner's split
is stored with the job, :meth:`planner.RunPlan.stored`); ``fingerprint`` covers the decision
(tests, modes, cut, fallback).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from selector.model import (
    NEW_AT_HEAD,
    REMOVED_AT_HEAD,
    Costs,
    Cut,
    Fallback,
    Ranked,
    Removed,
    StageRecord,
    Universe,
)
from selector.signals import SignalConfig
from selector.stages.applicability import applicability_stage
from selector.stages.budget import TriageHook, budget_stage
from selector.stages.changes import changes_stage
from selector.stages.impact import impact_stage
from upstream.base import ResolvedRevision
from upstream.changes import ChangeFacts

log = logging.getLogger(__name__)

SCHEMA_VERSION = 3

#: reads an upstream file at head (or at base with ``True``); None when it cannot
Reader = Callable[[str, bool], bytes | None]


class FunnelStep(BaseModel):
    stage: str
    count_in: int
    count_out: int
    unit: str
    seconds: float
    notes: list[str] = Field(default_factory=list)


class UniverseInfo(BaseModel):
    label: str
    kind: str
    variants: int
    new_at_head: int = 0
    removed_at_head: int = 0


class SelectionPlan(BaseModel):
    schema_version: int = SCHEMA_VERSION
    backend: str
    source_kind: str
    base: str
    head: str
    base_resolved: str = ""
    head_resolved: str = ""
    universe: UniverseInfo
    funnel: list[FunnelStep]
    fallback: bool
    fallbacks: list[Fallback] = Field(default_factory=list)
    unexplained: list[str] = Field(default_factory=list)
    explained: dict[str, list[str]] = Field(default_factory=dict)
    signals: dict[str, int] = Field(default_factory=dict)
    tests: list[Ranked]  # the selector's own records: one definition from selector to API
    cut: list[Cut] = Field(default_factory=list)
    removed: list[Removed] = Field(default_factory=list)
    budget_seconds: float | None = None  # runner-seconds
    budget_reason: str = ""  # where the budget comes from when no one gave it
    min_closeness: float = 0.0
    estimated_device_seconds: float  # simulated device time of the selection, shown beside
    full_device_seconds: float
    estimated_runner_seconds: float = 0.0  # the selection's cost: runner-seconds
    full_runner_seconds: float = 0.0  # the applicable universe's (not skipped by a spec)
    duration_sources: dict[str, int] = Field(default_factory=dict)  # selected tests per source
    decision_seconds: float = 0.0
    errors: list[str] = Field(default_factory=list)

    @property
    def cost_runner_minutes(self) -> float:
        return round(self.estimated_runner_seconds / 60, 2)

    @property
    def cost_share(self) -> float:
        """The selection's runner-seconds over the applicable universe's."""
        return (
            self.estimated_runner_seconds / self.full_runner_seconds
            if self.full_runner_seconds
            else 0.0
        )

    @property
    def test_ids(self) -> list[str]:
        return [t.test_id for t in self.tests]

    def summary(self) -> str:
        """One line: "N of M variants to evaluate" with cost and fallback."""
        fb = f"; FALLBACK ({', '.join(f.scope for f in self.fallbacks)})" if self.fallback else ""
        return (
            f"{len(self.tests)} of {self.universe.variants} variants to evaluate: "
            f"{self.cost_runner_minutes:,.1f} of {self.full_runner_seconds / 60:,.1f} "
            f"runner-minutes ({100 * self.cost_share:.1f} %); simulated device time "
            f"{self.estimated_device_seconds:.3f} of {self.full_device_seconds:.3f} s{fb}"
        )

    def fingerprint(self) -> str:
        """Digest of the decision (tests in rank order, modes, cut, fallback), not of timings."""
        body = json.dumps(
            [
                self.test_ids,
                [t.mode for t in self.tests],
                [c.test_id for c in self.cut],
                self.fallback,
            ]
        )
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    def to_json(self, *, indent: int | None = 2) -> str:
        return self.model_dump_json(indent=indent)

    def write(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        tmp.write_text(self.to_json(), encoding="utf-8")
        tmp.replace(p)
        return p


def _funnel(records: Iterable[StageRecord]) -> list[FunnelStep]:
    return [
        FunnelStep(
            stage=r.stage,
            count_in=r.count_in,
            count_out=r.count_out,
            unit=r.unit,
            seconds=r.seconds,
            notes=list(r.notes),
        )
        for r in records
    ]


@dataclass(frozen=True)
class SelectionRequest:
    """Everything one decision reads, given by the planner.

    ``costs`` prices the universe (:func:`selector.price`: history, runner-seconds and simulated
    device-seconds estimates). ``budget_seconds`` is in runner-seconds; ``budget_share``
    (without ``budget_seconds``): that share of the applicable universe's runner-seconds, with
    ``budget_reason`` saying where the budget comes from. ``min_closeness`` (focus) cuts what
    only broad signals chose. ``force_all`` selects every variant, with that reason as the
    fallback. ``memo`` keeps what the signals learn per upstream file contents between
    decisions (a dict, or the planner's store on disk); without it they are kept in this
    process."""

    facts: ChangeFacts
    universe: Universe
    costs: Costs
    backend: str = "spyre"
    reader: Reader | None = None
    config: SignalConfig = field(default_factory=SignalConfig)
    budget_seconds: float | None = None
    budget_share: float | None = None
    budget_reason: str = ""
    min_closeness: float = 0.0
    force_all: str | None = None
    triage: TriageHook | None = None
    memo: MutableMapping[str, Any] | None = None


def unanalysed(
    base: str, head: str, *, source_kind: str = "unknown", errors: Sequence[str] = ()
) -> ChangeFacts:
    """The facts of a change between ``base`` and ``head`` that is not analysed (nothing is
    known to have changed; ``errors`` say what failed): a request over them with ``force_all``
    is the whole universe, cut to the budget."""

    def rev(name: str) -> ResolvedRevision:
        return ResolvedRevision(kind="git", requested=name, resolved=name, detail="not analysed")

    return ChangeFacts(
        source_kind=source_kind,
        base=rev(base),
        head=rev(head),
        files=[],
        python=[],
        native_functions=[],
        derivatives=[],
        db_entries=[],
        errors=list(errors),
    )


def _budget(request: SelectionRequest) -> tuple[float | None, str]:
    full = request.costs.applicable_runner_seconds
    if request.budget_seconds is None and request.budget_share:
        share = request.budget_share
        return round(share * full, 3), request.budget_reason or (
            f"{100 * share:g} % of the applicable universe's {full:,.0f} runner-seconds"
        )
    return request.budget_seconds, request.budget_reason


def select(request: SelectionRequest) -> SelectionPlan:
    """The four stages over ``request``; deterministic for the same request."""
    start = time.perf_counter()
    facts, universe, costs = request.facts, request.universe, request.costs
    if costs.variants != len(universe):
        raise ValueError(
            f"costs priced a universe of {costs.variants} variants, not this one of {len(universe)}"
        )
    budget_seconds, budget_reason = _budget(request)
    changes = changes_stage(facts)
    impact = impact_stage(
        changes,
        universe,
        config=request.config,
        reader=request.reader,
        force_all=request.force_all,
        memo=request.memo,
    )
    applicable = applicability_stage(impact.candidates, universe)
    budget = budget_stage(
        applicable.kept,
        universe,
        costs=costs,
        budget_seconds=budget_seconds,
        triage=request.triage,
        min_closeness=request.min_closeness,
    )
    flags = list(universe.flags.values())
    return SelectionPlan(
        backend=request.backend,
        source_kind=facts.source_kind,
        base=facts.base.requested,
        head=facts.head.requested,
        base_resolved=facts.base.resolved,
        head_resolved=facts.head.resolved,
        universe=UniverseInfo(
            label=universe.label,
            kind=universe.kind,
            variants=len(universe),
            new_at_head=flags.count(NEW_AT_HEAD),
            removed_at_head=flags.count(REMOVED_AT_HEAD),
        ),
        funnel=_funnel([changes.record, impact.record, applicable.record, budget.record]),
        fallback=bool(impact.fallbacks),
        fallbacks=list(impact.fallbacks),
        unexplained=[u.key for u in impact.unexplained],
        explained=impact.explained,
        signals=impact.per_signal,
        tests=list(budget.selected),
        cut=list(budget.cut),
        removed=list(applicable.removed),
        budget_seconds=budget_seconds,
        budget_reason=budget_reason,
        min_closeness=request.min_closeness,
        estimated_device_seconds=budget.selected_device_seconds,
        full_device_seconds=round(costs.applicable_device_seconds, 9),
        estimated_runner_seconds=budget.selected_seconds,
        full_runner_seconds=round(costs.applicable_runner_seconds, 6),
        duration_sources=dict(sorted(Counter(r.seconds_source for r in budget.selected).items())),
        decision_seconds=round(time.perf_counter() - start, 4),
        errors=list(facts.errors),
    )
