"""store.shards against SQLite and PostgreSQL: no shard is left behind. A running shard whose
lease expired (its worker died, or its task raised and gave the lease up) is found, handed back
to pending, or ended as failed (its unfinished tests stored as not_run with the reason, the job a
failure) or cancelled; a live lease is left alone; cancelling a job takes its dead owners'
shards too, never a live owner's."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update

from store import jobs, scheduling, shards
from store import results as result_rows
from store.db import session_scope
from store.jobs import JobKey
from store.models import Conclusion, Job, Shard, ShardState, TestResult, utcnow
from store.outcomes import Outcome, TestOutcome


def _job(url: str, name: str, shard_ids: list[list[str]]) -> int:
    with session_scope(url) as s:
        job, created = jobs.create_job(
            s,
            key=JobKey(name, "local/spyre", "1", "1", "spyre"),
            dispatch_pk=None,
            event_type="pull_request",
            workflow_name="w",
            url="",
            head_sha="a" * 40,
            pr_number=7,
            shards=shard_ids,
            selection={"plan": {}},
        )
        assert created
        return job.id


def _claim(url: str, owner: str) -> int:
    with session_scope(url) as s:
        claim = scheduling.claim_next(s, owner=owner, task_id=owner.rsplit(":", 1)[-1], lease=60)
        assert claim.shard is not None
        return claim.shard.id


def _expire(url: str, shard_pk: int) -> None:
    with session_scope(url) as s:
        s.execute(
            update(Shard)
            .where(Shard.id == shard_pk)
            .values(lease_until=utcnow() - timedelta(seconds=1))
        )
        s.commit()


def _shard(url: str, shard_pk: int) -> Shard:
    with session_scope(url) as s:
        row = s.get(Shard, shard_pk)
        assert row is not None
        s.expunge(row)
        return row


def test_an_expired_lease_is_found_and_handed_back_a_live_one_is_not(database_url: str) -> None:
    job = _job(database_url, "d1", [["t::a", "t::b"], ["t::c"]])
    dead = _claim(database_url, "hostB:11:task-1")
    alive = _claim(database_url, "hostC:12:task-2")
    _expire(database_url, dead)
    with session_scope(database_url) as s:
        lost = shards.lost_shards(s)
        assert [(x.shard_pk, x.job_pk, x.attempts, x.owner) for x in lost] == [
            (dead, job, 1, "hostB:11:task-1")
        ]
        assert not lost[0].job_cancelled
        assert shards.requeue_lost(s, shard_pk=dead)
        assert not shards.requeue_lost(s, shard_pk=dead)  # once
        assert not shards.requeue_lost(s, shard_pk=alive)  # a live owner keeps it
        assert shards.lost_shards(s) == []
    row = _shard(database_url, dead)
    assert (row.state, row.owner, row.lease_until, row.attempts) == ("pending", None, None, 1)
    assert row.enqueued_at is not None
    # the next owner takes it back (a second attempt)
    assert _claim(database_url, "hostC:12:task-3") == dead
    assert _shard(database_url, dead).attempts == 2


def test_a_raised_task_gives_its_lease_up_with_the_error(database_url: str) -> None:
    _job(database_url, "d2", [["t::a"]])
    shard_pk = _claim(database_url, "hostB:11:task-1")
    with session_scope(database_url) as s:
        shards.give_up_lease(s, shard_pk=shard_pk, owner="someone-else", error="nope")
        assert shards.lost_shards(s) == []  # only its owner gives it up
        shards.give_up_lease(s, shard_pk=shard_pk, owner="hostB:11:task-1", error="OSError: x")
        (lost,) = shards.lost_shards(s)
    assert lost.last_error == "OSError: x"
    reason = shards.attempts_spent(3, 3, lost.last_error)
    assert reason == "shard lost 3 times, RELAY_SHARD_ATTEMPTS (3) reached; last error: OSError: x"


def test_attempts_spent_fail_the_shard_and_its_job(database_url: str) -> None:
    job_pk = _job(database_url, "d3", [["t::a", "t::b", "t::c"]])
    shard_pk = _claim(database_url, "hostB:11:task-1")
    with session_scope(database_url) as s:
        result_rows.store_results(
            s, job_pk=job_pk, shard_pk=shard_pk, outcomes=[TestOutcome("t::a", Outcome.PASSED)]
        )
    _expire(database_url, shard_pk)
    reason = shards.attempts_spent(1, 1, None)
    with session_scope(database_url) as s:
        assert shards.end_lost(s, shard_pk=shard_pk, state=ShardState.FAILED, reason=reason)
        assert not shards.end_lost(s, shard_pk=shard_pk, state=ShardState.FAILED, reason=reason)
        results = dict(
            s.execute(
                select(TestResult.test_id, TestResult.outcome).where(TestResult.job_pk == job_pk)
            ).all()
        )
        messages = set(s.scalars(select(TestResult.message).where(TestResult.outcome == "not_run")))
        assert jobs.shards_open(s, job_pk=job_pk) == 0
        job = s.get(Job, job_pk)
        assert job is not None
        # one test passed, but a shard failed: the job is a failure, not a success
        assert jobs.conclude(s, job=job) is Conclusion.FAILURE
        assert shards.failed_shards(s, job_pk=job_pk) == [reason]
    assert results == {"t::a": "passed", "t::b": "not_run", "t::c": "not_run"}
    assert messages == {reason}
    assert "worker killed or its machine lost" in reason


def test_cancelling_a_job_takes_dead_owners_shards_not_live_ones(database_url: str) -> None:
    job_pk = _job(database_url, "d4", [["t::a"], ["t::b"], ["t::c"]])
    dead = _claim(database_url, "hostB:11:task-1")
    alive = _claim(database_url, "hostC:12:task-2")
    _expire(database_url, dead)
    with session_scope(database_url) as s:
        assert jobs.cancel_job_shards(s, job_pk=job_pk) == 2  # the pending one and the dead one
        states = dict(s.execute(select(Shard.id, Shard.state).where(Shard.job_pk == job_pk)).all())
        assert states[dead] == "cancelled" and states[alive] == "running"
        assert jobs.shards_open(s, job_pk=job_pk) == 1
        # the live owner dies before it stops: its lease expires, the sweeper cancels it
        s.execute(update(Job).where(Job.id == job_pk).values(conclusion="cancelled"))
        s.commit()
    _expire(database_url, alive)
    with session_scope(database_url) as s:
        (lost,) = shards.lost_shards(s)
        assert lost.shard_pk == alive and lost.job_cancelled
        assert shards.end_lost(s, shard_pk=alive, state=ShardState.CANCELLED, reason="gone")
        assert jobs.shards_open(s, job_pk=job_pk) == 0
        assert job_pk in jobs.orphaned_jobs(s)  # the sweeper reports it: it completes


def test_finished_keys_name_the_stored_shards(database_url: str) -> None:
    job_pk = _job(database_url, "d5", [["t::a"], ["t::b"]])
    shard_pk = _claim(database_url, "hostB:11:task-1")
    with session_scope(database_url) as s:
        assert shards.finished_keys(s, job_pks=[job_pk]) == set()
        jobs.finish_shard(s, shard_pk=shard_pk, state=ShardState.DONE)
        index = s.get(Shard, shard_pk).index  # type: ignore[union-attr]
        assert shards.finished_keys(s, job_pks=[job_pk]) == {(job_pk, index)}
