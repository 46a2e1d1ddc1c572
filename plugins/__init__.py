"""Plugins are Python entry points: what an installed distribution declares under one of the
groups below (``[project.entry-points."crcr_relay.backends"]`` in its ``pyproject.toml``), read
with :mod:`importlib.metadata`. This project declares its own backends, planner and ``relay``
commands the same way, so a second backend or planner is a package that declares itself:
installing it registers it, and nothing of ours lists it (docs/architecture.md, "Plugins").

A setting names a plugin by its entry-point name (``RELAY_RUNNER_BACKEND=spyre``). A value of the
form ``module:attr`` (what an entry point's own value is, an *object reference*) is loaded as
it is, by the same :class:`importlib.metadata.EntryPoint`: settings written before plugins were
entry points keep their meaning, and a plugin can be tried before it is packaged.

Entry points are installation metadata: after ``pyproject.toml`` changes, the install must be
refreshed (``make`` does it: the virtual environment's stamp depends on ``pyproject.toml``;
by hand, ``pip install -e .``). This module imports nothing of ours (a leaf of the layers).
"""

from __future__ import annotations

import re
from importlib.metadata import EntryPoint, entry_points
from typing import Any

#: name -> a callable returning a :class:`backends.Backend`
BACKENDS = "crcr_relay.backends"
#: name -> ``(event, settings) -> planner.RunPlan`` (``RELAY_PLANNER``)
PLANNERS = "crcr_relay.planners"
#: name -> ``(event, settings) -> None``, run on each normalized event (``RELAY_EVENT_HANDLERS``)
EVENT_HANDLERS = "crcr_relay.event_handlers"
#: name -> a ``typer.Typer`` (a command group) or a function (a command) of ``relay``
COMMANDS = "crcr_relay.commands"

GROUPS = (BACKENDS, PLANNERS, EVENT_HANDLERS, COMMANDS)

#: ``package.module:attr``: the object-reference form of an entry point's value
_OBJECT_REFERENCE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


class PluginError(LookupError):
    """A plugin name nothing installed declares (or two distributions do), or a plugin that
    cannot be loaded; the message is one line that says which and what is installed."""


def _noun(group: str) -> str:
    """``crcr_relay.event_handlers`` -> ``event handler`` (for messages)."""
    return group.rpartition(".")[2].removesuffix("s").replace("_", " ")


def installed(group: str) -> list[EntryPoint]:
    """The entry points every installed distribution declares in ``group``, by name."""
    return sorted(entry_points(group=group), key=lambda ep: ep.name)


def names(group: str) -> list[str]:
    return [ep.name for ep in installed(group)]


def _find(group: str, name: str, *, setting: str | None = None) -> EntryPoint:
    """The entry point ``name`` of ``group``, or the object reference ``name`` as one."""
    what = _what(group, name, setting)
    found = list(entry_points(group=group, name=name))
    if len(found) > 1:
        by = ", ".join(sorted(_distribution(ep) for ep in found))
        raise PluginError(f"{what}: declared by more than one installed distribution ({by})")
    if found:
        return found[0]
    if _OBJECT_REFERENCE.fullmatch(name):
        return EntryPoint(name=name, value=name, group=group)
    known = ", ".join(names(group)) or "none"
    raise PluginError(
        f"{what}: no installed {_noun(group)} has that name (installed: {known}; "
        "or give module:attr)"
    )


def load(group: str, name: str, *, setting: str | None = None) -> Any:
    """The object the plugin ``name`` of ``group`` is: what the installed entry point of that
    name declares, or ``name`` itself loaded when it is a ``module:attr`` object reference."""
    entry = _find(group, name, setting=setting)
    try:
        return entry.load()
    except (ImportError, AttributeError) as exc:
        what = _what(group, name, setting)
        if entry.value != name:
            what += f" ({entry.value})"
        raise PluginError(f"{what} cannot be loaded: {type(exc).__name__}: {exc}") from exc


def _what(group: str, name: str, setting: str | None) -> str:
    return f"{setting}={name!r}" if setting else f"{_noun(group)} {name!r}"


def _distribution(entry: EntryPoint) -> str:
    dist = entry.dist
    return f"{dist.name} {dist.version}" if dist is not None else "?"


__all__ = [
    "BACKENDS",
    "COMMANDS",
    "EVENT_HANDLERS",
    "GROUPS",
    "PLANNERS",
    "PluginError",
    "installed",
    "load",
    "names",
]
