"""`relay db upgrade|downgrade|current`: Alembic migrations against RELAY_DATABASE_URL."""

from __future__ import annotations

import typer

from config.settings import get_settings
from store import migrate
from store.db import redacted

app = typer.Typer(
    help="Database migrations (Alembic) against RELAY_DATABASE_URL.", no_args_is_help=True
)


@app.command()
def upgrade(revision: str = typer.Argument("head", help="target revision")) -> None:
    """Migrate the database up to REVISION (default: head)."""
    url = get_settings().database_url
    migrate.upgrade(url, revision)
    typer.echo(f"database at {migrate.current_revision(url)} ({redacted(url)})")


@app.command()
def downgrade(revision: str = typer.Argument("base", help="target revision")) -> None:
    """Migrate the database down to REVISION (default: base, an empty schema)."""
    url = get_settings().database_url
    migrate.downgrade(url, revision)
    typer.echo(f"database at {migrate.current_revision(url) or 'base'} ({redacted(url)})")


@app.command()
def current() -> None:
    """Print the database's revision and the newest one the code knows."""
    url = get_settings().database_url
    typer.echo(
        f"current: {migrate.current_revision(url) or 'base'}; head: {migrate.head_revision()}"
    )
