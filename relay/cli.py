"""The `relay` command line.

Sub-command groups live in the package that owns them and are registered here by import path in
``SUBCOMMANDS``; they are imported only when the command line is built, so `relay --help` does
not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

import typer

# name -> "module:attribute" of a typer.Typer owned by the package that implements it.
SUBCOMMANDS: dict[str, str] = {
    "upstream": "selector.cli_upstream:app",
    "device": "spyre_stack.cli:app",
    "db": "relay.cli_db:app",
    "allowlist": "relay.cli_allowlist:app",
    "specs": "testspecs.cli:app",
    "tests": "selector.cli_tests:app",
    "deliveries": "relay.cli_deliveries:app",
}

# name -> "module:attribute" of a plain function registered as a top-level command.
COMMANDS: dict[str, str] = {
    "up": "relay.cli_serve:up",
    "worker": "relay.cli_serve:worker",
    "openapi": "relay.cli_serve:openapi",
    "submit": "relay.cli_serve:submit",
    "select": "selector.cli_select:select",
    "replay": "selector.cli_select:replay",
    "eval": "selector.cli_select:evaluate",
}


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="relay",
        help="Cross-repository CI relay for out-of-tree PyTorch backends.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    for name, target in COMMANDS.items():
        app.command(name=name)(_load(target))
    for name, target in SUBCOMMANDS.items():
        app.add_typer(_load(target), name=name)
    return app


def _load(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def main() -> None:
    build_app()()
