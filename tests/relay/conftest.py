"""Fixtures of the web service's tests: ``stack``, `relay up` once on SQLite + the embedded
broker and once on PostgreSQL + Redis (per module)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.support.stack import RelayUp, Stack


@pytest.fixture(scope="module", params=["sqlite+embedded", "postgres+redis"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, relay_up: RelayUp
) -> Iterator[Stack]:
    """`relay up` against SQLite and the embedded broker, then against PostgreSQL and Redis."""
    tmp: Path = tmp_path_factory.mktemp(request.param.replace("+", "-"))
    with relay_up.running(request.param, tmp) as running:
        yield running
