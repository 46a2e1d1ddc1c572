"""The SelectionPlan, and :func:`select`, the selector's one entry point.

* :func:`select` chains the four stages over given change facts and a universe: pure and
  deterministic for the same inputs (``reader`` reads upstream files; nothing else is touched).
* :func:`select_everything` is the plan for a change that cannot be analysed (no readable
  revisions, a nightly run): every variant, with the reason as the fallback.

``SCHEMA_VERSION`` changelog: 1: first version. 2: costs in runner-seconds: tests' ``seconds``,
``shard_seconds`` and ``budget_seconds`` are runner-seconds; ``estimated_runner_seconds``,
``full_runner_seconds`` (the applicable universe), ``workers``, ``estimated_finish_seconds``
and ``duration_sources`` added; the simulated device-seconds stay beside them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import Counter
from collections.abc import Iterable, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from backends import get_backend
from backends.base import FlatEstimate
from selector.model import (
    NEW_AT_HEAD,
    REMOVED_AT_HEAD,
    DurationEstimate,
    History,
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

SCHEMA_VERSION = 2

#: runner-seconds of a variant nobody measured, when the caller gives no estimate
FLAT_RUNNER_PRIOR = FlatEstimate(per_test=0.2, source="flat-runner-prior")


class FunnelStep(BaseModel):
    stage: str
    count_in: int
    count_out: int
    unit: str
    seconds: float
    notes: list[str] = Field(default_factory=list)


class PlannedTest(BaseModel):
    test_id: str
    rank: int
    risk: float
    seconds: float
    seconds_source: str
    mode: str
    gating: bool
    signals: list[str]
    reasons: list[str]
    flag: str | None = None


class CutTest(BaseModel):
    test_id: str
    rank: int
    risk: float
    seconds: float
    reason: str


class RemovedTest(BaseModel):
    test_id: str
    reason: str


class FallbackInfo(BaseModel):
    scope: str
    units: list[str]
    reason: str
    tests: int


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
    fallbacks: list[FallbackInfo] = Field(default_factory=list)
    unexplained: list[str] = Field(default_factory=list)
    explained: dict[str, list[str]] = Field(default_factory=dict)
    signals: dict[str, int] = Field(default_factory=dict)
    tests: list[PlannedTest]
    cut: list[CutTest] = Field(default_factory=list)
    removed: list[RemovedTest] = Field(default_factory=list)
    shards: list[list[str]]
    shard_seconds: list[float]
    budget_seconds: float | None = None  # runner-seconds
    budget_reason: str = ""  # where the budget comes from when no one gave it
    min_closeness: float = 0.0
    estimated_device_seconds: float  # simulated device time of the selection, shown beside
    full_device_seconds: float
    estimated_runner_seconds: float = 0.0  # the selection's cost: runner-seconds
    full_runner_seconds: float = 0.0  # the applicable universe's (not skipped by a spec)
    workers: int = 1
    estimated_finish_seconds: float = 0.0  # wall time on ``workers`` runners: the longest shard
    duration_sources: dict[str, int] = Field(default_factory=dict)  # selected tests per source
    decision_seconds: float = 0.0
    errors: list[str] = Field(default_factory=list)

    @property
    def cost_runner_minutes(self) -> float:
        return round(self.estimated_runner_seconds / 60, 2)

    @property
    def finish_minutes(self) -> float:
        return round(self.estimated_finish_seconds / 60, 2)

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
            f"runner-minutes ({100 * self.cost_share:.1f} %), about {self.finish_minutes:,.1f} "
            f"min on {self.workers} worker(s); simulated device time "
            f"{self.estimated_device_seconds:.3f} of {self.full_device_seconds:.3f} s{fb}"
        )

    def fingerprint(self) -> str:
        """Digest of the decision (tests, modes, cut, shards), not of timings."""
        body = json.dumps(
            [
                self.test_ids,
                [t.mode for t in self.tests],
                [c.test_id for c in self.cut],
                self.shards,
                self.fallback,
            ]
        )
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    def to_json(self, *, indent: int | None = 2) -> str:
        return self.model_dump_json(indent=indent)

    def write(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(p.suffix + ".tmp")
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


_DEVICE_ESTIMATES: dict[str, DurationEstimate] = {}


def _device_estimate(backend: str) -> DurationEstimate:
    """The backend's device-time hook, one per backend (it caches per op and template)."""
    if backend not in _DEVICE_ESTIMATES:
        _DEVICE_ESTIMATES[backend] = get_backend(backend).duration_estimate()
    return _DEVICE_ESTIMATES[backend]


def _applicable_totals(
    universe: Universe,
    history: History | None,
    estimator: DurationEstimate,
    device: DurationEstimate,
) -> tuple[float, float]:
    """Runner- and device-seconds of the applicable universe (what the applicability stage
    keeps of every variant), kept on the universe for the same history and estimates: a warm
    decision does not price 30,000 variants again."""
    cache: dict[str, Any] = universe.__dict__.setdefault("_totals", {})
    shape = (len(universe.variants), len(universe.flags))
    got = cache.get("last")
    if (
        got is not None
        and got[0] is history
        and got[1] is estimator
        and got[2] is device
        and got[4] == shape
    ):
        return got[3]
    hist = history or History()
    full = full_device = 0.0
    for v in universe.variants:
        if (
            universe.flags.get(v.test_id) == REMOVED_AT_HEAD
            or v.decision == "skip"
            or v.static_skip
        ):
            continue  # not applicable: the applicability stage removes it
        h = hist.get(v.test_id)
        full += h.seconds if h is not None and h.seconds is not None else estimator.seconds(v)
        full_device += (
            h.device_seconds
            if h is not None and h.device_seconds is not None
            else device.seconds(v)
        )
    cache["last"] = (history, estimator, device, (full, full_device), shape)
    return full, full_device


