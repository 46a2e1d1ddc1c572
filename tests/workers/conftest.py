"""Fixtures of the worker tests that need a process of their own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def prefork_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real Celery worker (prefork pool, one child, the embedded broker) on a fresh directory
    and RELAY_VAR_DIR: ``prefork_worker.call("<name>_in_child", **kwargs)`` runs one of
    :mod:`tests.support.prefork_calls`' calls in its pool child and returns the answer."""
    from tests.support.prefork_calls import PreforkWorker

    running = PreforkWorker(tmp_path_factory.mktemp("prefork"))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="session")
def multi_hosts() -> Any:
    """:mod:`tests.support.hosts`: hosts that share no disk on one machine (a folder, its own
    RELAY_VAR_DIR and HOME, its own mount namespace where the machine allows it)."""
    from tests.support import hosts

    return hosts
