"""Programmatic Alembic: `relay db upgrade|downgrade|current` and the start-up migration.

The history lives in the top-level ``migrations`` package (Alembic's script location: its
``env.py`` and ``versions/``), beside the packages, from a checkout and in an installed wheel
alike. The store names it and never imports it: ``migrations/env.py`` imports the store, not
the other way round.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from store.db import make_engine

#: the package that holds the Alembic history (its folder is the script location)
SCRIPT_PACKAGE = "migrations"


@lru_cache(maxsize=1)
def script_location() -> Path:
    """The folder of the ``migrations`` package (found, not imported)."""
    spec = importlib.util.find_spec(SCRIPT_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        if (Path(folder) / "env.py").is_file():
            return Path(folder).resolve()
    raise RuntimeError(
        f"no Alembic history: the {SCRIPT_PACKAGE!r} package (env.py, versions/) is not "
        "installed beside the store; reinstall crcr-relay"
    )


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(script_location()))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)


def current_revision(url: str) -> str | None:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
