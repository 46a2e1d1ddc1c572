"""Fixtures for the spyre_stack tests: the backend is registered on first use, not at import.
(``run_python`` and ``repo_root`` come from tests/conftest.py.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spyre() -> Iterator[None]:
    """Register the backend once per session, with the fp32 down-cast warning silenced (the
    numerics tests turn it back on where they assert it)."""
    import spyre_stack
    from spyre_stack.runtime import state

    spyre_stack.register()
    state.apply_numerics(warn=False)
    yield


@pytest.fixture
def policy(spyre: None) -> Iterator[object]:
    """Switch the op policy for one test and restore it afterwards."""
    from spyre_stack.runtime import state

    before = state.op_policy()
    yield state.apply_op_policy
    state.apply_op_policy(before)
