"""Shards run in the upstream environment their plan names: the launchers start that
environment's interpreter with its process environment (fresh or warm), and a shard worker keeps
warm pools for the few environments in use, the least recently used closed first."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backends.base import RunnerConfig, torch_build
from config.settings import get_settings
from upstream.undertest import (
    RunEnvironment,
    UpstreamUnderTest,
    installed_environment,
    resolve_environment,
)
from workers.harness.launchers import WarmPool
from workers.harness.pools import close_pools, launcher_for, pool_environments
from workers.harness.runner import run_shard

SUITE = textwrap.dedent("""
    import torch
    import torch.functional


    def test_sees_the_head():
        assert getattr(torch.functional, "RELAY_OVERLAY_PROBE", None) == "laid over"
        assert (torch.ones(2) + 1).tolist() == [2.0, 2.0]
""")
TEST = "test_upstream_env.py::test_sees_the_head"


@pytest.fixture(autouse=True)
def no_pools_left() -> Iterator[None]:
    yield
    close_pools()


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    root = tmp_path / "suite"
    root.mkdir()
    (root / "test_upstream_env.py").write_text(SUITE)
    return root


@pytest.fixture
def overlay(overlay_upstream: Any, tmp_path: Path) -> tuple[UpstreamUnderTest, RunEnvironment]:
    under_test = UpstreamUnderTest(kind="overlay", head_sha=overlay_upstream.head)
    environment = resolve_environment(
        under_test, envs=tmp_path / "envs", checkout=overlay_upstream.repo.path
    )
    return under_test, environment


def run_in(suite: Path, environment: RunEnvironment, key: str, *, warm: bool) -> str:
    runner = RunnerConfig(rootdir=str(suite), preload=["torch"] if warm else [])
    run = run_shard(
        [TEST],
        launcher=launcher_for(runner, warm=warm, environment=environment, environment_key=key),
        pytest_args=["--rootdir", str(suite), "-p", "no:cacheprovider"],
        per_test_timeout=120,
        workdir=suite / f"work-{key.replace('/', '_')}-{warm}",
    )
    (result,) = run.results
    return str(result.outcome)


def test_a_shard_runs_in_its_environment(
    suite: Path, overlay: tuple[UpstreamUnderTest, RunEnvironment]
) -> None:
    under_test, environment = overlay
    assert environment.torch_build == torch_build()
    assert run_in(suite, environment, under_test.key(), warm=False) == "passed"
    # the same test under the installed torch does not see the head's change
    assert run_in(suite, installed_environment(), "installed", warm=False) == "failed"


def test_a_warm_pool_imports_its_environments_torch(
    suite: Path, overlay: tuple[UpstreamUnderTest, RunEnvironment]
) -> None:
    """The pool's server preloads torch from the overlay, so the forked child sees the head."""
    under_test, environment = overlay
    assert run_in(suite, environment, under_test.key(), warm=True) == "passed"
    assert pool_environments() == [under_test.key()]


def test_warm_pools_are_kept_for_the_recent_environments(tmp_path: Path) -> None:
    runner = RunnerConfig(rootdir=str(tmp_path))
    here = installed_environment()
    first = launcher_for(runner, warm=True, environment=here, environment_key="a", keep_environments=2)
    assert isinstance(first, WarmPool)
    first.warm()  # its server runs
    assert first._server is not None and first._server.poll() is None
    assert launcher_for(runner, warm=True, environment=here, environment_key="a") is first
    second = launcher_for(runner, warm=True, environment=here, environment_key="b", keep_environments=2)
    assert second is not first
    assert pool_environments() == ["a", "b"]
    # "a" used again: "b" is now the least recently used, and the third environment closes it
    launcher_for(runner, warm=True, environment=here, environment_key="a", keep_environments=2)
    launcher_for(runner, warm=True, environment=here, environment_key="c", keep_environments=2)
    assert pool_environments() == ["a", "c"]
    assert first._server is not None and first._server.poll() is None  # still warm
    launcher_for(runner, warm=True, environment=here, environment_key="d", keep_environments=2)
    launcher_for(runner, warm=True, environment=here, environment_key="e", keep_environments=2)
    assert pool_environments() == ["d", "e"]
    assert first._server is None  # closed: its server is gone


RELEASE_SUITE = textwrap.dedent("""
    import torch

    import spyre_stack


    def test_runs_under_the_release():
        assert torch.__version__.startswith("2.14.1"), torch.__version__
        spyre_stack.register()
        assert (torch.ones(2, device="spyre") * 2).cpu().tolist() == [2.0, 2.0]
""")


@pytest.mark.slow
@pytest.mark.wheels
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("warm", [False, True], ids=["fresh", "warm"])
def test_a_shard_runs_under_a_release_in_its_own_environment(tmp_path: Path, warm: bool) -> None:
    """torch 2.14.1 in RELAY_VAR_DIR/envs (made once: minutes and about 5.5 GB), the spyre
    device built and loaded under it, the harness's plugins imported from the project."""
    under_test = UpstreamUnderTest(kind="release", torch_version="2.14.1")
    environment = resolve_environment(under_test, envs=get_settings().var_dir / "envs")
    assert environment.torch_build.startswith("2.14.1")
    assert environment.python != installed_environment().python
    (tmp_path / "test_release_env.py").write_text(RELEASE_SUITE)
    runner = RunnerConfig(rootdir=str(tmp_path), preload=["torch", "spyre_stack"] if warm else [])
    run = run_shard(
        ["test_release_env.py::test_runs_under_the_release"],
        launcher=launcher_for(
            runner, warm=warm, environment=environment, environment_key=under_test.key()
        ),
        pytest_args=["--rootdir", str(tmp_path), "-p", "no:cacheprovider"],
        per_test_timeout=900,
        workdir=tmp_path / "work",
    )
    (result,) = run.results
    assert result.outcome == "passed", result.message
