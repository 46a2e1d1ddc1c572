"""The release step 2.13 -> 2.14 through a real ``relay up``: ``relay replay --run``'s job runs
under torch 2.14.1 in its own environment (the workers' default planner), the same plan's shards
run again on the installed 2.13.0, and the two jobs' results differ exactly where the release
ground truth (:func:`evaluation.groundtruth.release_ground_truth`, ``relay eval --kind
release``'s events, over the plan's variants, run under the specs the jobs ran under) says the
two torches differ.

``slow`` and ``wheels``, not ``long``: on a cold machine the 2.14.1 environment (5.5 GB), the
behaviour fingerprints under both torches and the head collection take over an hour (77 minutes
measured for the same work in ``make run``'s demo, docs/benchmarks.md), past CI's budget; warm
(``RELAY_VAR_DIR`` and the upstream cache kept) it takes minutes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from backends import get_backend
from cli.relay_client import run_release_replay
from config.broker import TASK_REPLAY, make_producer
from config.settings import Settings, get_settings
from evaluation.groundtruth import release_ground_truth
from inventory.build import universe_from_inventory
from planner.release import collected_universe
from store.db import session_scope
from store.models import Shard, TestResult
from testspecs.outcomes import FAILURES
from upstream.headenv import ensure_env

pytestmark = [pytest.mark.slow, pytest.mark.wheels, pytest.mark.timeout(4 * 3600)]
SPYRE = get_backend("spyre")


def outcomes(stack: Any, job_pk: int) -> dict[str, str]:
    """{node id: outcome} of one job (under the runner's specs, as the ground truth runs)."""
    with session_scope(stack.database_url) as s:
        rows = s.execute(
            select(TestResult.test_id, TestResult.outcome).where(TestResult.job_pk == job_pk)
        ).all()
    return dict(rows)


def shards_of(stack: Any, job_pk: int) -> list[list[str]]:
    with session_scope(stack.database_url) as s:
        rows = s.execute(select(Shard.index, Shard.test_ids).where(Shard.job_pk == job_pk)).all()
    return [list(ids) for _, ids in sorted(rows)]


def test_the_release_jobs_differ_exactly_where_the_ground_truth_says(
    relay_up: Any, sample_runs: Any, tmp_path: Path
) -> None:
    var = get_settings().var_dir.absolute()  # the environments and caches, made once
    env = ensure_env("2.14.1", root=var / "envs")
    plans = tmp_path / "plans.json"
    plans.write_text("{}")
    stack = relay_up.local(
        tmp_path,
        extra_env={
            "RELAY_VAR_DIR": str(var),
            "RELAY_RUNNER_ENABLED": "true",
            "RELAY_PLANNER": sample_runs.RELEASE_OR_LABELLED_PLANNER,
            "RELAY_TEST_PLANS": str(plans),
            "RELAY_EVENT_HANDLERS": "[]",
        },
    )
    try:
        settings = Settings(broker_url=stack.broker_url, database_url=stack.database_url)
        replay = run_release_replay(
            "2.13",
            "2.14",
            url=stack.base_url,
            wait=3600,
            echo=print,
            send=lambda b, h: str(make_producer(settings).send_task(TASK_REPLAY, args=[b, h]).id),
        )
        assert replay["status"] == "completed", replay
        head_job = httpx.get(f"{stack.base_url}/api/v1/jobs/{replay['job_id']}").json()
        tested = head_job["upstream_under_test"]
        assert (tested["kind"], tested["torch_version"]) == ("release", "2.14.1"), tested
        assert tested["torch_build"].startswith("2.14.1")
        assert tested["summary"] == f"torch {tested['torch_build']} in its own environment"
        shards = shards_of(stack, replay["job_id"])
        # the same plan on the installed torch (2.13.0): its shards, the runner's recipe
        plans.write_text(
            json.dumps(
                {
                    "installed": {
                        "shards": shards,
                        **SPYRE.runner_config(SPYRE.default_specs).model_dump(),
                    }
                }
            )
        )
        base_job = stack.wait_job(stack.submit(sample_runs.pr_body("installed")), timeout=3600)
        after, before = outcomes(stack, replay["job_id"]), outcomes(stack, base_job.id)
    finally:
        stack.stop()
    assert base_job.upstream_under_test["kind"] == "installed"
    assert base_job.upstream_under_test["torch_build"].startswith("2.13.0")
    planned = [t for shard in shards for t in shard]
    assert set(after) == set(planned) == set(before)

    base = universe_from_inventory(backend="spyre")
    head = collected_universe(env)
    test_of = {v.node_id: v.test_id for v in head.variants}
    truth = release_ground_truth(
        base,
        head,
        name="2.13 -> 2.14",
        changed_files=[],
        head_python=str(env.python),
        head_env=env.env,
        tests=[test_of[n] for n in planned],
        run=True,
        # the specs both jobs ran under: their modes and edits (a tolerance) shape an outcome
        specs=SPYRE.default_specs,
    )
    changed, new_failing = (set(e.failing) for e in truth.events)
    new = {n for n in planned if test_of[n] not in base.by_id}
    common = [n for n in planned if n not in new]
    # where both torches have the variant: the jobs differ exactly where the truth does
    differ = {test_of[n] for n in common if after[n] != before[n]}
    assert differ == changed, (sorted(differ - changed)[:20], sorted(changed - differ)[:20])
    # variants new at 2.14.1: never passed under 2.13.0 (it cannot collect them); under 2.14.1
    # they fail exactly where the truth says
    assert new, "the plan ranks the variants new at the head first"
    assert not {n for n in new if before[n] in ("passed", "xpassed")}
    failing_now = {test_of[n] for n in new if after[n] in FAILURES}
    assert failing_now == new_failing, sorted(failing_now ^ new_failing)[:20]


LINALG_POLAR = "_linalg_polar_spyre_"  # new at 2.14.1; not in the device spec's supported ops
NOT_GENERATED = "spec: skip (op linalg.polar is not in global.supported_ops)"


def test_a_release_job_runs_the_variants_its_head_adds(
    relay_up: Any, sample_runs: Any, tmp_path: Path
) -> None:
    """Variants new at 2.14.1, planned both ways (the head universe collected under 2.14.1, and
    estimated from the change facts): the ones the device spec never generates on the runner
    (``linalg.polar``: not in ``global.supported_ops``) are removed by both plans with the spec's
    reason, never ranked to run; the ones it generates (``polar``'s new float16, ``randint``'s
    bool) are selected, and a job under 2.14.1 collects and runs every one of them (2.13.0
    cannot collect them)."""
    from planner.release import plan_release
    from selector import NEW_AT_HEAD

    var = get_settings().var_dir.absolute()
    ensure_env("2.14.1", root=var / "envs")
    selected: dict[str, list[str]] = {}
    for collected in (True, False):
        plan = plan_release(
            "2.13", "2.14", offline=True, head_env=collected, import_map=False, budget_share=None
        ).plan
        polar = {r.test_id: r.reason for r in plan.removed if LINALG_POLAR in r.test_id}
        assert len(polar) >= 5 and set(polar.values()) == {NOT_GENERATED}, polar
        assert not [t.test_id for t in plan.tests if LINALG_POLAR in t.test_id]
        selected["collected" if collected else "estimated"] = [
            t.test_id for t in plan.tests if t.flag == NEW_AT_HEAD
        ]
    ids = selected["collected"]
    assert any("_compare_cpu_polar_spyre_float16" in t for t in ids), ids
    assert set(selected["estimated"]) & set(ids), selected  # the estimate finds some of them
    plans = tmp_path / "plans.json"
    plans.write_text(
        json.dumps(
            {
                "default": {
                    "shards": [ids],
                    "upstream": {"kind": "release", "torch_version": "2.14.1"},
                    **SPYRE.runner_config(SPYRE.default_specs).model_dump(),
                }
            }
        )
    )
    env = {
        "RELAY_VAR_DIR": str(var),
        "RELAY_RUNNER_ENABLED": "true",
        "RELAY_EVENT_HANDLERS": "[]",
        "RELAY_PLANNER": sample_runs.LABELLED_PLANNER,
        "RELAY_TEST_PLANS": str(plans),
        "RELAY_WARM_POOL_AT_BOOT": "false",
    }
    stack = relay_up.local(tmp_path, extra_env=env)
    try:
        job = stack.wait_job(stack.submit(sample_runs.pr_body("default")), timeout=1800)
        ran = outcomes(stack, job.id)
        tested = httpx.get(f"{stack.base_url}/api/v1/jobs/{job.id}").json()["upstream_under_test"]
    finally:
        stack.stop()
    assert tested["kind"] == "release" and tested["torch_build"].startswith("2.14.1"), tested
    assert set(ran) == set(ids)
    assert not {t: o for t, o in ran.items() if o == "not_run"}  # collected and run, every one
