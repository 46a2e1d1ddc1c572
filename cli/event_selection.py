"""The selector's plan for one ground-truth event: what `relay eval` scores."""

from __future__ import annotations

import time

from inventory.importmap import import_map_for
from planner.durations import base_run_history, costs_for
from selector import SelectionRequest, SignalConfig, select


def select_event(
    event,
    universe,
    *,
    budget=None,
    profiling_map=None,
    no_import_map=False,
    focus=0.0,
    budget_share=None,
    costs=None,
):
    """The selector's plan for one ground-truth event (its change facts, as a change to the
    installed torch), as ``relay eval`` scores it and the catch planner runs it. ``costs``
    (:func:`planner.durations.costs_for`) prices the universe once for many events; without
    it, the base run's history and the runner-seconds estimate."""
    from evaluation.groundtruth import event_facts, installed_reader

    config = SignalConfig(
        profiling_map=profiling_map, import_map=None if no_import_map else import_map_for(universe)
    )
    if costs is None:
        costs = costs_for(universe, history=base_run_history(universe))
    start = time.perf_counter()
    plan = select(
        SelectionRequest(
            facts=event_facts(event),
            universe=universe,
            costs=costs,
            reader=installed_reader,
            config=config,
            budget_seconds=budget,
            min_closeness=focus,
            budget_share=budget_share,
        )
    )
    plan.decision_seconds = round(time.perf_counter() - start, 4)
    return plan
