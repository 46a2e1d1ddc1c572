"""The default planner: the selector's four stages over the bundled universe on the backend.

Revisions come from the event: a pull request's base..head SHAs, a push's before..after, a
replay's versions. Without a checkout (RELAY_UPSTREAM_PATH) commit SHAs cannot be read, and the
selector says so and selects the whole universe (cut to the budget). A nightly run selects the
whole universe on purpose. Our own per-test history (TestStat rows) feeds the budget stage.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from sqlalchemy import select

from relay.db import session_scope
from relay.github.events import UpstreamEvent
from relay.models import TestStat
from relay.settings import Settings
from workers.planning import PlannedRun

log = logging.getLogger("workers.selector_bridge")

PROJECT_ROOT = Path(__file__).resolve().parent.parent

#: Imported once by the warm pool so no test process pays for them (torch, the backend, the
#: device-generic test machinery and the OpInfo / ModuleInfo databases).
PRELOAD = [
    "torch",
    "spyre_stack:register",
    "torch.testing._internal.common_utils",
    "torch.testing._internal.common_device_type",
    "torch.testing._internal.common_methods_invocations",
    "torch.testing._internal.common_modules",
]


def history_from_stats(settings: Settings) -> Any:
    from selector.stages.costs import History

    with session_scope(settings.database_url) as session:
        rows = session.scalars(
            select(TestStat).where(TestStat.downstream_repo == settings.runner_repo)
        )
        data = {
            r.test_id: {
                "seconds": (r.mean_device_time_us / 1e6)
                if r.mean_device_time_us
                else r.mean_duration_s,
                "runs": r.runs,
                "failures": r.failures,
                "flaky": r.flips > 0,
            }
            for r in rows
        }
    return History.from_mapping(data)


def revisions(event: UpstreamEvent) -> tuple[str, str] | None:
    """(base, head) to compare, or None for a whole-universe run."""
    if event.event in ("nightly",):
        return None
    if event.event == "periodic" and event.base_ref and event.head_ref:
        return event.base_ref, event.head_ref  # a release replay: versions such as 2.13 -> 2.14
    if event.event == "push" and event.before_sha and event.after_sha:
        return event.before_sha, event.after_sha
    if event.base_sha and event.head_sha:
        return event.base_sha, event.head_sha
    if event.head_sha:
        return (
            f"{event.head_sha}^",
            event.head_sha,
        )  # a re-run request: the head commit's own change
    return None


def spec_paths(settings: Settings) -> list[Path]:
    if settings.runner_specs:
        return [Path(p).resolve() for p in settings.runner_specs]
    return [PROJECT_ROOT / "testspecs" / "spyre"]


def run_config(settings: Settings, specs: list[Path]) -> tuple[list[str], dict[str, str]]:
    """pytest arguments and environment that run spyre variants under the specs, the same way
    the inventory collected them."""
    from selector.inventory_sources import get_backend
    from testspecs.apply import SpecConfig
    from testspecs.pytest_plugin import DEVICE_BASE_FILE

    backend = get_backend(settings.runner_backend)
    args = ["--rootdir", str(PROJECT_ROOT), "-p", "no:warnings"]
    for plugin in backend.plugins:
        args += ["-p", plugin]
    args += ["-p", "testspecs.pytest_plugin"]
    for path in specs:
        args += ["--spec", str(path)]
    env = dict(backend.env)
    base = env.get("TORCH_TEST_DEVICES")
    env.update(SpecConfig([str(p) for p in specs], device=backend.name, backend_base=base).env())
    env["TORCH_TEST_DEVICES"] = DEVICE_BASE_FILE
    env["SPYRE_SILENCE_DOWNCAST_WARNING"] = "1"
    return args, env


def plan_with_selector(event: UpstreamEvent, settings: Settings) -> PlannedRun:
    from selector.plan import plan_for_event, run_selection, universe_from_inventory

    specs = spec_paths(settings)
    universe = universe_from_inventory(backend=settings.runner_backend, specs=specs)
    history = history_from_stats(settings)
    revs = revisions(event)
    if revs is None:
        plan = _whole_universe(event, universe, settings, history, run_selection)
    else:
        base, head = revs
        plan = plan_for_event(
            base=base,
            head=head,
            upstream=settings.upstream_path,
            backend=settings.runner_backend,
            universe=universe,
            specs=specs,
            budget_seconds=settings.runner_budget_seconds,
            workers=settings.runner_shards,
            history=history,
            offline=False,
        )
    targets = {
        v.test_id: (f"{v.via}::{v.cls}::{v.name}" if v.via else v.test_id)
        for v in universe.variants
    }
    shards = [[targets.get(t, t) for t in shard] for shard in plan.shards if shard]
    args, env = run_config(settings, specs)
    log.info("selection: %s", plan.summary())
    return PlannedRun(
        shards=shards,
        rootdir=str(PROJECT_ROOT),
        plan=plan.model_dump(mode="json"),
        stage_counts={
            step.stage: {"in": step.count_in, "out": step.count_out} for step in plan.funnel
        },
        fallbacks=[f.model_dump(mode="json") for f in plan.fallbacks],
        estimated_device_seconds=plan.estimated_device_seconds,
        base_rev=plan.base_resolved or plan.base,
        head_rev=plan.head_resolved or plan.head,
        pytest_args=args,
        env=env,
        preload=list(PRELOAD),
    )


def _whole_universe(
    event: UpstreamEvent, universe: Any, settings: Settings, history: Any, run_selection: Any
) -> Any:
    from selector.changes.facts import ChangeFacts
    from selector.upstream import ResolvedRevision

    head = event.head_sha or "installed"
    rev = ResolvedRevision(
        kind="wheels", requested=head, resolved=head, detail=f"{event.event}: installed torch"
    )
    facts = ChangeFacts(
        source_kind="installed", base=rev, head=rev, files=[], python=[], native_functions=[],
        derivatives=[], db_entries=[], errors=[],
    )  # fmt: skip
    return run_selection(
        facts,
        universe,
        backend=settings.runner_backend,
        history=history,
        budget_seconds=settings.runner_budget_seconds,
        workers=settings.runner_shards,
        force_all=f"{event.event} run: the whole universe",
    )
