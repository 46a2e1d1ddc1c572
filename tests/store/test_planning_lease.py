"""store.scheduling's planning lease against SQLite and PostgreSQL: which runner dispatches the
sweeper re-queues (a planner whose lease expired; a plan message lost before any planner took
it, only when the plan queue is empty), which it leaves alone (a live lease, a message still
waiting, a relayed dispatch), and how a plan given up fails its job with the reason."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import update

from store import deliveries, scheduling
from store.db import session_scope
from store.deliveries import DeliveryCreate
from store.downstreams import ensure_downstream
from store.jobs import JobKey
from store.models import Dispatch, Job, utcnow

MINUTE = timedelta(seconds=60)


def _dispatch(url: str, name: str, *, target: str = "runner", **columns: Any) -> int:
    with session_scope(url) as s:
        _, delivery_pk = deliveries.store(
            s,
            data=DeliveryCreate(
                delivery_id=name,
                event="pull_request",
                action="opened",
                repo="pytorch/pytorch",
                raw_body=b"{}",
                pr_number=1,
                head_sha="a" * 40,
                normalized={"event": "pull_request"},
            ),
        )
        downstream = ensure_downstream(
            s, repo=f"local/{target}", level="L2", device=None, policy={}
        )
        row = Dispatch(delivery_pk=delivery_pk, downstream_pk=downstream.id, target=target)
        s.add(row)
        s.flush()
        s.execute(update(Dispatch).where(Dispatch.id == row.id).values(**columns))
        s.commit()
        return row.id


def _stalled(url: str, *, queue_empty: bool = True) -> dict[int, scheduling.StalledPlan]:
    with session_scope(url) as s:
        found = scheduling.stalled_plans(s, unstarted_after=MINUTE, plan_queue_empty=queue_empty)
    return {p.dispatch_pk: p for p in found}


def test_which_plans_the_sweeper_takes_back(database_url: str) -> None:
    now = utcnow()
    dead = _dispatch(database_url, "dead", attempts=1, lease_until=now - timedelta(seconds=1))
    alive = _dispatch(database_url, "alive", attempts=1, lease_until=now + MINUTE)
    lost = _dispatch(database_url, "lost", created_at=now - 2 * MINUTE)
    requeued_lately = _dispatch(
        database_url, "lately", created_at=now - 2 * MINUTE, enqueued_at=now
    )
    fresh = _dispatch(database_url, "fresh")
    planned = _dispatch(database_url, "planned", state="sent", lease_until=now - MINUTE, attempts=1)
    relayed = _dispatch(database_url, "relayed", target="github", created_at=now - 2 * MINUTE)

    stalled = _stalled(database_url)
    assert set(stalled) == {dead, lost}
    assert stalled[dead].started and stalled[dead].attempts == 1
    assert not stalled[lost].started and stalled[lost].attempts == 0
    # a message in the plan queue may be the lost one, waiting: only expired leases count then
    assert set(_stalled(database_url, queue_empty=False)) == {dead}
    assert {alive, requeued_lately, fresh, planned, relayed}.isdisjoint(stalled)

    with session_scope(database_url) as s:
        assert scheduling.requeue_planning(s, dispatch_pk=dead)
        assert not scheduling.requeue_planning(s, dispatch_pk=alive)  # its planner lives
        assert not scheduling.requeue_planning(s, dispatch_pk=planned)
    # re-queued: no lease, enqueued now; stalled again only once that message is lost too
    assert set(_stalled(database_url)) == {lost}
    with session_scope(database_url) as s:
        scheduling.renew_planning(s, dispatch_pk=dead, lease=60)
        scheduling.renew_planning(s, dispatch_pk=planned, lease=60)  # not pending: untouched
        row, done = s.get(Dispatch, dead), s.get(Dispatch, planned)
        assert row is not None and row.lease_until is not None
        assert done is not None and done.state == "sent"
        assert done.lease_until.replace(tzinfo=None) < now.replace(tzinfo=None)


def test_a_plan_given_up_fails_its_job_with_the_reason(database_url: str) -> None:
    pk = _dispatch(database_url, "given-up", attempts=3, lease_until=utcnow() - MINUTE)
    no_job = _dispatch(database_url, "no-job", attempts=3, lease_until=utcnow() - MINUTE)
    with session_scope(database_url) as s:
        job = scheduling.begin_planning(
            s,
            key=JobKey(
                delivery_id="given-up",
                repo="local/runner",
                run_id=str(pk),
                run_attempt="1",
                job_name="spyre",
            ),
            dispatch_pk=pk,
            event_type="pull_request",
            workflow_name="w",
            head_sha=None,
            pr_number=1,
        )
        job_pk = job.id
        assert (
            scheduling.give_up_planning(s, dispatch_pk=pk, reason="planning lost 3 times") == job_pk
        )
        assert scheduling.give_up_planning(s, dispatch_pk=no_job, reason="lost") is None
        # once given up, a second sweep finds nothing to give up or re-queue
        assert scheduling.give_up_planning(s, dispatch_pk=pk, reason="again") is None
        assert not scheduling.requeue_planning(s, dispatch_pk=pk)
    with session_scope(database_url) as s:
        failed, row, other = s.get(Job, job_pk), s.get(Dispatch, pk), s.get(Dispatch, no_job)
        assert failed is not None and (failed.status, failed.conclusion) == ("completed", "failure")
        assert row is not None and (row.state, row.last_error) == (
            "failed",
            "planning lost 3 times",
        )
        assert other is not None and (other.state, other.last_error) == ("failed", "lost")
    assert _stalled(database_url) == {}


def _claim(url: str, pk: int, *, max_attempts: int = 2) -> bool:
    with session_scope(url) as s:
        return scheduling.claim_planning(s, dispatch_pk=pk, lease=60, max_attempts=max_attempts)


def _attempts(url: str, pk: int) -> int:
    with session_scope(url) as s:
        row = s.get(Dispatch, pk)
        assert row is not None
        return row.attempts or 0


def test_one_planner_at_a_time_and_no_more_starts_than_allowed(database_url: str) -> None:
    """Two plan messages for one dispatch (the sweeper's re-queue and the broker's redelivery
    of the killed planner's message) start one planner: the second finds the first's lease and
    counts no attempt. Once the lease expires the next claim counts; at RELAY_PLAN_ATTEMPTS no
    planner starts again (the sweeper gives the plan up with the reason)."""
    pk = _dispatch(database_url, "claimed")
    planned = _dispatch(database_url, "planned-already", state="sent")
    assert _claim(database_url, pk)
    assert not _claim(database_url, pk)  # the first planner's lease runs
    assert _attempts(database_url, pk) == 1
    with session_scope(database_url) as s:  # that planner was killed: its lease expires
        s.execute(update(Dispatch).where(Dispatch.id == pk).values(lease_until=utcnow() - MINUTE))
        s.commit()
    assert _claim(database_url, pk)
    assert _attempts(database_url, pk) == 2
    with session_scope(database_url) as s:
        s.execute(update(Dispatch).where(Dispatch.id == pk).values(lease_until=utcnow() - MINUTE))
        s.commit()
    assert not _claim(database_url, pk)  # two started, none finished: no third
    assert _attempts(database_url, pk) == 2
    assert pk in _stalled(database_url)  # the sweeper gives it up
    assert not _claim(database_url, planned)
    assert _attempts(database_url, planned) == 0
