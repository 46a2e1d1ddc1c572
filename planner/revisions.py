"""Plans for a pair of upstream revisions: open the upstream source, compute the change facts,
build the universe, and ask the selector.

It never raises for an upstream it cannot read: it returns a plan that runs everything and says
why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from backends.base import PROJECT_ROOT
from config.settings import ci_stats_dir
from inventory.build import universe_from_inventory
from planner.durations import costs_for
from planner.filefacts import FileFactsStore
from selector import (
    History,
    SelectionPlan,
    SelectionRequest,
    SignalConfig,
    Universe,
    select,
    unanalysed,
)
from upstream import UpstreamError, UpstreamSource, open_source
from upstream.changes import ChangeFacts, compute_change_facts

log = logging.getLogger(__name__)


def source_reader(source: UpstreamSource, facts: ChangeFacts, *, local: Iterable[str] = ()) -> Any:
    """A ``reader(path, at_base)`` over the source at the facts' head / base; the ``local``
    paths (a bundled suite's test files: ours, not upstream's) are read from this install."""
    ours = frozenset(local)

    def read(path: str, at_base: bool) -> bytes | None:
        if path in ours:
            return (PROJECT_ROOT / path).read_bytes()
        return source.read_files(facts.base if at_base else facts.head, [path]).get(path)

    digest = getattr(source, "content_digest", None)
    if callable(digest):  # a stored step's source: the digests it keeps, not the files
        read.digest = lambda path, at_base: (  # type: ignore[attr-defined]
            None if path in ours else digest(facts.base if at_base else facts.head, path)
        )
    return read


def default_profiling_map() -> Path:
    """PyTorch's ``td_heuristic_profiling.json`` in the CI-statistics folder (``RELAY_CI_STATS``,
    else the user's cache); the coverage signal reads it when it exists."""
    return ci_stats_dir() / "td_heuristic_profiling.json"


def default_config() -> SignalConfig:
    """The signals' inputs when a caller gives none: the default profiling map."""
    return SignalConfig(profiling_map=default_profiling_map())


def unanalysed_budget(
    budget_seconds: float | None, unanalysed_seconds: float | None
) -> tuple[float | None, str]:
    """The budget of a change that cannot be analysed: the one given, else the default for
    such events (runner-seconds), with the reason the plan shows."""
    if budget_seconds is not None:
        return budget_seconds, "given"
    if unanalysed_seconds:
        return unanalysed_seconds, (
            f"default for an event the selector cannot analyse: "
            f"{unanalysed_seconds / 60:g} runner-minutes (RELAY_RUNNER_UNANALYSED_BUDGET_MINUTES)"
        )
    return None, ""


def plan_revisions(
    *,
    base: str,
    head: str,
    upstream: str | Path | None = None,
    backend: str = "spyre",
    universe: Universe | None = None,
    specs: Sequence[Path] = (),
    budget_seconds: float | None = None,
    history: History | str | Path | None = None,
    config: SignalConfig | None = None,
    facts_cache: str | Path | None = None,
    offline: bool = True,
    unanalysed_budget_seconds: float | None = None,
) -> SelectionPlan:
    """Plan one upstream event (base..head) for ``backend``.

    ``upstream``: a PyTorch checkout path (revisions are commits) or None for released wheels
    (revisions are versions; ``offline`` uses only cached wheels). ``universe`` defaults to the
    bundled suites' inventory (cached). If the revisions cannot be read, the plan selects the
    whole universe with ``fallback=True`` and the error in ``errors``, cut to ``budget_seconds``
    or, without one, to ``unanalysed_budget_seconds`` (runner-seconds; the cut is listed).
    ``config`` defaults to :func:`default_config`.
    """
    start = time.perf_counter()
    hist = history if isinstance(history, History) else History.load(history)
    uni = universe or universe_from_inventory(backend=backend, specs=specs)
    costs = costs_for(uni, backend=backend, history=hist)
    try:
        source = open_source(upstream, cache_dir=facts_cache, offline=offline)
        b, h = source.resolve(base), source.resolve(head)
        cache = facts_cache if facts_cache is not None else getattr(source, "cache_dir", None)
        facts = compute_change_facts(source, b, h, cache_dir=cache)
    except UpstreamError as exc:
        log.warning("cannot read upstream %s..%s: %s; selecting everything", base, head, exc)
        budget, why = unanalysed_budget(budget_seconds, unanalysed_budget_seconds)
        return select(
            SelectionRequest(
                facts=unanalysed(base, head, errors=[str(exc)]),
                universe=uni,
                costs=costs,
                backend=backend,
                force_all=f"upstream change not readable ({exc}); selecting everything",
                budget_seconds=budget,
                budget_reason=why,
            )
        )
    plan = select(
        SelectionRequest(
            facts=facts,
            universe=uni,
            costs=costs,
            backend=backend,
            reader=source_reader(source, facts, local=uni.files if uni.kind == "bundled" else ()),
            config=config if config is not None else default_config(),
            budget_seconds=budget_seconds,
            memo=FileFactsStore(Path(cache) / "filefacts") if cache else None,
        )
    )
    plan.decision_seconds = round(time.perf_counter() - start, 4)
    return plan
