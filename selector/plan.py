"""The SelectionPlan and the functions that produce one.

* :func:`run_selection` chains the four stages over given change facts and a universe (pure).
* :func:`plan_for_event` is the entry point for the workers: base and head revisions (and
  optionally a PyTorch checkout) in, a :class:`SelectionPlan` out, with ``plan.shards`` as lists
  of pytest node ids runnable from the project root for the bundled suites. It never raises for
  an upstream it cannot read: it returns a plan that runs everything and says why.

``SCHEMA_VERSION`` changelog: 1: first version.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from selector.changes import ChangeFacts, compute_change_facts
from selector.inventory import DEFAULT_CACHE_DIR, build_inventory
from selector.inventory_sources import BundledSuites, CheckoutTests
from selector.signals import SignalConfig
from selector.stages import (
    NEW_AT_HEAD,
    REMOVED_AT_HEAD,
    History,
    StageRecord,
    TriageHook,
    Universe,
    applicability_stage,
    budget_stage,
    changes_stage,
    impact_stage,
)
from selector.stages.costs import SimulatorEstimate
from selector.upstream import UpstreamError, UpstreamSource, open_source

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1


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
    budget_seconds: float | None = None
    min_closeness: float = 0.0
    estimated_device_seconds: float
    full_device_seconds: float
    decision_seconds: float = 0.0
    errors: list[str] = Field(default_factory=list)

    @property
    def test_ids(self) -> list[str]:
        return [t.test_id for t in self.tests]

    def summary(self) -> str:
        """One line: "N of M variants to evaluate" with cost and fallback."""
        fb = f"; FALLBACK ({', '.join(f.scope for f in self.fallbacks)})" if self.fallback else ""
        return (
            f"{len(self.tests)} of {self.universe.variants} variants to evaluate "
            f"({self.estimated_device_seconds:.3f} of {self.full_device_seconds:.3f} simulated "
            f"device-seconds, {len(self.shards)} shard(s)){fb}"
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


def run_selection(
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
    estimator: SimulatorEstimate | None = None,
    force_all: str | None = None,
    min_closeness: float = 0.0,
) -> SelectionPlan:
    """The four stages over ``facts`` and ``universe``; deterministic for the same inputs."""
    start = time.perf_counter()
    estimator = estimator or SimulatorEstimate()
    changes = changes_stage(facts)
    impact = impact_stage(changes, universe, config=config, reader=reader, force_all=force_all)
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
    )
    hist = history or History()
    full = 0.0
    for v in universe.variants:
        if universe.flags.get(v.test_id) == REMOVED_AT_HEAD or v.decision == "skip":
            continue
        h = hist.get(v.test_id)
        full += h.seconds if h is not None and h.seconds is not None else estimator.seconds(v)
    flags = list(universe.flags.values())
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
        min_closeness=min_closeness,
        estimated_device_seconds=budget.selected_seconds,
        full_device_seconds=round(full, 9),
        decision_seconds=round(time.perf_counter() - start, 4),
        errors=list(facts.errors),
    )


def source_reader(source: UpstreamSource, facts: ChangeFacts) -> Any:
    """A ``reader(path, at_base)`` over the source at the facts' head / base."""

    def read(path: str, at_base: bool) -> bytes | None:
        return source.read_files(facts.base if at_base else facts.head, [path]).get(path)

    return read


def universe_from_inventory(
    *,
    backend: str = "spyre",
    suites: Sequence[str] = (),
    checkout: str | Path | None = None,
    test_files: Sequence[str] = (),
    specs: Sequence[Path] = (),
    cache_dir: Path | None = DEFAULT_CACHE_DIR,
) -> Universe:
    """The collected universe: the bundled suites, or ``test_files`` of a checkout."""
    if checkout is not None and test_files:
        source: BundledSuites | CheckoutTests = CheckoutTests(Path(checkout), tuple(test_files))
        kind = "checkout"
    else:
        source, kind = BundledSuites(tuple(suites)), "bundled"
    inv = build_inventory(source, backend=backend, specs=specs, cache_dir=cache_dir)
    return Universe(
        variants=inv.variants,
        label=f"{inv.key.revision} ({inv.key.torch_build})",
        kind=kind,
        key=f"{inv.key.torch_build}-{inv.key.backend_version}",
    )


