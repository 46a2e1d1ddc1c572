"""`relay device ...`: commands about the bundled simulated Spyre device."""

from __future__ import annotations

import json

import typer

app = typer.Typer(help="The bundled simulated Spyre device.", no_args_is_help=True)


@app.command()
def info(as_json: bool = typer.Option(False, "--json", help="print JSON instead of text")) -> None:
    """Show the simulated cards, memory, op policy, build cache and op-table summary."""
    from spyre_stack.info import device_info, format_info

    data = device_info()
    typer.echo(json.dumps(data, indent=2) if as_json else format_info(data))


@app.command()
def ops(status: str = typer.Argument("native", help="native, fallback or unsupported")) -> None:
    """List the op-table entries with a status."""
    from spyre_stack import optable

    if status not in optable.STATUSES:
        known = ", ".join(optable.STATUSES)
        typer.echo(f"error: unknown status {status!r} (one of {known})", err=True)
        raise typer.Exit(2)
    for entry in optable.load().by_status(status):
        typer.echo(f"{entry.name:32} {entry.kind:10} {','.join(entry.dtypes)}")
