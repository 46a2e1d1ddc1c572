"""The head environment (upstream.headenv): its plan and marker logic with a recording runner
(nothing installed), collection with another interpreter, and (slow) a real torch 2.14.1 env."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from importlib import metadata
from pathlib import Path

import pytest

from backends.base import PROJECT_ROOT, torch_build
from inventory.build import build_inventory
from inventory.sources import BundledSuites
from upstream.headenv import (
    MARKER,
    PTH_NAME,
    RUNTIME_PACKAGES,
    HeadEnv,
    HeadEnvError,
    Step,
    ensure_env,
    plan_env,
    run_step,
    wheel_for,
)

PINS = {"numpy": "2.4.6", "pytest": "9.2.0", "pyyaml": "6.0.4"}


class RecordingRunner:
    """Does what each step would leave behind, records the steps, and can fail at one step."""

    def __init__(self, fail_at: str | None = None) -> None:
        self.fail_at = fail_at
        self.steps: list[Step] = []
        self.marker_seen: list[bool] = []
        self.seen_files: dict[str, bool] = {}

    def __call__(self, step: Step, log: Path) -> str:
        self.steps.append(step)
        env_dir = log.parent
        self.marker_seen.append((env_dir / MARKER).exists())
        if step.name == self.fail_at:
            raise HeadEnvError(f"step {step.name!r} failed (exit 1); see {log}")
        if step.name == "venv":
            (env_dir / "bin").mkdir(parents=True)
            (env_dir / "bin" / "python").write_text("", encoding="utf-8")
            return ""
        if step.name == "install":
            self.seen_files["constraints"] = (env_dir / "constraints.txt").is_file()
            return ""
        pth = next(env_dir.glob(f"lib/python*/site-packages/{PTH_NAME}"), None)
        self.seen_files["pth"] = pth is not None and pth.read_text().strip() == str(PROJECT_ROOT)
        return "some build output\n" + json.dumps(
            {"torch_build": "2.99.0+gitfeedface", "torch": "2.99.0"}
        )

    def names(self) -> list[str]:
        return [s.name for s in self.steps]


def test_the_plan_pins_every_other_package_and_names_its_commands(tmp_path: Path) -> None:
    plan = plan_env("v2.14.1", root=tmp_path, base_python="/usr/bin/python3.11", pins=PINS)
    assert plan.version == "2.14.1"
    assert plan.directory == tmp_path.absolute() / "torch-2.14.1"
    steps = plan.steps("/cache/torch-2.14.1-cp311-cp311-linux_x86_64.whl")
    assert [s.name for s in steps] == ["venv", "install", "check"]
    venv = ("/usr/bin/python3.11", "-m", "venv", "--without-pip", str(plan.directory))
    assert steps[0].argv == venv
    install = steps[1].argv  # this interpreter's pip installs into the new one, compiling nothing
    python = str(plan.directory / "bin" / "python")
    assert install[:6] == ("/usr/bin/python3.11", "-m", "pip", "--python", python, "install")
    assert "--no-compile" in install
    assert install[install.index("-c") + 1] == str(plan.directory / "constraints.txt")
    assert "/cache/torch-2.14.1-cp311-cp311-linux_x86_64.whl" in install
    assert set(RUNTIME_PACKAGES) <= set(install)
    # the core's build imports setuptools (torch.utils.cpp_extension); torch 2.10 brings it
    # only for Python >= 3.12, and it is left for the release to bound (no pin)
    assert "setuptools" in install
    assert plan.constraints_text() == "numpy==2.4.6\npytest==9.2.0\npyyaml==6.0.4\n"
    check = steps[2]
    assert check.argv[0] == str(plan.python)
    assert "spyre_stack.register()" in check.argv[-1]
    assert check.env == {
        "SPYRE_EXTENSIONS_DIR": str(plan.directory / "torch_extensions"),
        "PYTHONDONTWRITEBYTECODE": "",  # the check writes the bytecode the install did not
    }


def test_pins_come_from_this_environment_without_torch_or_the_project(tmp_path: Path) -> None:
    plan = plan_env("2.14.1", root=tmp_path)
    assert plan.pins["numpy"] == metadata.version("numpy")
    assert plan.pins["pyyaml"] == metadata.version("PyYAML")
    assert not {"torch", "crcr-relay", "pip"} & set(plan.pins)
    # a release bounds its build tools itself (torch 2.12.1: setuptools<82)
    assert "setuptools" not in plan.pins
    assert plan.base_python == sys.executable


def test_the_key_changes_with_what_makes_the_environment(tmp_path: Path) -> None:
    key = plan_env("2.14.1", root=tmp_path, pins=PINS).key()
    assert plan_env("2.14.1", root=tmp_path, pins=dict(PINS)).key() == key
    assert plan_env("2.14.0", root=tmp_path, pins=PINS).key() != key
    assert plan_env("2.14.1", root=tmp_path, pins={**PINS, "numpy": "2.4.5"}).key() != key
    other_root = plan_env("2.14.1", root=tmp_path, pins=PINS, project_root=tmp_path).key()
    assert other_root != key
    # the same interpreter under another name (a venv's python and python3) is the same
    alias = tmp_path / "python3"
    alias.symlink_to(sys.executable)
    by_alias = plan_env("2.14.1", root=tmp_path, pins=PINS, base_python=str(alias)).key()
    assert (
        by_alias == plan_env("2.14.1", root=tmp_path, pins=PINS, base_python=sys.executable).key()
    )


def test_made_once_marker_last_then_reused(tmp_path: Path) -> None:
    plan = plan_env("2.14.1", root=tmp_path, pins=PINS)
    runner = RecordingRunner()
    env = ensure_env("2.14.1", plan=plan, wheel="torch-2.14.1.whl", runner=runner)
    assert runner.names() == ["venv", "install", "check"]
    assert runner.marker_seen == [False, False, False]
    assert runner.seen_files == {"constraints": True, "pth": True}
    assert "torch-2.14.1.whl" in runner.steps[1].argv
    assert env.created
    assert env.torch_build == "2.99.0+gitfeedface"
    assert env.python == plan.directory / "bin" / "python"
    assert env.extensions_dir == plan.directory / "torch_extensions"
    assert env.log.is_file()
    marker = json.loads((plan.directory / MARKER).read_text())
    assert marker["key"] == plan.key() and marker["torch_build"] == "2.99.0+gitfeedface"

    again = RecordingRunner()
    reused = ensure_env("2.14.1", plan=plan, wheel="torch-2.14.1.whl", runner=again)
    assert again.steps == []
    assert not reused.created
    assert reused.torch_build == env.torch_build


def test_an_interrupted_creation_starts_over(tmp_path: Path) -> None:
    plan = plan_env("2.14.1", root=tmp_path, pins=PINS)
    with pytest.raises(HeadEnvError, match="'check' failed"):
        ensure_env("2.14.1", plan=plan, wheel="w.whl", runner=RecordingRunner(fail_at="check"))
    assert not (plan.directory / MARKER).exists()
    leftover = plan.directory / "leftover"
    leftover.write_text("from the failed attempt", encoding="utf-8")

    runner = RecordingRunner()
    env = ensure_env("2.14.1", plan=plan, wheel="w.whl", runner=runner)
    assert runner.names() == ["venv", "install", "check"]
    assert env.created
    assert not leftover.exists()


def test_other_pins_make_the_environment_again(tmp_path: Path) -> None:
    ensure_env(
        "2.14.1",
        plan=plan_env("2.14.1", root=tmp_path, pins=PINS),
        wheel="w.whl",
        runner=RecordingRunner(),
    )
    changed = plan_env("2.14.1", root=tmp_path, pins={**PINS, "pytest": "9.1.0"})
    runner = RecordingRunner()
    env = ensure_env("2.14.1", plan=changed, wheel="w.whl", runner=runner)
    assert runner.names() == ["venv", "install", "check"]
    assert env.created
    assert "pytest==9.1.0" in (changed.directory / "constraints.txt").read_text()


def _pth(plan_dir: Path) -> str:
    return next(plan_dir.glob(f"lib/python*/site-packages/{PTH_NAME}")).read_text().strip()


def test_the_install_key_leaves_the_project_root_out(tmp_path: Path) -> None:
    here = plan_env("2.14.1", root=tmp_path, pins=PINS)
    there = plan_env("2.14.1", root=tmp_path, pins=PINS, project_root=tmp_path)
    assert here.install_key() == there.install_key()
    assert here.key() != there.key()
    assert plan_env("2.14.1", root=tmp_path, pins={**PINS, "numpy": "1"}).install_key() != (
        here.install_key()
    )


def test_a_moved_environment_is_re_pointed_not_made_again(tmp_path: Path) -> None:
    """The folder of one checkout moved under another: only the check runs again, the .pth
    names the new root (a new file, so a hard-linked copy keeps its own), the marker the move."""
    old_root, new_root = tmp_path / "old", tmp_path / "new"
    old_root.mkdir()
    new_root.mkdir()
    made = plan_env("2.14.1", root=tmp_path / "envs", pins=PINS, project_root=old_root)
    ensure_env("2.14.1", plan=made, wheel="w.whl", runner=RecordingRunner())
    pth = next(made.directory.glob(f"lib/python*/site-packages/{PTH_NAME}"))
    linked = tmp_path / "linked.pth"
    os.link(pth, linked)

    moved = plan_env("2.14.1", root=tmp_path / "envs", pins=PINS, project_root=new_root)
    runner = RecordingRunner()
    env = ensure_env("2.14.1", plan=moved, wheel="w.whl", runner=runner)
    assert runner.names() == ["check"]
    assert not env.created and env.moved_from == str(old_root.resolve())
    assert env.torch_build == "2.99.0+gitfeedface"
    assert _pth(moved.directory) == str(new_root.resolve())
    assert linked.read_text().strip() == str(old_root.resolve())
    marker = json.loads((moved.directory / MARKER).read_text())
    assert marker["key"] == moved.key() and marker["project_root"] == str(new_root.resolve())
    assert marker["moved_from"] == str(old_root.resolve())
    assert "re-pointed from" in env.log.read_text()

    again = RecordingRunner()
    assert not ensure_env("2.14.1", plan=moved, wheel="w.whl", runner=again).moved_from
    assert again.steps == []


class FailingFirstCheck(RecordingRunner):
    def __call__(self, step: Step, log: Path) -> str:
        if step.name == "check" and "check" not in self.names():
            self.steps.append(step)
            raise HeadEnvError(f"step 'check' failed (exit 1); see {log}")
        return super().__call__(step, log)


def test_a_moved_environment_whose_check_fails_is_made_again(tmp_path: Path) -> None:
    made = plan_env("2.14.1", root=tmp_path, pins=PINS, project_root=tmp_path)
    ensure_env("2.14.1", plan=made, wheel="w.whl", runner=RecordingRunner())
    moved = plan_env("2.14.1", root=tmp_path, pins=PINS)
    runner = FailingFirstCheck()
    env = ensure_env("2.14.1", plan=moved, wheel="w.whl", runner=runner)
    assert runner.names() == ["check", "venv", "install", "check"]
    assert env.created and not env.moved_from
    assert _pth(moved.directory) == str(PROJECT_ROOT)


def test_other_pins_are_not_re_pointed(tmp_path: Path) -> None:
    made = plan_env("2.14.1", root=tmp_path, pins=PINS, project_root=tmp_path)
    ensure_env("2.14.1", plan=made, wheel="w.whl", runner=RecordingRunner())
    other = plan_env("2.14.1", root=tmp_path, pins={**PINS, "pytest": "9.1.0"})
    runner = RecordingRunner()
    assert ensure_env("2.14.1", plan=other, wheel="w.whl", runner=runner).created
    assert runner.names() == ["venv", "install", "check"]


def test_a_marker_made_before_the_install_key_gets_it_on_reuse(tmp_path: Path) -> None:
    plan = plan_env("2.14.1", root=tmp_path, pins=PINS)
    ensure_env("2.14.1", plan=plan, wheel="w.whl", runner=RecordingRunner())
    old = json.loads(plan.marker.read_text())
    del old["install_key"], old["project_root"]
    plan.marker.write_text(json.dumps(old))
    runner = RecordingRunner()
    assert not ensure_env("2.14.1", plan=plan, wheel="w.whl", runner=runner).created
    assert runner.steps == []
    assert json.loads(plan.marker.read_text())["install_key"] == plan.install_key()


def test_a_check_without_a_torch_build_is_an_error(tmp_path: Path) -> None:
    plan = plan_env("2.14.1", root=tmp_path, pins=PINS)

    def silent(step: Step, log: Path) -> str:
        if step.name == "venv":
            (plan.directory / "bin").mkdir(parents=True)
            (plan.directory / "bin" / "python").touch()
        return "built\n"

    with pytest.raises(HeadEnvError, match="printed no torch build"):
        ensure_env("2.14.1", plan=plan, wheel="w.whl", runner=silent)
    assert not (plan.directory / MARKER).exists()


def test_the_command_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    monkeypatch.setenv("SPYRE_EXTENSIONS_DIR", "/the/2.13/build")
    plan = plan_env("2.14.1", root=tmp_path, pins=PINS)
    env = ensure_env("2.14.1", plan=plan, wheel="w.whl", runner=RecordingRunner()).env
    assert env["SPYRE_EXTENSIONS_DIR"] == str(plan.directory / "torch_extensions")
    assert env["VIRTUAL_ENV"] == str(plan.directory)
    assert env["PATH"].split(os.pathsep)[0] == str(plan.directory / "bin")
    assert "PYTHONPATH" not in env


def test_a_step_runs_with_its_env_logs_and_fails_loudly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", "/not/for/another/env")
    log = tmp_path / "env.log"
    script = "import os\nprint(os.environ['SPYRE_EXTENSIONS_DIR'], 'PYTHONPATH' in os.environ)"
    out = run_step(
        Step("check", (sys.executable, "-c", script), env={"SPYRE_EXTENSIONS_DIR": "x"}), log
    )
    assert out.split() == ["x", "False"]
    with pytest.raises(HeadEnvError, match=r"'install' failed \(exit 3\); see .*env.log"):
        run_step(Step("install", (sys.executable, "-c", "import sys; sys.exit(3)")), log)
    text = log.read_text()
    assert "-c <script>" in text and "[check: exit 0" in text and "[install: exit 3" in text


def _fake_build_python(tmp_path: Path) -> tuple[Path, Path]:
    """An interpreter that answers the torch-build probe with a build of its own and runs
    everything else with this one, logging each call and the environment variable it got."""
    calls = tmp_path / "calls.log"
    script = tmp_path / "python"
    script.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$RELAY_TEST_ENV_MARK $*" | cut -c1-300 >> {calls}\n'
        'case "$*" in *"import torch_build"*) echo 9.9.9+gitfake; exit 0;; esac\n'
        f'exec {sys.executable} "$@"\n',
        encoding="utf-8",
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script, calls


def test_collection_with_another_interpreter_is_keyed_by_its_torch_build(tmp_path: Path) -> None:
    python, calls = _fake_build_python(tmp_path)
    env = {**os.environ, "RELAY_TEST_ENV_MARK": "head-env"}
    source = BundledSuites(("errors",))
    inv = build_inventory(
        source, backend="cpu", test_times=None, cache_dir=tmp_path / "inv", python=python, env=env
    )
    assert inv.key.torch_build == "9.9.9+gitfake"
    assert not inv.cached
    assert inv.variants and not inv.errors
    lines = calls.read_text().splitlines()
    collects = [line for line in lines if "--collect-only" in line]
    assert len(collects) == len(source.targets())
    assert all(line.startswith("head-env ") for line in lines)

    again = build_inventory(
        source, backend="cpu", test_times=None, cache_dir=tmp_path / "inv", python=python, env=env
    )
    assert again.cached
    assert [v.test_id for v in again.variants] == [v.test_id for v in inv.variants]
    assert sum("--collect-only" in line for line in calls.read_text().splitlines()) == len(collects)
    # the installed torch's own entry is another one
    assert (
        inv.key.collection_id()
        != type(inv.key)(**{**inv.key.__dict__, "torch_build": torch_build()}).collection_id()
    )


def test_the_cli_prints_what_it_did_and_the_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    import cli.upstream as cli

    def recorded(version: str, **kwargs: object) -> HeadEnv:
        assert kwargs["root"] == tmp_path
        plan = plan_env(version, root=tmp_path, pins=PINS)
        return ensure_env(version, plan=plan, wheel="w.whl", runner=RecordingRunner())

    monkeypatch.setattr(cli, "ensure_env", recorded)
    first = CliRunner().invoke(cli.app, ["env", "--torch", "2.14.1", "--root", str(tmp_path)])
    assert first.exit_code == 0, first.output
    assert "created in" in first.output and "2.99.0+gitfeedface" in first.output
    python = tmp_path.absolute() / "torch-2.14.1" / "bin" / "python"
    assert first.output.strip().splitlines()[-1] == str(python)
    second = CliRunner().invoke(cli.app, ["env", "--torch", "2.14.1", "--root", str(tmp_path)])
    assert "reused" in second.output

    def failing(version: str, **kwargs: object) -> HeadEnv:
        raise HeadEnvError("torch 9.9 is not installable here: no such release")

    monkeypatch.setattr(cli, "ensure_env", failing)
    bad = CliRunner().invoke(cli.app, ["env", "--torch", "9.9", "--root", str(tmp_path)])
    assert bad.exit_code == 2
    assert "not installable" in bad.output


@pytest.mark.slow
def test_a_real_torch_2_14_1_environment(tmp_path: Path) -> None:
    try:
        wheel = wheel_for("2.14.1")
    except HeadEnvError as exc:
        pytest.skip(f"torch 2.14.1 is not installable here: {exc}")
    try:
        env = ensure_env("2.14.1", root=tmp_path, wheel=wheel)
        assert env.created
        assert env.torch_build.startswith("2.14.1")
        assert any(env.extensions_dir.rglob("spyre_stack_core*.so"))
        assert not ensure_env("2.14.1", root=tmp_path, wheel=wheel).created

        inv = build_inventory(
            BundledSuites(("errors",)),
            test_times=None,
            cache_dir=tmp_path / "inv",
            python=env.python,
            env=env.env,
        )
        assert inv.key.torch_build == env.torch_build != torch_build()
        assert inv.variants and not inv.errors
    finally:
        shutil.rmtree(tmp_path / "torch-2.14.1", ignore_errors=True)  # about 5 GB
