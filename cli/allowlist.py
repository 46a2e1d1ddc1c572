"""`relay allowlist check|sync`: read the CRCR allowlist and load it into the downstream table."""

from __future__ import annotations

from pathlib import Path

import typer

from config.settings import get_settings
from wire.crcr import allowlist

app = typer.Typer(
    help="The CRCR allowlist of downstream repositories (levels L1-L4).", no_args_is_help=True
)


def _path(path: Path | None) -> Path:
    chosen = path or get_settings().allowlist_path
    if chosen is None:
        raise typer.BadParameter("give a PATH or set RELAY_ALLOWLIST_PATH")
    return chosen


def _load(path: Path | None) -> list[allowlist.AllowlistEntry]:
    try:
        return allowlist.load(_path(path))
    except allowlist.AllowlistError as exc:
        for problem in exc.problems:
            typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(1) from exc


@app.command()
def check(path: Path = typer.Argument(None, help="default: RELAY_ALLOWLIST_PATH")) -> None:
    """Validate the file and print its entries; exit 1 listing every problem."""
    entries = _load(path)
    for e in entries:
        events = ",".join(e.events) if e.events is not None else "all"
        typer.echo(
            f"{e.level.value} {e.repo} device={e.device or '-'} events={events} oncalls={','.join(e.oncalls) or '-'}"
        )
    typer.echo(f"{len(entries)} downstream repositories")


@app.command()
def sync(path: Path = typer.Argument(None, help="default: RELAY_ALLOWLIST_PATH")) -> None:
    """Load the allowlist into the database (adds, updates, disables repos no longer listed)."""
    from store.db import session_scope
    from store.downstreams import sync_allowlist

    entries = _load(path)
    with session_scope(get_settings().database_url) as session:
        counts = sync_allowlist(session, entries=entries)
    typer.echo(", ".join(f"{k} {v}" for k, v in counts.items()))
