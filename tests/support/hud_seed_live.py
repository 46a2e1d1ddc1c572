"""Seeded runs for the HUD's tests, screenshots and benchmark beyond :mod:`tests.support.hud_seed`'s
history: a run still in progress (:func:`seed_live_run`), a release replay
(:func:`seed_replay`) and one big run (:func:`seed_big_run`), written through the ORM into a
migrated database."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import insert, select

from store import evalreports
from store.db import session_scope
from store.models import (
    Downstream,
    Job,
    JobTransition,
    Shard,
    TestResult,
    utcnow,
)
from tests.support.hud_seed import (
    RUNNER,
    add_delivery,
    add_job,
    add_live_job,
    sha_of,
    shards_and_results,
    test_id,
)


@dataclass
class LiveRun:
    """A job that runs while a test watches it: :meth:`advance` stores the next results of a
    shard the way the harness does (one row per finished test), :meth:`finish` concludes it."""

    database_url: str
    job_id: int
    shard_pks: list[int]
    done: dict[int, int] = field(default_factory=dict)  # shard index -> results stored

    def advance(self, shard: int, count: int, *, outcome: str = "passed") -> None:
        with session_scope(self.database_url) as session:
            row = session.get(Shard, self.shard_pks[shard])
            assert row is not None
            start = self.done.get(shard, 0)
            ids = list(row.test_ids)[start : start + count]
            session.execute(
                insert(TestResult),
                [
                    {
                        "job_pk": self.job_id,
                        "shard_pk": row.id,
                        "test_id": tid,
                        "outcome": outcome,
                        "duration_s": 0.1,
                        "device_time_us": 21.0,
                        "spec_mode": "mandatory_success",
                        "tags": [],
                        "op": "add",
                        "dtype": "float16",
                    }
                    for tid in ids
                ],
            )
            if start + len(ids) >= len(row.test_ids):
                row.state = "done"
            session.commit()
            self.done[shard] = start + len(ids)

    def finish(self, conclusion: str = "success") -> None:
        with session_scope(self.database_url) as session:
            job = session.get(Job, self.job_id)
            assert job is not None
            at = utcnow()
            session.add(
                JobTransition(
                    job_pk=job.id,
                    from_status=job.status,
                    to_status="completed",
                    conclusion=conclusion,
                    at=at,
                    source="seed",
                )
            )
            job.status, job.conclusion, job.completed_at = "completed", conclusion, at
            session.commit()


def seed_live_run(database_url: str, *, key: str, tests: int = 20) -> LiveRun:
    """A new running job on the runner (two shards of ``tests / 2``) started now."""
    with session_scope(database_url) as session:
        runner = session.scalar(select(Downstream).where(Downstream.repo == RUNNER))
        assert runner is not None, "seed_runs first"
        job, shards = add_live_job(
            session,
            key=key,
            now=utcnow(),
            downstream_pk=runner.id,
            tests=tests,
            runner_root="/srv/crcr-relay",
        )
        session.commit()
        return LiveRun(database_url=database_url, job_id=job.id, shard_pks=shards)


def seed_replay(database_url: str, *, now: datetime, var_dir: Path, tests: int = 48) -> int:
    """A finished release replay (2.13 -> 2.14, event ``periodic``) and a recall report of
    ``relay eval`` in the database (as the command stores it); returns its job id."""
    with session_scope(database_url) as session:
        at = now - timedelta(days=1)
        job = add_job(
            session,
            repo=RUNNER,
            key="replay-2.13-2.14",
            event="periodic",
            dispatched=at,
            queue_s=60,
            e2e_s=1800,
            head_sha="v2.14.1",
            planned=tests,
            counts=(tests - 3, 3, 0),
            conclusion="failure",
        )
        shards_and_results(
            session,
            job,
            n=tests,
            fails=[test_id(3), test_id(11), test_id(19)],
            artifacts=var_dir / "artifacts",
            runner_root="/srv/crcr-relay",
        )
        session.commit()
        job_id = job.id
        evalreports.save(
            session,
            name="report-release.md",
            kind="release",
            text="# Release replay 2.13 -> 2.14 (seeded)\n\n"
            "| selector | selected | failures found | recall |\n|---|---:|---:|---:|\n"
            "| four stages | 48 | 3 of 3 | 100.0 % |\n| budget 60 s | 30 | 2 of 3 | 66.7 % |\n",
        )
    return job_id


def seed_big_run(database_url: str, *, now: datetime, results: int, key: str, var_dir: Path) -> int:
    """One finished push job with ``results`` results (every 50th failing): the run page's
    benchmark; returns its job id."""
    with session_scope(database_url) as session:
        runner = session.scalar(select(Downstream).where(Downstream.repo == RUNNER))
        if runner is None:
            runner = Downstream(repo=RUNNER, level="L2", device="spyre", enabled=True)
            session.add(runner)
            session.flush()
        dispatch = add_delivery(
            session,
            key=key,
            event="push",
            now=now,
            head_sha=sha_of(key),
            pr=None,
            downstream_pk=runner.id,
        )
        fails = [test_id(i) for i in range(3, results, 50)]
        job = add_job(
            session,
            repo=RUNNER,
            key=key,
            dispatched=now,
            queue_s=30,
            e2e_s=900,
            head_sha=sha_of(key),
            dispatch_pk=dispatch,
            conclusion="failure",
            planned=results,
            counts=(results - len(fails), len(fails), 0),
        )
        shards_and_results(
            session,
            job,
            n=results,
            fails=fails,
            artifacts=var_dir / "artifacts",
            runner_root="/srv/crcr-relay",
        )
        session.commit()
        return job.id
