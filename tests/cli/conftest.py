"""Fixtures of the `relay` command tests: the planner a replay stack loads by dotted path, and
the selection it makes (for the tests' expectations)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def small_selector_planner() -> str:
    """RELAY_PLANNER of the `relay replay --events` stack: a real selection (funnel, fallback,
    budget cut) over the small generated universe, run as quick sample tests standing in for
    the selected variants."""
    from tests.support.planners import SMALL_SELECTOR

    return SMALL_SELECTOR


@pytest.fixture(scope="session")
def small_selection() -> Any:
    """``small_selection(event, budget)``: the SelectionPlan that planner makes for an event."""
    from tests.support.planners import small_selection

    return small_selection
