"""Jobs written in a migrated database the way the plan stage writes them (the relay's in-process
API tests read them back): ``create_job`` with the RunPlan's stored form, results through
``store_result``, status changes through ``transition``."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any


class Jobs:
    """Jobs written the way the plan stage writes them: ``create_job`` with the RunPlan's
    stored form, results through ``store_result``, status changes through ``transition``."""

    def __init__(self, settings: Any, rootdir: Path) -> None:
        self.url = settings.database_url
        self.rootdir = rootdir

    def create(
        self,
        shards: list[list[str]],
        *,
        pr: int | None = 7,
        selection: Any = None,
        delivery_id: str | None = None,
        head: str = "a" * 40,
        delivery: str | None = None,
        upstream: Any = None,
        policy: Any = None,
    ) -> int:
        """A job; ``delivery``: planned for that stored delivery (through a dispatch);
        ``policy``: the shards cut as the plan stage cuts them (planner.cut_shards)."""
        from backends.base import RunnerConfig
        from planner import RunPlan, cut_shards
        from store.db import session_scope
        from store.jobs import JobKey, create_job

        plan = RunPlan(
            shards=shards,
            runner=RunnerConfig(rootdir=str(self.rootdir), pytest_args=["-q"]),
            selection=selection,
            base_rev="v2.13.0" if selection is not None else None,
            head_rev=head,
            **({"upstream": upstream} if upstream is not None else {}),
        )
        if policy is not None:
            plan = cut_shards(plan, policy)
        key = JobKey(
            delivery_id=delivery_id or str(uuid.uuid4()),
            repo="local/spyre",
            run_id=str(uuid.uuid4().int % 10**9),
            run_attempt="1",
            job_name="spyre",
        )
        with session_scope(self.url) as session:
            dispatch_pk = None if delivery is None else self._dispatch(session, delivery)
            job, created = create_job(
                session,
                key=key,
                dispatch_pk=dispatch_pk,
                event_type="pull_request",
                workflow_name="spyre-upstream-tests",
                url="http://relay/api/v1/jobs/x",
                head_sha=head,
                pr_number=pr,
                shards=plan.shards,
                shard_seconds=plan.shard_seconds,
                selection=plan.stored(),
            )
            assert created
            if upstream is not None:  # as the plan stage records it
                job.upstream_under_test = plan.upstream.model_dump(mode="json")
                session.commit()
            return int(job.id)

    @staticmethod
    def _dispatch(session: Any, delivery_id: str) -> int:
        from sqlalchemy import select

        from store.downstreams import ensure_downstream
        from store.models import Delivery, Dispatch

        delivery_pk = session.scalar(select(Delivery.id).where(Delivery.delivery_id == delivery_id))
        downstream = ensure_downstream(
            session, repo="local/spyre", level="L2", device="spyre", policy={}
        )
        dispatch = Dispatch(delivery_pk=delivery_pk, downstream_pk=downstream.id)
        session.add(dispatch)
        session.flush()
        return int(dispatch.id)

    def result(self, job_pk: int, test_id: str, outcome: str, **kw: Any) -> None:
        from store.db import session_scope
        from store.outcomes import TestOutcome
        from store.results import store_result

        with session_scope(self.url) as session:
            assert store_result(
                session, job_pk=job_pk, shard_pk=None, outcome=TestOutcome(test_id, outcome, **kw)
            )

    def move(self, job_pk: int, to: str, conclusion: str | None = None) -> None:
        from store.db import session_scope
        from store.jobs import transition
        from store.models import Conclusion, Job, JobStatus

        with session_scope(self.url) as session:
            job = session.get(Job, job_pk)
            assert job is not None
            assert transition(
                session,
                job=job,
                to=JobStatus(to),
                expect=set(JobStatus),
                source="test",
                conclusion=Conclusion(conclusion) if conclusion else None,
            )
