"""Shards sized in time (planner.sharding: the one split a job runs) and which shard a free
worker claims next (store.scheduling), in process on a migrated SQLite database."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from planner.model import finish_seconds
from planner.sharding import shard_by_time
from store import jobs, scheduling
from store.db import session_scope
from store.migrate import upgrade
from store.models import Job, JobStatus, Shard, ShardState, utcnow


def test_shards_are_cut_to_the_target_duration_longest_first() -> None:
    ids = [f"a.py::t{i}" for i in range(10)] + [f"b.py::t{i}" for i in range(5)]
    durations = {f"a.py::t{i}": 10.0 for i in range(10)} | {"b.py::t0": 45.0}
    shards, seconds = shard_by_time(
        ids, durations, target_seconds=30, max_shards=64, prior_seconds=1.0
    )
    assert sorted(t for s in shards for t in s) == sorted(ids)  # nothing lost or doubled
    assert all(s <= 30 or len(shard) == 1 for s, shard in zip(seconds, shards, strict=True))
    assert seconds == sorted(seconds, reverse=True)  # longest first
    assert seconds[0] == 45.0 and shards[0] == ["b.py::t0"]  # longer than the target: alone
    assert sum(seconds) == pytest.approx(100 + 45 + 4 * 1.0)  # unknown tests: the prior
    # tests of one file stay together: each file in as few consecutive shards as it needs
    assert {s[0].split("::")[0] for s in shards if len(s) == 3} == {"a.py"}


def test_the_shard_ceiling_makes_shards_longer() -> None:
    ids = [f"a.py::t{i}" for i in range(100)]
    shards, seconds = shard_by_time(ids, {}, target_seconds=1, max_shards=4, prior_seconds=1)
    assert len(shards) == 4 and sum(len(s) for s in shards) == 100
    assert max(seconds) <= 26


def test_a_short_job_is_cut_into_one_shard_per_worker() -> None:
    ids = [f"a.py::t{i}" for i in range(60)] + [f"b.py::t{i}" for i in range(60)]
    # 120 s in all: one shard at the 200 s target, whatever the workers
    assert len(shard_by_time(ids, {}, target_seconds=200, max_shards=64, prior_seconds=1)[0]) == 1
    shards, seconds = shard_by_time(
        ids, {}, target_seconds=200, max_shards=64, prior_seconds=1, parallel=2
    )
    assert len(shards) == 2 and sorted(t for s in shards for t in s) == sorted(ids)
    assert seconds == [60.0, 60.0]  # equal shares, each file in one shard here
    assert {t.split("::")[0] for t in shards[0]} != {t.split("::")[0] for t in shards[1]}
    # three workers: three shares of 40 s; ten workers: no shard under 20 s, so six
    assert (
        len(
            shard_by_time(ids, {}, target_seconds=200, max_shards=64, prior_seconds=1, parallel=3)[
                0
            ]
        )
        == 3
    )
    tens = shard_by_time(ids, {}, target_seconds=200, max_shards=64, prior_seconds=1, parallel=10)
    assert len(tens[0]) == 6 and min(tens[1]) >= 20
    # too short to share (under 2 x 20 s): one shard; the ceiling still holds
    few = ids[:30]
    assert (
        len(
            shard_by_time(few, {}, target_seconds=200, max_shards=64, prior_seconds=1, parallel=2)[
                0
            ]
        )
        == 1
    )
    assert (
        len(
            shard_by_time(ids, {}, target_seconds=200, max_shards=2, prior_seconds=1, parallel=4)[0]
        )
        == 2
    )


def test_an_empty_plan_has_no_shard() -> None:
    assert shard_by_time([], {}, target_seconds=1, max_shards=4) == ([], [])


@pytest.fixture
def db(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'relay.sqlite'}"
    upgrade(url)
    yield url


def _job(url: str, name: str, event: str, shards: int, pr: int | None = None) -> int:
    with session_scope(url) as s:
        job, _ = jobs.create_job(
            s,
            key=jobs.JobKey(name, "local/spyre", name, "1", "spyre"),
            dispatch_pk=None,
            event_type=event,
            workflow_name="w",
            url="",
            head_sha=None,
            pr_number=pr,
            shards=[[f"{name}::t{i}"] for i in range(shards)],
            selection={},
        )
        return job.id


def _claim(url: str, task: str = "t") -> tuple[int, int] | None:
    with session_scope(url) as s:
        claim = scheduling.claim_next(s, owner=f"h:1:{task}", task_id=task, lease=30)
        return None if claim.shard is None else (claim.shard.job_pk, claim.shard.index)


def _finish(url: str, job_pk: int, index: int) -> None:
    with session_scope(url) as s:
        s.execute(
            update(Shard)
            .where(Shard.job_pk == job_pk, Shard.index == index)
            .values(state=ShardState.DONE.value)
        )


def test_a_free_worker_takes_the_most_urgent_class_then_interleaves_jobs(db: str) -> None:
    replay = _job(db, "replay", "periodic", 3)
    nightly = _job(db, "nightly", "nightly", 2)
    push = _job(db, "push", "push", 1)
    pr = _job(db, "pr", "pull_request", 2, pr=7)
    order = []
    for n in range(8):
        got = _claim(db, task=f"t{n}")
        assert got is not None
        order.append(got)
        _finish(db, *got)
    assert _claim(db) is None
    # pull request, push, then the bulk class with its two jobs alternating
    assert order == [
        (pr, 0),
        (pr, 1),
        (push, 0),
        (replay, 0),
        (nightly, 0),
        (replay, 1),
        (nightly, 1),
        (replay, 2),
    ]


def test_superseded_and_planning_jobs_are_not_claimed(db: str) -> None:
    old = _job(db, "old", "pull_request", 1, pr=9)
    with session_scope(db) as s:
        s.execute(update(Job).where(Job.id == old).values(superseded_by_pk=old))
        planning = scheduling.begin_planning(
            s,
            key=jobs.JobKey("p", "local/spyre", "p", "1", "spyre"),
            dispatch_pk=None,
            event_type="pull_request",
            workflow_name="w",
            head_sha=None,
            pr_number=10,
        )
        assert planning.status == JobStatus.PLANNING.value and planning.planning_started_at
    assert _claim(db) is None


def test_a_redelivered_task_takes_its_own_shard_back_after_the_lease(db: str) -> None:
    job = _job(db, "j", "push", 2)
    assert _claim(db, task="dead") == (job, 0)
    with session_scope(db) as s:  # its worker died: the lease runs out, nobody renews it
        claim = scheduling.claim_next(s, owner="h:2:dead", task_id="dead", lease=30)
        assert claim.shard is None and 1 <= claim.busy_for <= 30
        s.execute(
            update(Shard)
            .where(Shard.job_pk == job, Shard.index == 0)
            .values(lease_until=utcnow() - timedelta(seconds=1))
        )
    with session_scope(db) as s:
        claim = scheduling.claim_next(s, owner="h:2:dead", task_id="dead", lease=30)
        assert claim.shard is not None and (claim.shard.index, claim.shard.attempts) == (0, 2)


def test_a_plan_is_cut_in_time_unless_its_planner_laid_out_the_shards() -> None:
    from backends.base import RunnerConfig
    from planner import RunPlan, ShardPolicy, cut_shards

    plan = RunPlan(shards=[["a.py::x", "a.py::y"], ["b.py::z"]], runner=RunnerConfig(rootdir="."))
    kept = cut_shards(plan, ShardPolicy(target_seconds=1, max_shards=8))
    assert (kept.shards, kept.shard_seconds) == ([["a.py::x", "a.py::y"], ["b.py::z"]], None)


def test_the_runner_cuts_a_selection_once_and_its_plan_says_so(
    small_upstream: Any, plan_everything: Any
) -> None:
    """The selector ranks and cuts; the runner's split (by the selection's runner-seconds, each
    test as its node id) is what the job stores: its shards, each selected test's shard, the
    shard counts and seconds and the finish estimate on the policy's workers."""
    from backends.base import RunnerConfig
    from planner import RunPlan, ShardPolicy, cut_shards
    from selector import History

    universe = small_upstream.make_universe()
    ids = [v.test_id for v in universe.variants]
    history = History.from_mapping({t: 10.0 + i for i, t in enumerate(ids)})
    selection = plan_everything(universe, reason="all", history=history)
    nodes = {t: f"wrapped/{t}" for t in ids[:5]}  # a few run through a wrapper's node id
    planned = RunPlan.for_selection(selection, nodes, runner=RunnerConfig(rootdir="."))
    assert planned.shards == [[nodes.get(t, t) for t in selection.test_ids]]  # rank order
    assert planned.estimated_finish_seconds() is None  # not cut yet
    run = cut_shards(planned, ShardPolicy(target_seconds=60.0, parallel=3))
    seconds = {nodes.get(t, t): 10.0 + i for i, t in enumerate(ids)}
    assert run.shard_seconds == [round(sum(seconds[n] for n in s), 6) for s in run.shards]
    assert run.shard_seconds == sorted(run.shard_seconds, reverse=True)  # longest first
    assert sorted(n for s in run.shards for n in s) == sorted(seconds)
    assert all(load <= 60.0 for load in run.shard_seconds) and run.workers == 3
    stored = run.stored()
    shard_of = {n: i for i, s in enumerate(run.shards) for n in s}
    rows = {r["test_id"]: r["shard"] for r in stored["variants"] if r["kind"] == "selected"}
    assert rows == {t: shard_of[nodes.get(t, t)] for t in ids}
    plan = stored["plan"]
    assert plan["counts"]["shards"] == [len(s) for s in run.shards]
    assert plan["shard_seconds"] == run.shard_seconds and plan["workers"] == 3
    assert plan["estimated_finish_seconds"] == finish_seconds(run.shard_seconds, 3)


def test_the_finish_estimate_runs_shards_longest_first_on_the_workers() -> None:
    assert finish_seconds([], 4) == 0.0
    assert finish_seconds([5.0, 4.0, 3.0], 1) == 12.0
    # 8 and 7 start; 6 goes to the worker free at 7, 5 to the one free at 8: 13 and 13
    assert finish_seconds([8.0, 7.0, 6.0, 5.0], 2) == 13.0
    assert finish_seconds([8.0, 7.0, 6.0, 5.0], 9) == 8.0
