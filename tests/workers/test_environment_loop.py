"""Two jobs on two upstream environments (an overlay of a head commit, the installed torch)
interleave on two shard workers with warm pools, and no shard runs in the other job's
environment: each job's tests see exactly its own torch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

SAMPLE = "tests/support/sample_suite/sample_upstream_env.py"


def shards(name: str) -> list[list[str]]:
    return [[f"{SAMPLE}::{name}[{n}]"] for n in range(4)]


@pytest.mark.long
@pytest.mark.timeout(900)
def test_two_environments_interleave_without_mixing(
    relay_up: Any, sample_runs: Any, receiver: Any, overlay_upstream: Any, tmp_path: Path
) -> None:
    plans = {
        "head": {
            "shards": shards("test_sees_the_head"),
            "preload": ["torch"],
            "upstream": {"kind": "overlay", "head_sha": overlay_upstream.head},
        },
        "installed": {"shards": shards("test_sees_the_installed_torch"), "preload": ["torch"]},
    }
    stack_dir = tmp_path / "stack"
    stack_dir.mkdir()
    env = {
        **sample_runs.runner_env(stack_dir, receiver.url),
        "RELAY_TEST_PLANS": str(sample_runs.write_plans(stack_dir, plans)),
        "RELAY_UPSTREAM_PATH": str(overlay_upstream.repo.path),
        "RELAY_RUNNER_SHARD_SECONDS": "0.001",  # one test a shard: the shards interleave
        "RELAY_PER_TEST_TIMEOUT": "120",
        "RELAY_SHARD_LEASE_SECONDS": "30",
    }
    stack = relay_up.local(stack_dir, extra_env=env, workers=2)
    try:
        deliveries = [
            (plan, stack.submit(sample_runs.pr_body(plan)))
            for plan in ("head", "installed", "head", "installed")
        ]
        for plan, delivery_id in deliveries:
            job = stack.wait_job(delivery_id, timeout=600)
            assert (job.status, job.conclusion) == ("completed", "success"), (
                plan,
                stack.results(job.id),
                stack.log_tail(),
            )
            assert set(stack.results(job.id).values()) == {"passed"}
            assert len(stack.results(job.id)) == 4
            tested = httpx.get(f"{stack.base_url}/api/v1/jobs/{job.id}").json()[
                "upstream_under_test"
            ]
            assert tested["torch_build"]  # learned by the shard worker
            if plan == "head":
                assert (tested["kind"], tested["files_laid_over"]) == ("overlay", 2)
            else:
                assert tested["kind"] == "installed"
    finally:
        stack.stop()
    overlays = list((stack_dir / "envs").glob("overlay-*"))
    assert len(overlays) == 1, overlays  # made once for both jobs of that head
    assert json.loads((overlays[0] / "relay-overlay.json").read_text())["laid_over"] == 2
