"""The selector's plan for one ground-truth event: what `relay eval` scores."""

from __future__ import annotations

import time

from inventory.importmap import import_map_for
from planner.durations import base_run_history, estimator_for
from selector import SignalConfig, select


def select_event(
    event, universe, *, budget=None, profiling_map=None, no_import_map=False, focus=0.0,
    budget_share=None, history=None, estimator=None, workers=1,
):  # fmt: skip
    """The selector's plan for one ground-truth event (its change facts, as a change to the
    installed torch), as ``relay eval`` scores it and the catch planner runs it."""
    from evaluation.groundtruth import event_facts, installed_reader

    config = SignalConfig(
        profiling_map=profiling_map, import_map=None if no_import_map else import_map_for(universe)
    )
    if history is None:
        history = base_run_history(universe)
    if estimator is None:
        estimator = estimator_for(universe, history=history)
    start = time.perf_counter()
    plan = select(
        event_facts(event),
        universe,
        reader=installed_reader,
        config=config,
        budget_seconds=budget,
        min_closeness=focus,
        estimator=estimator,
        history=history,
        budget_share=budget_share,
        workers=workers,
    )
    plan.decision_seconds = round(time.perf_counter() - start, 4)
    return plan
