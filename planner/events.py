"""From an upstream event to a :class:`~planner.model.RunPlan` for a backend.

Revisions come from the event: a pull request's base..head SHAs, a push's before..after, a
replay's versions. Without a checkout (``upstream``) commit SHAs cannot be read, and the selector
says so and selects the whole universe (cut to the budget). A nightly run selects the whole
universe on purpose.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from backends import Backend
from inventory.build import universe_from_inventory
from planner.durations import estimator_for
from planner.model import RunPlan
from planner.release import plan_release
from planner.revisions import plan_revisions
from selector import History, SelectionPlan, Universe, select_everything
from upstream import UpstreamError
from wire.github.events import UpstreamEvent

log = logging.getLogger(__name__)


def revisions(event: UpstreamEvent) -> tuple[str, str] | None:
    """(base, head) to compare, or None for a whole-universe run."""
    if event.event in ("nightly",):
        return None
    if event.event == "periodic" and event.base_ref and event.head_ref:
        return event.base_ref, event.head_ref  # a release replay: versions such as 2.13 -> 2.14
    if event.event == "push" and event.before_sha and event.after_sha:
        return event.before_sha, event.after_sha
    if event.base_sha and event.head_sha:
        return event.base_sha, event.head_sha
    if event.head_sha:
        return f"{event.head_sha}^", event.head_sha  # a re-run request: the head commit's change
    return None


def plan_event(
    event: UpstreamEvent,
    *,
    backend: Backend,
    specs: Sequence[Path],
    upstream: Path | None = None,
    upstream_cache: Path | None = None,
    budget_seconds: float | None = None,
    workers: int = 1,
    history: History | None = None,
    unanalysed_budget_seconds: float | None = None,
) -> RunPlan:
    """The selector's four stages over the bundled universe on ``backend`` under ``specs``.

    A release replay (a "periodic" event between two versions) is planned exactly as
    ``relay replay --from A --to B`` plans it (:func:`planner.release.plan_release`): the same
    specs, head universe and signals, so both report the same selection. Budgets are in
    runner-seconds; a change that cannot be read is cut to ``unanalysed_budget_seconds`` unless
    ``budget_seconds`` is given (a nightly run is the whole universe on purpose)."""
    revs = revisions(event)
    if event.event == "periodic" and revs is not None:
        try:
            release = plan_release(
                revs[0],
                revs[1],
                backend=backend.name,
                specs=specs,
                upstream=upstream,
                cache_dir=upstream_cache,
                budget_seconds=budget_seconds,
                workers=workers,
                history=history,
            )
            return _run_plan(release.plan, release.universe, backend, specs)
        except UpstreamError as exc:  # planned below: everything, with the error as the reason
            log.warning("cannot read the release step %s -> %s: %s", *revs, exc)
    universe = universe_from_inventory(backend=backend.name, specs=specs)
    if revs is None:
        head = event.head_sha or "installed"
        plan = select_everything(
            universe,
            reason=f"{event.event} run: the whole universe",
            base=head,
            head=head,
            source_kind="installed",
            backend=backend.name,
            history=history,
            estimator=estimator_for(universe, history=history),
            budget_seconds=budget_seconds,
            workers=workers,
        )
    else:
        base, head = revs
        plan = plan_revisions(
            base=base,
            head=head,
            upstream=upstream,
            backend=backend.name,
            universe=universe,
            specs=specs,
            budget_seconds=budget_seconds,
            workers=workers,
            history=history,
            facts_cache=upstream_cache,
            offline=False,
            unanalysed_budget_seconds=unanalysed_budget_seconds,
        )
    return _run_plan(plan, universe, backend, specs)


def _run_plan(
    plan: SelectionPlan, universe: Universe, backend: Backend, specs: Sequence[Path]
) -> RunPlan:
    node_ids = {v.test_id: v.node_id for v in universe.variants}
    log.info("selection: %s", plan.summary())
    return RunPlan(
        shards=[[node_ids.get(t, t) for t in shard] for shard in plan.shards if shard],
        runner=backend.runner_config(specs),
        selection=plan,
        base_rev=plan.base_resolved or plan.base,
        head_rev=plan.head_resolved or plan.head,
    )
