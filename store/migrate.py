"""Programmatic Alembic: `relay db upgrade|downgrade|current` and the start-up migration.

The history lives in the top-level ``migrations`` package (Alembic's script location: its
``env.py`` and ``versions/``), beside the packages, from a checkout and in an installed wheel
alike. The store names it and never imports it: ``migrations/env.py`` imports the store, not
the other way round.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from store.db import make_engine

#: Alembic's script location: the ``migrations`` package installed beside ``store`` (in the
#: checkout, and in site-packages from a wheel)
SCRIPT_LOCATION = Path(__file__).resolve().parent.parent / "migrations"


def script_location() -> Path:
    """The folder of the Alembic history (``env.py``, ``versions/``)."""
    if not (SCRIPT_LOCATION / "env.py").is_file():
        raise RuntimeError(
            f"no Alembic history at {SCRIPT_LOCATION}: the migrations package is not installed "
            "beside the store; reinstall crcr-relay"
        )
    return SCRIPT_LOCATION


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
