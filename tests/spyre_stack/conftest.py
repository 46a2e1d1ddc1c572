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


@pytest.fixture
def simulator(spyre: None) -> Iterator[None]:
    """Run one test under ``SPYRE_DEVICE_MODEL=simulator`` and restore the model afterwards: for
    tests of the simulator's own paths that the card (the default model) refuses, float64 and
    complex computed on the host, copies and resizes inside the device
    (tests/spyre_stack/test_device_model.py checks the card's refusals)."""
    from spyre_stack.runtime import state

    before = state.device_model_mode()
    state.apply_device_model("simulator")
    yield
    state.apply_device_model(before)
