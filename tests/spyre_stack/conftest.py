"""Fixtures for the spyre_stack tests: the backend is registered on first use, not at import."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


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


def run_python(
    code: str, env: dict[str, str] | None = None, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    """Run a snippet in a fresh interpreter (for import-order and crash tests)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
