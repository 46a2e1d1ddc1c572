"""Plugins are entry points: this project's backends, planner and `relay` commands are the ones
its pyproject.toml declares (and the install carries), and a second backend, planner, event
handler or command is a distribution that declares itself: installed, it is found by name, with
nothing of ours listing it. A setting written before (``module:function``) keeps its meaning;
a name nothing declares is a one-line error that lists what is installed."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import plugins
from backends import Backend, BackendError, get_backend
from cli import build_app
from config.settings import Settings
from workers.harness.pools import runner_backend
from workers.ingest import load_handlers
from workers.plan import PlannerSettingError, default_planner, load_planner

ROOT = Path(__file__).resolve().parents[2]

#: a second backend, planner, event handler and command, as another project would ship them
ACME = """
import typer

from backends.base import Backend

HANDLED = []


def backend():
    return Backend(name="acme", env={"PYTORCH_TESTING_DEVICE_ONLY_FOR": "cpu"})


def planner(event, settings):
    raise NotImplementedError("acme plans nothing in this test")


def handler(event, settings):
    HANDLED.append(event)


app = typer.Typer(help="The acme backend's own commands.")


@app.command()
def hello():
    typer.echo("hello from acme")
"""

ACME_POINTS = {
    plugins.BACKENDS: {"acme": "acme_relay:backend"},
    plugins.PLANNERS: {"acme": "acme_relay:planner"},
    plugins.EVENT_HANDLERS: {"acme": "acme_relay:handler"},
    plugins.COMMANDS: {"acme": "acme_relay:app"},
}


def _declared() -> dict[str, dict[str, str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {group: dict(points) for group, points in project["entry-points"].items()}


def test_the_install_carries_what_pyproject_declares() -> None:
    """A stale install (pyproject.toml changed, `make .venv/.installed` not run) fails here."""
    declared = _declared()
    assert set(declared) <= set(plugins.GROUPS)
    for group in plugins.GROUPS:
        ours = {
            ep.name: ep.value
            for ep in plugins.installed(group)
            if ep.dist is not None and ep.dist.name == "crcr-relay"
        }
        assert ours == declared.get(group, {}), f"{group}: refresh the install (pip install -e .)"


def test_every_declared_plugin_loads_as_what_its_group_holds() -> None:
    declared = _declared()
    for name in declared[plugins.BACKENDS]:
        backend = get_backend(name)
        assert isinstance(backend, Backend) and backend.name == name
        # one folder per backend of ours
        assert declared[plugins.BACKENDS][name] == f"backends.{name}:backend"
    assert declared[plugins.PLANNERS] == {"selector": "workers.plan:default_planner"}
    assert load_planner("selector") is load_planner(None) is default_planner
    for name in declared[plugins.COMMANDS]:
        command = plugins.load(plugins.COMMANDS, name)
        assert isinstance(command, typer.Typer) or callable(command)
    commands = {c.name for c in build_app().registered_commands}
    groups = {g.name for g in build_app().registered_groups}
    assert commands | groups == set(declared[plugins.COMMANDS])


def test_a_second_backend_planner_handler_and_command_declare_themselves(
    distributions: Any,
) -> None:
    assert "acme" not in plugins.names(plugins.BACKENDS)
    distributions.install("acme_relay", modules={"acme_relay": ACME}, entry_points=ACME_POINTS)

    assert plugins.names(plugins.BACKENDS) == ["acme", "cpu", "spyre"]
    backend, specs = runner_backend(Settings(runner_backend="acme"))
    assert (backend.name, specs) == ("acme", [])
    assert backend.runner_config([]).env["PYTORCH_TESTING_DEVICE_ONLY_FOR"] == "cpu"

    planner = load_planner("acme")
    assert planner.__module__ == "acme_relay" and planner.__name__ == "planner"

    [handler] = load_handlers(["acme"])
    handler("event", Settings())
    assert sys.modules["acme_relay"].HANDLED == ["event"]

    result = CliRunner().invoke(build_app(), ["acme", "hello"])
    assert (result.exit_code, result.output) == (0, "hello from acme\n")


def test_the_relay_command_lists_an_installed_distributions_command(distributions: Any) -> None:
    site = distributions.install(
        "acme_relay", modules={"acme_relay": ACME}, entry_points=ACME_POINTS
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    relay = Path(sys.executable).with_name("relay")
    listed = subprocess.run(
        [str(relay), "acme", "hello"], env=env, capture_output=True, text=True, timeout=120
    )
    assert (listed.returncode, listed.stdout, listed.stderr) == (0, "hello from acme\n", "")


def test_settings_written_as_module_attr_keep_their_meaning() -> None:
    """``RELAY_PLANNER`` and ``RELAY_EVENT_HANDLERS`` were ``module:function`` before plugins
    were entry points: such a value is loaded as the object reference it is."""
    assert load_planner("workers.plan:default_planner") is default_planner
    assert get_backend("backends.cpu:backend").name == "cpu"
    [handler] = load_handlers(["workers.plan:default_planner"])
    assert handler is default_planner


@pytest.mark.parametrize(
    ("load", "name", "message"),
    [
        (
            get_backend,
            "tpu",
            "backend 'tpu': no installed backend has that name (installed: cpu, spyre; "
            "or give module:attr)",
        ),
        (
            load_planner,
            "fastest",
            "RELAY_PLANNER='fastest': no installed planner has that name (installed: selector; "
            "or give module:attr)",
        ),
        (
            load_planner,
            "workers.plan:nothing",
            "RELAY_PLANNER='workers.plan:nothing' cannot be loaded: AttributeError: module "
            "'workers.plan' has no attribute 'nothing'",
        ),
        (
            lambda name: load_handlers([name]),
            "audit",
            "RELAY_EVENT_HANDLERS='audit': no installed event handler has that name (installed: "
            "none; or give module:attr)",
        ),
        (
            lambda name: load_handlers([name]),
            "no_such_module_here:handle",
            "RELAY_EVENT_HANDLERS='no_such_module_here:handle' cannot be loaded: "
            "ModuleNotFoundError: No module named 'no_such_module_here'",
        ),
    ],
)
def test_a_name_nothing_declares_is_a_one_line_error(load: Any, name: str, message: str) -> None:
    with pytest.raises((BackendError, PlannerSettingError, plugins.PluginError)) as raised:
        load(name)
    assert str(raised.value) == message


def test_a_name_two_distributions_declare_is_refused(distributions: Any) -> None:
    distributions.install(
        "acme_relay",
        modules={"acme_relay": ACME},
        entry_points={plugins.BACKENDS: {"cpu": "acme_relay:backend"}},
    )
    with pytest.raises(BackendError) as raised:
        get_backend("cpu")
    assert str(raised.value) == (
        "backend 'cpu': declared by more than one installed distribution "
        "(acme_relay 1.0, crcr-relay 0.1.0)"
    )


def test_a_command_that_cannot_load_leaves_the_others_working(
    distributions: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    distributions.install(
        "broken_relay",
        modules={},
        entry_points={plugins.COMMANDS: {"broken": "broken_relay_missing:app"}},
    )
    app = build_app()
    assert capsys.readouterr().err == (
        "relay: command 'broken' (broken_relay_missing:app) cannot be loaded: "
        "ModuleNotFoundError: No module named 'broken_relay_missing'\n"
    )
    assert "broken" not in {g.name for g in app.registered_groups}
    result = CliRunner().invoke(app, ["db", "--help"])
    assert result.exit_code == 0, result.output
