"""Planners a relay under test loads by dotted path (RELAY_PLANNER).

``labelled_planner`` (RELAY_PLANNER=tests.support.planners:labelled_planner): the PR label
``plan:<name>`` picks a named plan from the JSON file in RELAY_TEST_PLANS:
``{"<name>": {"shards": [[node ids]], "env": {...}, "pytest_args": [...], "preload": [...],
"upstream": {...}}}`` (``upstream``: the plan's UpstreamUnderTest; default the installed torch).
Selection itself is the selector's job (and tested there); the loop tests exercise the loop.

``release_or_labelled_planner``: a release replay planned by the default planner, any other
event by ``labelled_planner``.

``small_selector_planner`` (RELAY_PLANNER=tests.support.planners:small_selector_planner): a real
selection over the small generated universe, run as quick sample tests standing in for the
selected variants (the `relay replay --events` tests).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from backends.base import RunnerConfig
from config.settings import Settings
from planner import RunPlan
from tests.support.services import REPO_ROOT
from upstream.undertest import UpstreamUnderTest
from wire.github.events import UpstreamEvent

LABELLED = "tests.support.planners:labelled_planner"
LOSING = "tests.support.planners:losing_planner"
REPLAY_OR_LABELLED = "tests.support.planners:replay_or_labelled_planner"
RELEASE_OR_LABELLED = "tests.support.planners:release_or_labelled_planner"
SMALL_SELECTOR = "tests.support.planners:small_selector_planner"

#: the sample suite the runner tests run (node ids relative to the project root)
SAMPLE = "tests/support/sample_suite/sample_runner_cases.py"
#: quick passing tests that stand in for the selected variants when the worker runs them
STAND_INS = [f"{SAMPLE}::test_passes_one", f"{SAMPLE}::test_passes_two", f"{SAMPLE}::test_slow_a"]


def labelled_planner(event: UpstreamEvent, settings: Settings) -> RunPlan:
    plans = json.loads(Path(os.environ["RELAY_TEST_PLANS"]).read_text())
    names = [label.split(":", 1)[1] for label in event.labels if label.startswith("plan:")]
    name = names[0] if names else "default"
    chosen = plans[name]
    upstream: dict[str, Any] = (
        {"upstream": UpstreamUnderTest.model_validate(chosen["upstream"])}
        if "upstream" in chosen
        else {}
    )
    return RunPlan(
        shards=chosen["shards"],
        runner=RunnerConfig(
            rootdir=str(REPO_ROOT),
            pytest_args=chosen.get("pytest_args", []),
            env=chosen.get("env", {}),
            preload=chosen.get("preload", []),
            device_time_property=chosen.get("device_time_property"),
        ),
        head_rev=event.head_sha,
        **upstream,
    )


#: the many quick tests a replay stands in with (``replay_or_labelled_planner``)
MANY = "tests/support/sample_suite/sample_many.py"


def replay_or_labelled_planner(event: UpstreamEvent, settings: Settings) -> RunPlan:
    """A release replay ("periodic" event ``base -> head``) plans RELAY_TEST_REPLAY_TESTS of
    the many quick tests in shards of RELAY_TEST_REPLAY_SHARD; its planning lasts until the
    file ``<RELAY_TEST_PLAN_GATE>/<base>-<head>.open`` exists (when that folder is set; a
    number in it replaces RELAY_TEST_REPLAY_TESTS), so a test holds a replay in planning as
    long as it likes. Other events: ``labelled_planner``."""
    if event.event != "periodic":
        return labelled_planner(event, settings)
    gate = os.environ.get("RELAY_TEST_PLAN_GATE")
    count = int(os.environ.get("RELAY_TEST_REPLAY_TESTS", "2400"))
    if gate:
        opened = Path(gate) / f"{event.base_ref}-{event.head_ref}.open"
        deadline = time.monotonic() + 600
        while not opened.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        if opened.exists() and opened.read_text().strip():  # the gate may say how many tests
            count = int(opened.read_text())
    size = int(os.environ.get("RELAY_TEST_REPLAY_SHARD", "240"))
    ids = [f"{MANY}::test_many[{i}]" for i in range(count)]
    return RunPlan(
        shards=[ids[i : i + size] for i in range(0, count, size)],
        runner=RunnerConfig(
            rootdir=str(REPO_ROOT),
            env={"SAMPLE_MANY_SECONDS": os.environ.get("SAMPLE_MANY_SECONDS", "0.02")},
        ),
        head_rev=event.head_ref,
    )


def release_or_labelled_planner(event: UpstreamEvent, settings: Settings) -> RunPlan:
    """A release replay is planned by the workers' default planner (the product's plan, run
    under the head release); other events by ``labelled_planner`` (the same plan's shards on
    another torch, to compare)."""
    if event.event == "periodic":
        from workers.plan import default_planner

        return default_planner(event, settings)
    return labelled_planner(event, settings)


def small_selection(event: str, budget: float | None) -> Any:
    """The selector's four stages over the small generated universe; the change of a replayed
    fixture cannot be read (no checkout of its SHAs), so, like the default planner, the selector
    falls back to the whole universe and the budget cuts it."""
    from tests.support.selection import plan_everything
    from tests.support.small_upstream import make_universe

    return plan_everything(
        make_universe(),
        reason=f"{event}: the change is not readable here",
        base="head",
        head="head",
        source_kind="installed",
        budget_seconds=budget,
    )


def small_selector_planner(event: Any, settings: Any) -> Any:
    """A real selection (funnel, fallback, budget cut) over the generated universe, run as quick
    sample tests standing in for the selected variants."""
    plan = small_selection(event.event, settings.runner_budget_seconds)
    stand_in = {t: STAND_INS[i] for i, t in enumerate(plan.test_ids)}
    return RunPlan.for_selection(
        plan, stand_in, runner=RunnerConfig(rootdir=str(REPO_ROOT)), head_rev=event.head_sha
    )


def losing_planner(event: UpstreamEvent, settings: Settings) -> RunPlan:
    """A planner whose worker is killed while it plans (SIGKILL to the planner worker's process
    group: its main process and pool, as an OOM kill or a lost machine would): the PR label
    ``plan:lost-once`` dies on the event's first planning and plans ``default`` on the next;
    ``plan:lost-always`` dies every time (attempts counted in RELAY_TEST_MARKER_DIR). Other
    labels: ``labelled_planner``."""
    names = [label.split(":", 1)[1] for label in event.labels if label.startswith("plan:")]
    if not names or names[0] not in ("lost-once", "lost-always"):
        return labelled_planner(event, settings)
    marker = Path(os.environ["RELAY_TEST_MARKER_DIR"]) / f"planned-{event.delivery_id}"
    attempts = int(marker.read_text()) + 1 if marker.exists() else 1
    marker.write_text(str(attempts))
    if names[0] == "lost-always" or attempts == 1:
        time.sleep(0.5)  # the planning is under way (lease taken) when the worker dies
        if os.getsid(0) != os.getpgid(0):  # `relay up` starts each worker in its own session
            raise RuntimeError("not in a worker's own session: refusing to kill its group")
        os.killpg(os.getpgid(0), signal.SIGKILL)
    chosen = json.loads(Path(os.environ["RELAY_TEST_PLANS"]).read_text())["default"]
    return RunPlan(
        shards=chosen["shards"],
        runner=RunnerConfig(rootdir=str(REPO_ROOT)),
        head_rev=event.head_sha,
    )