def select(
    facts: ChangeFacts,
    universe: Universe,
    *,
    backend: str = "spyre",
    reader: Any = None,
    config: SignalConfig | None = None,
    budget_seconds: float | None = None,
    workers: int = 1,
    history: History | None = None,
    triage: TriageHook | None = None,
    estimator: DurationEstimate | None = None,
    force_all: str | None = None,
    min_closeness: float = 0.0,
    device_estimator: DurationEstimate | None = None,
    budget_reason: str = "",
    budget_share: float | None = None,
    memo: MutableMapping[str, Any] | None = None,
) -> SelectionPlan:
    """The four stages over ``facts`` and ``universe``; deterministic for the same inputs.

    ``memo`` keeps what the signals learn per upstream file contents between decisions (a
    dict, or the planner's store on disk); without it they are kept in this process.

    ``budget_share`` (without ``budget_seconds``): the budget is that share of the applicable
    universe's runner-seconds; what ranks past it is cut, each with its rank and signals.

    Runner-seconds come from ``history``, else ``estimator`` (default: a flat prior,
    :data:`FLAT_RUNNER_PRIOR`; the planner gives :mod:`planner.durations`'s); simulated
    device-seconds from ``history``, else ``device_estimator`` (default: the backend's
    device-time hook). ``budget_seconds`` is in runner-seconds. ``force_all`` selects every
    variant, with that reason as the fallback."""
    start = time.perf_counter()
    if estimator is None:
        estimator = FLAT_RUNNER_PRIOR
    if device_estimator is None:
        device_estimator = _device_estimate(backend)
    full, full_device = _applicable_totals(universe, history, estimator, device_estimator)
    if budget_seconds is None and budget_share:
        budget_seconds = round(budget_share * full, 3)
        budget_reason = budget_reason or (
            f"{100 * budget_share:g} % of the applicable universe's {full:,.0f} runner-seconds"
        )
    changes = changes_stage(facts)
    impact = impact_stage(
        changes, universe, config=config, reader=reader, force_all=force_all, memo=memo
    )
    applicable = applicability_stage(impact.candidates, universe)
    budget = budget_stage(
        applicable.kept,
        universe,
        budget_seconds=budget_seconds,
        workers=workers,
        history=history,
        estimator=estimator,
        triage=triage,
        min_closeness=min_closeness,
        device_estimator=device_estimator,
    )
    flags = list(universe.flags.values())
    sources = Counter(r.seconds_source for r in budget.selected)
    return SelectionPlan(
        backend=backend,
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
        fallbacks=[
            FallbackInfo(scope=f.scope, units=list(f.units), reason=f.reason, tests=f.tests)
            for f in impact.fallbacks
        ],
        unexplained=[u.key for u in impact.unexplained],
        explained=impact.explained,
        signals=impact.per_signal,
        tests=[
            PlannedTest(
                test_id=r.test_id,
                rank=r.rank,
                risk=r.risk,
                seconds=r.seconds,
                seconds_source=r.seconds_source,
                mode=r.mode,
                gating=r.gating,
                signals=list(r.signals),
                reasons=list(r.reasons),
                flag=r.flag,
            )
            for r in budget.selected
        ],
        cut=[
            CutTest(test_id=c.test_id, rank=c.rank, risk=c.risk, seconds=c.seconds, reason=c.reason)
            for c in budget.cut
        ],
        removed=[RemovedTest(test_id=r.test_id, reason=r.reason) for r in applicable.removed],
        shards=budget.shards,
        shard_seconds=budget.shard_seconds,
        budget_seconds=budget_seconds,
        budget_reason=budget_reason,
        min_closeness=min_closeness,
        estimated_device_seconds=budget.selected_device_seconds,
        full_device_seconds=round(full_device, 9),
        estimated_runner_seconds=budget.selected_seconds,
        full_runner_seconds=round(full, 6),
        workers=max(1, workers),
        estimated_finish_seconds=max(budget.shard_seconds, default=0.0),
        duration_sources=dict(sorted(sources.items())),
        decision_seconds=round(time.perf_counter() - start, 4),
        errors=list(facts.errors),
    )


def select_everything(
    universe: Universe,
    *,
    reason: str,
    base: str,
    head: str,
    source_kind: str = "unknown",
    errors: Sequence[str] = (),
    backend: str = "spyre",
    history: History | None = None,
    budget_seconds: float | None = None,
    workers: int = 1,
    estimator: DurationEstimate | None = None,
    budget_reason: str = "",
    budget_share: float | None = None,
) -> SelectionPlan:
    """Every variant of ``universe`` (cut to the budget, in runner-seconds), because the change
    between ``base`` and ``head`` is not analysed: ``reason`` says why, ``errors`` what
    failed."""

    def rev(name: str) -> ResolvedRevision:
        return ResolvedRevision(kind="git", requested=name, resolved=name, detail="not analysed")

    facts = ChangeFacts(
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
    return select(
        facts,
        universe,
        backend=backend,
        history=history,
        budget_seconds=budget_seconds,
        workers=workers,
        estimator=estimator,
        force_all=reason,
        budget_reason=budget_reason,
        budget_share=budget_share,
    )
