from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.relay.stack import Stack, start_local_stack, start_stack
from tests.services import free_port, fresh_postgres_database, fresh_redis_url


@pytest.fixture(scope="module", params=["sqlite+embedded", "postgres+redis"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """`relay up` against SQLite and the embedded broker, then against PostgreSQL and Redis."""
    tmp: Path = tmp_path_factory.mktemp(request.param.replace("+", "-"))
    if request.param == "sqlite+embedded":
        running = start_local_stack(tmp)
        try:
            yield running
        finally:
            running.stop()
    else:
        broker = fresh_redis_url()
        with fresh_postgres_database() as database_url:
            running = start_stack(
                tmp=tmp, database_url=database_url, broker_url=broker, port=free_port()
            )
            try:
                yield running
            finally:
                running.stop()
