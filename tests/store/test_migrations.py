"""upgrade -> downgrade -> upgrade on SQLite and PostgreSQL; autogenerate finds no difference."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from store import migrate
from store.db import make_engine
from store.models import Base


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(  # empty databases here (tests/store/conftest.py's are migrated)
    request: pytest.FixtureRequest, tmp_path: Path, fresh_postgres_database: Any
) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'm.sqlite'}"
    else:
        with fresh_postgres_database() as url:
            yield url


def _tables(url: str) -> set[str]:
    engine = make_engine(url, null_pool=True)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def _diff(url: str) -> list[object]:
    engine = make_engine(url, null_pool=True)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            return list(compare_metadata(ctx, Base.metadata))
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade(database_url: str) -> None:
    model_tables = set(Base.metadata.tables)
    migrate.upgrade(database_url)
    assert migrate.current_revision(database_url) == migrate.head_revision()
    assert _tables(database_url) == model_tables
    migrate.downgrade(database_url)
    assert migrate.current_revision(database_url) is None
    assert _tables(database_url) == set()
    migrate.upgrade(database_url)
    assert _tables(database_url) == model_tables


def test_autogenerate_against_the_models_is_empty(database_url: str) -> None:
    migrate.upgrade(database_url)
    assert _diff(database_url) == []


def test_the_history_is_the_top_level_migrations_package(repo_root: Path) -> None:
    """Alembic's script location is ``migrations/`` beside the packages (the design's tree),
    installed with them; `relay db upgrade` finds it from any working folder."""
    assert migrate.script_location() == repo_root / "migrations"
    versions = sorted(p.name for p in (repo_root / "migrations" / "versions").glob("*.py"))
    assert versions[0] == "0001_initial_schema.py"
    assert migrate.head_revision() is not None
    assert not (repo_root / "store" / "migrations").exists()