def import_map_for(universe: Universe, *, backend: str = "spyre") -> Path | None:
    """The learned import map for the universe's torch build and backend (run once, cached)."""
    from selector.importmap import DEFAULT_IMPORT_MAP_DIR, learn_import_map

    if not universe.key or universe.kind not in ("bundled", "installed+facts"):
        return None
    safe = "".join(c if c.isalnum() or c in ".-" else "_" for c in universe.key)
    build, _, backend_version = safe.partition("-spyre")
    files = hashlib.sha256(",".join(sorted(universe.by_file)).encode()).hexdigest()[:8]
    key = f"{build}-{files}-spyre{backend_version}"
    exact = DEFAULT_IMPORT_MAP_DIR / f"importmap-{key}-traced.json"
    if not exact.is_file():
        # the traced run takes minutes: a map of the same torch build and test files learned
        # with an earlier backend version is reused (its backend symbols may be stale)
        same = sorted(
            DEFAULT_IMPORT_MAP_DIR.glob(f"importmap-{build}-{files}-*-traced.json"),
            key=lambda p: p.stat().st_mtime,
        )
        if same:
            log.info("reusing import map %s for %s", same[-1], key)
            return same[-1]
    return learn_import_map(universe.variants, key=key, backend=backend, sweep=1)


def plan_for_event(
    *,
    base: str,
    head: str,
    upstream: str | Path | None = None,
    backend: str = "spyre",
    universe: Universe | None = None,
    specs: Sequence[Path] = (),
    budget_seconds: float | None = None,
    workers: int = 1,
    history: History | str | Path | None = None,
    config: SignalConfig | None = None,
    facts_cache: str | Path | None = None,
    offline: bool = True,
) -> SelectionPlan:
    """Plan one upstream event (base..head) for ``backend``.

    ``upstream``: a PyTorch checkout path (revisions are commits) or None for released wheels
    (revisions are versions; ``offline`` uses only cached wheels). ``universe`` defaults to the
    bundled suites' inventory (cached). If the revisions cannot be read, the plan selects the
    whole universe with ``fallback=True`` and the error in ``errors``.
    """
    start = time.perf_counter()
    hist = history if isinstance(history, History) else History.load(history)
    uni = universe or universe_from_inventory(backend=backend, specs=specs)
    try:
        source = open_source(upstream, offline=offline)
        b, h = source.resolve(base), source.resolve(head)
        cache = facts_cache if facts_cache is not None else getattr(source, "cache_dir", None)
        facts = compute_change_facts(source, b, h, cache_dir=cache)
    except UpstreamError as exc:
        log.warning("cannot read upstream %s..%s: %s; selecting everything", base, head, exc)
        return unreadable_plan(
            base,
            head,
            uni,
            backend=backend,
            error=str(exc),
            history=hist,
            budget_seconds=budget_seconds,
            workers=workers,
        )
    plan = run_selection(
        facts,
        uni,
        backend=backend,
        reader=source_reader(source, facts),
        config=config,
        budget_seconds=budget_seconds,
        workers=workers,
        history=hist,
    )
    plan.decision_seconds = round(time.perf_counter() - start, 4)
    return plan


def unreadable_plan(
    base: str,
    head: str,
    universe: Universe,
    *,
    backend: str,
    error: str,
    history: History,
    budget_seconds: float | None,
    workers: int,
) -> SelectionPlan:
    """Everything, because the change could not be analysed; the error is in the plan."""
    from selector.upstream import ResolvedRevision

    def rev(r: str) -> ResolvedRevision:
        return ResolvedRevision(kind="git", requested=r, resolved=r, detail="unresolved")

    facts = ChangeFacts(
        source_kind="unknown",
        base=rev(base),
        head=rev(head),
        files=[],
        python=[],
        native_functions=[],
        derivatives=[],
        db_entries=[],
        errors=[error],
    )
    return run_selection(
        facts,
        universe,
        backend=backend,
        history=history,
        budget_seconds=budget_seconds,
        workers=workers,
        force_all=f"upstream change not readable ({error}); selecting everything",
    )
