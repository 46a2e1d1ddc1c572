"""A plan whose planner worker was killed while it planned, on a real stack (`relay up`: uvicorn,
the control, planner and shard Celery worker processes; SQLite + the embedded broker, and
PostgreSQL + Redis): the planner worker's whole process group is SIGKILLed mid-plan (so Celery
cannot hand its message back), `relay up` starts the worker again, and the beat's sweeper finds
the plan's expired lease and re-queues it; a plan lost RELAY_PLAN_ATTEMPTS times completes its
job as a failure with the reason, and its dispatch says why.

The planner is ``tests.support.planners.losing_planner`` (labels ``plan:lost-once`` and
``plan:lost-always``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from store.db import session_scope
from store.models import Dispatch, JobTransition


@pytest.fixture(scope="module", params=["sqlite+embedded", "postgres+redis"])
def stack(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    relay_up: Any,
    sample_runs: Any,
    receiver: Any,
) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("plan-sweep-" + request.param.replace("+", "-"))
    env = {
        **sample_runs.runner_env(tmp, receiver.url),
        "RELAY_PLANNER": sample_runs.LOSING_PLANNER,
        "RELAY_PLAN_LEASE_SECONDS": "3",
        "RELAY_PLAN_ATTEMPTS": "2",
        "RELAY_SWEEP_AFTER_SECONDS": "4",
    }
    with relay_up.running(request.param, tmp, extra_env=env) as running:
        yield running


def _dispatch_and_history(stack: Any, job_pk: int, dispatch_pk: int) -> tuple[Any, list[Any]]:
    with session_scope(stack.database_url) as s:
        dispatch = s.get(Dispatch, dispatch_pk)
        history = list(
            s.scalars(
                select(JobTransition)
                .where(JobTransition.job_pk == job_pk)
                .order_by(JobTransition.id)
            )
        )
        s.expunge_all()
    return dispatch, history


def test_a_plan_whose_planner_was_killed_is_planned_again(stack: Any, sample_runs: Any) -> None:
    delivery_id = stack.submit(sample_runs.pr_body("lost-once"))
    done = stack.wait_job(delivery_id, timeout=300)
    assert done.conclusion == "success", stack.log_tail()
    assert done.tests_total == 1
    assert stack.results(done.id) == {"test_passes_one": "passed"}
    dispatch, history = _dispatch_and_history(stack, done.id, done.dispatch_pk)
    assert dispatch.state == "sent" and dispatch.attempts == 2  # killed once, planned once
    assert [t.to_status for t in history][:2] == ["planning", "dispatched"]
    log = stack.log_path.read_text()
    assert "the planner worker exited" in log  # it really died, and `relay up` restarted it
    assert any(line.get("event") == "re-enqueued stalled plans" for line in stack.log_lines())


def test_a_plan_lost_every_time_fails_its_job_with_the_reason(stack: Any, sample_runs: Any) -> None:
    delivery_id = stack.submit(sample_runs.pr_body("lost-always"))
    done = stack.wait_job(delivery_id, timeout=300)
    assert done.conclusion == "failure" and done.tests_total == 0
    dispatch, history = _dispatch_and_history(stack, done.id, done.dispatch_pk)
    assert dispatch.state == "failed" and dispatch.attempts == 2
    assert dispatch.last_error.startswith("planning lost 2 times")
    last = history[-1]
    assert (last.from_status, last.to_status, last.source) == ("planning", "completed", "sweeper")
    assert last.detail is not None and last.detail["error"] == dispatch.last_error
