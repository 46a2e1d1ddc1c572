"""The `relay` command line: every sub-command, and the only package that wires the others
together.

One module per command or group, each declared in the ``crcr_relay.commands`` entry-point group
(``pyproject.toml``; another installed distribution can add its own the same way). They are
imported only when the command line is built, so `relay --help` does not import torch.
"""

from __future__ import annotations

import os
import sys

import typer

import plugins


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="relay",
        help="Cross-repository CI relay for out-of-tree PyTorch backends.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        # click's plain help: an option's type is shown only when it takes a value (typer's
        # rich tables show `<bool>` beside every flag)
        rich_markup_mode=None,
    )
    names = plugins.names(plugins.COMMANDS)
    if not names:
        raise SystemExit(
            f"relay: no command is installed (entry-point group {plugins.COMMANDS}): refresh "
            "the install with `make .venv/.installed` or `pip install -e .`"
        )
    for name in names:
        try:
            target = plugins.load(plugins.COMMANDS, name)
        except plugins.PluginError as exc:  # another distribution's broken command: the rest work
            typer.echo(f"relay: {exc}", err=True)
            continue
        if isinstance(target, typer.Typer):
            app.add_typer(target, name=name)
        else:
            app.command(name=name)(target)
    return app


def main() -> None:
    stdout = sys.stdout
    try:
        build_app()()
    except SystemExit as done:
        # click answers a write to a closed pipe (`relay tests list | head`) with exit 1 and
        # swaps in a wrapper for stdout; that reader got what it asked for: exit 0, quietly
        if done.code == 1 and sys.stdout is not stdout:
            os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())
            raise SystemExit(0) from None
        raise
