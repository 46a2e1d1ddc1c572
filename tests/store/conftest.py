"""``database_url``: a migrated database of each kind, SQLite and PostgreSQL (the PostgreSQL one
skips without RELAY_TEST_POSTGRES_URL; test_migrations overrides it with empty databases)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from store import migrate


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(
    request: pytest.FixtureRequest, tmp_path: Path, fresh_postgres_database: Any
) -> Iterator[str]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'd.sqlite'}"
        migrate.upgrade(url)
        yield url
    else:
        with fresh_postgres_database() as url:
            migrate.upgrade(url)
            yield url
