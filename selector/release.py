"""A release step (2.13 -> 2.14) end to end: its plan, its real head universe, its ground truth.

* :func:`release_plan` is what ``relay replay`` prints: the change facts between the two
  releases through the four stages, over the head universe. That universe is, by default, the
  installed inventory adjusted by the change facts (:func:`selector.replay.head_universe`, each
  adjusted variant flagged); with a head environment it is the real one, collected under the
  head torch (:func:`collected_universe`).
* :func:`release_truth` runs the whole bundled universe under both torches and compares
  (:func:`selector.groundtruth.release_ground_truth`); ``relay eval --kind release`` scores the
  plan against it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from selector.changes import ChangeFacts
from selector.evaluate import GroundTruth
from selector.headenv import HeadEnv, ensure_env
from selector.inventory import DEFAULT_CACHE_DIR, build_inventory
from selector.inventory_sources import BundledSuites
from selector.plan import SelectionPlan, import_map_for, run_selection, source_reader
from selector.replay import head_universe
from selector.signals import SignalConfig
from selector.stages import History
from selector.stages.model import Universe
from selector.upstream import UpstreamSource


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
    inv = build_inventory(
        BundledSuites(()),
        backend=backend,
        specs=specs,
        cache_dir=DEFAULT_CACHE_DIR,
        python=env.python,
        env=env.env,
    )
    return Universe(
        variants=inv.variants,
        label=f"{inv.key.revision} ({inv.key.torch_build})",
        kind="bundled",
        key=f"{inv.key.torch_build}-{inv.key.backend_version}",
    )


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
    plan = run_selection(
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


def release_truth(
    facts: ChangeFacts,
    *,
    installed: Universe,
    env: HeadEnv,
    head: Universe,
    run: bool,
    log: Callable[[str], None] = lambda _: None,
) -> GroundTruth:
    from selector.groundtruth import release_ground_truth

    return release_ground_truth(
        installed,
        head,
        name=f"{facts.base.resolved} -> {facts.head.resolved}",
        changed_files=[f.path for f in facts.files],
        head_python=str(env.python),
        head_env=env.env,
        run=run,
        log=log,
    )


def head_env_for(facts: ChangeFacts, *, offline: bool = True) -> HeadEnv:
    """The head environment (made once: minutes, the torch wheel from the local index)."""
    return ensure_env(head_version(facts), offline=offline)
