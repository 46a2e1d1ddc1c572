"""The runner tests' plans over the sample suite, and the pull requests that pick them.

A stack started with :meth:`SampleRuns.runner_env` plans with ``labelled_planner``: a pull
request labelled ``plan:<name>`` (:meth:`SampleRuns.pr_body`) runs ``PLANS[name]``.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from tests.support.planners import (
    LABELLED,
    LOSING,
    RELEASE_OR_LABELLED,
    REPLAY_OR_LABELLED,
    SAMPLE,
)
from tests.support.services import GITHUB_FIXTURES
from tests.support.stack import UPSTREAM

TOKEN = "callback-token-for-tests"


SAMPLE_DIR = SAMPLE.rsplit("/", 1)[0]


def ids(*names: str) -> list[str]:
    return [f"{SAMPLE}::{n}" for n in names]


PLANS: dict[str, Any] = {
    "default": {"shards": [ids("test_passes_one")]},
    "ok": {
        "shards": [ids("test_passes_one", "test_slow_a"), ids("test_passes_two", "test_slow_b")]
    },
    "fail": {"shards": [ids("test_passes_one", "test_fails")]},
    "empty": {"shards": [ids("test_skipped")]},
    "broken_import": {
        "shards": [
            [*ids("test_passes_one"), f"{SAMPLE_DIR}/sample_broken_import.py::test_uses_the_helper"]
        ]
    },
    "faults": {
        "shards": [
            ids("test_passes_one", "test_segfaults", "test_passes_two", "test_hangs", "test_slow_a")
        ]
    },
    "long": {
        "shards": [
            ids("test_slow_a", "test_slow_b", "test_slow_c", "test_slow_d", "test_passes_one")
        ],
        "env": {"SAMPLE_SLOW_SECONDS": "1.5"},
    },
    "three": {
        "shards": [
            ids("test_slow_a", "test_slow_b", "test_slow_c", "test_slow_d"),
            ids("test_passes_one"),
            ids("test_passes_two"),
        ],
        "env": {"SAMPLE_SLOW_SECONDS": "1.5"},
    },
}


def write_plans(tmp: Path, plans: dict[str, Any] | None = None) -> Path:
    path = tmp / "plans.json"
    path.write_text(json.dumps(PLANS if plans is None else plans))
    return path


def runner_env(tmp: Path, callback_url: str) -> dict[str, str]:
    """The environment of a stack whose runner plans with the labelled planner and calls back
    to ``callback_url`` (short timeouts and leases, so fault tests finish quickly)."""
    return {
        "RELAY_RUNNER_ENABLED": "true",
        "RELAY_PLANNER": LABELLED,
        "RELAY_TEST_PLANS": str(write_plans(tmp)),
        "RELAY_PER_TEST_TIMEOUT": "4",
        "RELAY_SHARD_LEASE_SECONDS": "4",
        "RELAY_SWEEP_AFTER_SECONDS": "6",
        "RELAY_CALLBACK_URL": callback_url,
        "RELAY_CALLBACK_TOKEN": TOKEN,
        "RELAY_EVENT_HANDLERS": "[]",
        # the sample suite runs with its own recipe: the default one's pool would import torch
        # for nothing at boot
        "RELAY_WARM_POOL_AT_BOOT": "false",
    }


def pr_body(
    plan: str, *, number: int | None = None, action: str = "opened", head: str | None = None
) -> bytes:
    """A pull_request delivery (the tests' opened example) labelled ``plan:<plan>``."""
    payload = json.loads((GITHUB_FIXTURES / "pull_request/opened.payload.json").read_bytes())
    payload["action"] = action
    payload["number"] = payload["pull_request"]["number"] = number or (
        uuid.uuid4().int % 10**6 + 1000
    )
    payload["pull_request"]["labels"] = [{"name": f"plan:{plan}"}]
    payload["pull_request"]["head"]["sha"] = head or uuid.uuid4().hex + "abcdefgh"
    assert payload["repository"]["full_name"] == UPSTREAM
    return json.dumps(payload).encode()


class SampleRuns:
    """What the ``sample_runs`` fixture hands a test (see the module docstring)."""

    SAMPLE = SAMPLE
    TOKEN = TOKEN
    PLANS = PLANS
    LABELLED_PLANNER = LABELLED
    REPLAY_OR_LABELLED_PLANNER = REPLAY_OR_LABELLED
    RELEASE_OR_LABELLED_PLANNER = RELEASE_OR_LABELLED
    LOSING_PLANNER = LOSING
    ids = staticmethod(ids)
    write_plans = staticmethod(write_plans)
    runner_env = staticmethod(runner_env)
    pr_body = staticmethod(pr_body)
