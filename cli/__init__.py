"""The `relay` command line: every sub-command, and the only package that wires the others
together.

One module per command or group, registered here by import path; they are imported only when
the command line is built, so `relay --help` does not import torch.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import typer

# name -> "module:attribute" of a typer.Typer (a command group).
SUBCOMMANDS: dict[str, str] = {
    "upstream": "cli.upstream:app",
    "device": "cli.device:app",
    "db": "cli.db:app",
    "allowlist": "cli.allowlist:app",
    "specs": "cli.specs:app",
    "tests": "cli.tests:app",
    "deliveries": "cli.deliveries:app",
    "dispatch": "cli.relay_role:dispatch_app",
}

# name -> "module:attribute" of a plain function registered as a top-level command.
COMMANDS: dict[str, str] = {
    "up": "cli.serve:up",
    "worker": "cli.serve:worker",
    "openapi": "cli.serve:openapi",
    "submit": "cli.serve:submit",
    "select": "cli.select:select",
    "replay": "cli.replay:replay",
    "eval": "cli.evaluate:evaluate",
    "downstreams": "cli.relay_role:downstreams",
}


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
    for name, target in COMMANDS.items():
        app.command(name=name)(_load(target))
    for name, target in SUBCOMMANDS.items():
        app.add_typer(_load(target), name=name)
    return app


def _load(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)


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
