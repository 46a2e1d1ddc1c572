"""A release step (2.13 -> 2.14): its plan over its head universe.

:func:`release_plan` is what ``relay replay`` prints: the change facts between the two releases
through the four stages, over the head universe. That universe is, by default, the installed
inventory adjusted by the change facts (:func:`inventory.head.head_universe`, each adjusted
variant flagged); with a head environment it is the real one, collected under the head torch
(:func:`collected_universe`). Its ground truth is :mod:`evaluation.release`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from inventory.build import universe_from_inventory
from inventory.head import head_universe
from inventory.importmap import import_map_for
from planner.revisions import source_reader
from selector import History, SelectionPlan, SignalConfig, Universe, select
from upstream import UpstreamSource
from upstream.changes import ChangeFacts
from upstream.headenv import HeadEnv, ensure_env


@dataclass
class ReleasePlan:
    plan: SelectionPlan
    universe: Universe
    notes: list[str] = field(default_factory=list)


def head_version(facts: ChangeFacts) -> str:
    """The released version the facts' head resolved to (``2.14`` -> ``2.14.1``)."""
    return facts.head.resolved.split("+", 1)[0]


def collected_universe(
    env: HeadEnv, *, specs: Sequence[Path] = (), backend: str = "spyre"
) -> Universe:
    """The bundled suites collected for real under the head environment's torch (cached)."""
    return universe_from_inventory(backend=backend, specs=specs, python=env.python, env=env.env)


def release_plan(
    source: UpstreamSource,
    facts: ChangeFacts,
    *,
    installed: Universe,
    head: Universe | None = None,
    budget_seconds: float | None = None,
    workers: int = 1,
    history: History | None = None,
    profiling_map: Path | None = None,
    import_map: bool = True,
    min_closeness: float = 0.0,
) -> ReleasePlan:
    """The release step's plan over ``head`` (a collected head universe) or, without it, the
    installed universe adjusted by the change facts."""
    start = time.perf_counter()
    if head is None:
        adjusted = head_universe(installed, facts, source)
        universe, notes = adjusted.universe, adjusted.notes
    else:
        universe = head
        notes = [f"universe collected under the head torch: {head.label}, {len(head)} variants"]
    plan = select(
        facts,
        universe,
        reader=source_reader(source, facts),
        config=SignalConfig(
            profiling_map=profiling_map,
            import_map=import_map_for(installed) if import_map else None,
        ),
        budget_seconds=budget_seconds,
        workers=workers,
        history=history or History(),
        min_closeness=min_closeness,
    )
    plan.decision_seconds = round(time.perf_counter() - start, 4)
    return ReleasePlan(plan=plan, universe=universe, notes=notes)


def head_env_for(facts: ChangeFacts, *, offline: bool = True) -> HeadEnv:
    """The head environment (made once: minutes, the torch wheel from the local index)."""
    return ensure_env(head_version(facts), offline=offline)
