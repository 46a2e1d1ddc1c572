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
