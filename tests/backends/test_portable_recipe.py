"""The runner recipe a plan stores names no host's path: the project by a token, spec files from
elsewhere by their content; a worker installed at another path resolves it against its own
install (and writes carried spec files under its own var folder), getting the same recipe it
would have made itself."""

from __future__ import annotations

from pathlib import Path

from backends import get_backend
from backends.base import PROJECT_ROOT, PROJECT_TOKEN, RunnerConfig
from planner import RunPlan


def _strings(runner: RunnerConfig) -> list[str]:
    return [runner.rootdir, *runner.pytest_args, *runner.env.values()]


def test_the_stored_recipe_carries_no_path_of_the_planning_host() -> None:
    spyre = get_backend("spyre")
    local = spyre.runner_config(spyre.default_specs)
    assert any(str(PROJECT_ROOT) in s for s in _strings(local))  # the local recipe is absolute
    stored = RunPlan(shards=[["t::a"]], runner=local).stored()["plan"]["runner"]
    portable = RunnerConfig.model_validate(stored)
    assert not [s for s in _strings(portable) if str(PROJECT_ROOT) in s]
    assert portable.rootdir == PROJECT_TOKEN
    assert f"{PROJECT_TOKEN}/backends/spyre/specs" in portable.pytest_args
    assert portable.env["TORCH_TEST_DEVICES"] == f"{PROJECT_TOKEN}/testspecs/device_base.py"
    assert portable.spec_files == {}


def test_a_worker_at_another_path_resolves_it_to_its_own_install(tmp_path: Path) -> None:
    spyre = get_backend("spyre")
    portable = spyre.runner_config(spyre.default_specs).portable()
    other = tmp_path / "elsewhere" / "crcr-relay"
    there = portable.resolved(spec_dir=tmp_path / "var" / "specs", project=other)
    assert there.rootdir == str(other)
    assert f"{other}/backends/spyre/specs" in there.pytest_args
    assert there.env["TESTSPECS_SPECS"] == f"{other}/backends/spyre/specs"
    assert not [s for s in _strings(there) if str(PROJECT_ROOT) in s or "${" in s]
    # on the planning host itself it is exactly the recipe it made (one warm pool, not two)
    assert portable.resolved(spec_dir=tmp_path / "specs") == spyre.runner_config(
        spyre.default_specs
    )


def test_spec_files_from_outside_the_project_travel_by_content(tmp_path: Path) -> None:
    mine = tmp_path / "operator-specs"
    (mine / "sub").mkdir(parents=True)
    (mine / "a.yaml").write_text("version: 1\n# a\n")
    (mine / "sub" / "b.yml").write_text("version: 1\n# b\n")
    (mine / "notes.txt").write_text("not a spec")
    spyre = get_backend("spyre")
    portable = spyre.runner_config([mine]).portable()
    assert not [s for s in _strings(portable) if str(tmp_path) in s]
    assert sorted(Path(k).name for k in portable.spec_files) == ["a.yaml", "b.yml"]
    assert sorted(portable.spec_files.values()) == ["version: 1\n# a\n", "version: 1\n# b\n"]
    spec_dir = tmp_path / "hostB" / "var" / "specs"
    there = portable.resolved(spec_dir=spec_dir, project=tmp_path / "hostB" / "clone")
    specs = [there.pytest_args[i + 1] for i, a in enumerate(there.pytest_args) if a == "--spec"]
    assert [Path(p).read_text() for p in specs] == ["version: 1\n# a\n", "version: 1\n# b\n"]
    assert all(Path(p).is_relative_to(spec_dir) for p in specs)
    assert there.env["TESTSPECS_SPECS"] == ":".join(specs)
    # resolving again (another shard) reuses the files: same recipe, same pool
    assert portable.resolved(spec_dir=spec_dir, project=tmp_path / "hostB" / "clone") == there


def test_a_recipe_stored_before_it_was_portable_resolves_as_it_is(tmp_path: Path) -> None:
    old = RunnerConfig(rootdir="/srv/crcr-relay", pytest_args=["--spec", "/srv/x.yaml"])
    assert old.resolved(spec_dir=tmp_path) == old
    # a path that merely starts like the project's is not the project
    sibling = RunnerConfig(rootdir=f"{PROJECT_ROOT}-other/x")
    assert sibling.portable().rootdir == f"{PROJECT_ROOT}-other/x"
