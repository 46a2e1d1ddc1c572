"""Selection requests for tests: the selector is given everything by its caller, so a test
prices its universe as a planner would (history, a flat runner-seconds prior unless it gives an
estimate, the spyre backend's device-time hook) and asks with one request."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backends import get_backend
from evaluation.scores import FLAT_RUNNER_PRIOR  # the evaluation's flat runner prior
from selector import (
    Costs,
    DurationEstimate,
    History,
    SelectionPlan,
    SelectionRequest,
    Universe,
    price,
    select,
    unanalysed,
)
from upstream.changes import ChangeFacts


def costs(
    universe: Universe,
    *,
    history: History | None = None,
    estimator: DurationEstimate | None = None,
    backend: str = "spyre",
) -> Costs:
    return price(
        universe,
        history=history or History(),
        runner=estimator or FLAT_RUNNER_PRIOR,
        device=get_backend(backend).duration_estimate(),
    )


def request(
    facts: ChangeFacts,
    universe: Universe,
    *,
    history: History | None = None,
    estimator: DurationEstimate | None = None,
    **fields: Any,
) -> SelectionRequest:
    return SelectionRequest(
        facts=facts,
        universe=universe,
        costs=costs(
            universe, history=history, estimator=estimator, backend=fields.get("backend", "spyre")
        ),
        **fields,
    )


def plan(facts: ChangeFacts, universe: Universe, **fields: Any) -> SelectionPlan:
    """``select`` of :func:`request`."""
    return select(request(facts, universe, **fields))


def plan_everything(
    universe: Universe,
    *,
    reason: str,
    base: str = "base",
    head: str = "head",
    source_kind: str = "unknown",
    errors: Sequence[str] = (),
    **fields: Any,
) -> SelectionPlan:
    """Every variant (cut to the budget), with ``reason`` as the fallback."""
    facts = unanalysed(base, head, source_kind=source_kind, errors=errors)
    return plan(facts, universe, force_all=reason, **fields)
