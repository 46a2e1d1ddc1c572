"""A pull request whose change touches compiled files (a small upstream repository whose head
changes ``torch/functional.py`` and ``native_functions.yaml``):

- with a head wheel configured (RELAY_HEAD_WHEEL, ``{sha}`` replaced) the plan names that wheel
  and a shard runs in its own environment, the compiled change covered;
- without one the job runs in the overlay of the head's Python files and lists the compiled
  files it could not test in the job (``GET /api/v1/jobs/{id}``), the check run's summary and
  the CRCR callback's summary, through a real ``relay up`` and the default planner.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import httpx
import pytest

from backends import get_backend
from backends.base import RunnerConfig
from config.settings import get_settings
from fanout.checks import job_body
from planner import plan_event
from upstream.headenv import wheel_for
from upstream.undertest import installed_environment, resolve_environment
from wire.github.events import UpstreamEvent
from workers.harness.pools import close_pools, launcher_for
from workers.harness.runner import run_shard

COMPILED = "aten/src/ATen/native/native_functions.yaml"
NOT_TESTED = f"compiled changes not tested: {COMPILED}"
WHEEL_SUITE = """\
import os
import sys

import torch


def test_runs_the_head_wheel():
    assert sys.prefix == os.environ["HEAD_ENV"], sys.prefix
    assert torch.__file__.startswith(sys.prefix), torch.__file__
"""


@pytest.mark.slow
@pytest.mark.wheels
@pytest.mark.timeout(3600)
def test_a_compiled_change_with_a_head_wheel_runs_in_that_wheel(
    overlay_upstream: Any, tmp_path: Path
) -> None:
    """The head wheel is a per-commit build artifact (here the cached 2.13.0+cpu wheel laid out
    under the head's SHA, as PyTorch CI's per-PR wheels are): the plan names it, and the shard's
    interpreter is that wheel's environment (made once under RELAY_VAR_DIR/envs: minutes)."""
    wheel = wheel_for("2.13.0", offline=True)
    folder = tmp_path / "builds" / overlay_upstream.head
    folder.mkdir(parents=True)
    (folder / wheel.name).symlink_to(wheel)
    template = str(tmp_path / "builds" / "{sha}" / wheel.name)
    event = UpstreamEvent(
        delivery_id="d-wheel",
        event="pull_request",
        repo="pytorch/pytorch",
        pr_number=7,
        base_sha=overlay_upstream.base,
        head_sha=overlay_upstream.head,
    )
    planned = plan_event(
        event,
        backend=get_backend("spyre"),
        specs=[],
        upstream=overlay_upstream.repo.path,
        head_wheel=template,
        budget_seconds=5,
    )
    tested = planned.upstream
    assert (tested.kind, tested.head_sha) == ("head-wheel", overlay_upstream.head)
    assert tested.head_wheel == str(folder / wheel.name)
    assert tested.compiled_not_covered == []  # the wheel was built from the head: covered
    assert planned.shards, "the change is selected from the checkout's diff"
    environment = resolve_environment(tested, envs=get_settings().var_dir / "envs")
    assert environment.python != installed_environment().python
    assert environment.torch_build.startswith("2.13.0")
    (tmp_path / "test_head_wheel.py").write_text(WHEEL_SUITE)
    env = {**environment.env, "HEAD_ENV": str(Path(environment.python).parent.parent)}
    try:
        run = run_shard(
            ["test_head_wheel.py::test_runs_the_head_wheel"],
            launcher=launcher_for(
                RunnerConfig(rootdir=str(tmp_path)),
                warm=False,
                environment=dataclasses.replace(environment, env=env),
                environment_key=tested.key(),
            ),
            pytest_args=["--rootdir", str(tmp_path), "-p", "no:cacheprovider"],
            per_test_timeout=600,
            workdir=tmp_path / "work",
        )
    finally:
        close_pools()
    (result,) = run.results
    assert result.outcome == "passed", result.message


@pytest.mark.long
@pytest.mark.timeout(1200)
def test_a_compiled_change_without_head_wheel_lists_what_the_overlay_cannot_test(
    relay_up: Any, receiver: Any, overlay_upstream: Any, tmp_path: Path
) -> None:
    env = {
        # this run's inventory and environments (the universe is collected once, not per stack)
        "RELAY_VAR_DIR": str(get_settings().var_dir.absolute()),
        "RELAY_RUNNER_ENABLED": "true",  # the default planner
        "RELAY_EVENT_HANDLERS": "[]",
        "RELAY_UPSTREAM_PATH": str(overlay_upstream.repo.path),
        "RELAY_CALLBACK_URL": receiver.url,
        "RELAY_CALLBACK_TOKEN": "callback-token-for-compiled",
        "RELAY_RUNNER_BUDGET_SECONDS": "3",  # a few variants
        "RELAY_PER_TEST_TIMEOUT": "120",
        "RELAY_WARM_POOL_AT_BOOT": "false",
    }
    body = relay_up.pull_request(overlay_upstream.base, overlay_upstream.head)
    with relay_up.running("sqlite+embedded", tmp_path, extra_env=env) as stack:
        delivery_id = stack.submit(body)
        job = stack.wait_job(delivery_id, timeout=900)
        detail = httpx.get(f"{stack.base_url}/api/v1/jobs/{job.id}").json()
        tested = detail["upstream_under_test"]
        assert (tested["kind"], tested["head_sha"]) == ("overlay", overlay_upstream.head), (
            tested,
            stack.log_tail(),
        )
        assert tested["compiled_not_covered"] == [COMPILED]
        assert tested["files_laid_over"] == 2  # functional.py and the new module
        assert tested["summary"].endswith(NOT_TESTED), tested["summary"]
        assert job.tests_total > 0  # the Python part of the change ran
        check_run = job_body(stack.job_for(delivery_id))  # what the check run shows
        assert check_run["output"]["summary"].endswith(NOT_TESTED), check_run
        done = stack.wait_for(
            lambda: (
                [
                    c
                    for c in receiver.calls
                    if c.body["delivery_id"] == delivery_id
                    and c.body["workflow"]["status"] == "completed"
                ]
                or None
            ),
            what="the completed callback",
        )
        assert done[0].body["workflow"]["summary"].endswith(NOT_TESTED)
