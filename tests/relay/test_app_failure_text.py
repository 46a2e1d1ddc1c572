"""``GET /runs/{job}/artifacts/{id}`` serves a failing test's full failure text from the
database: written by a worker on another host (whose scratch is gone since), read by an API whose
disk never had the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from config.settings import Settings
from store import jobs, migrate, results
from store.db import session_scope
from store.jobs import JobKey
from store.models import TestResult
from store.outcomes import Outcome, TestOutcome
from workers.run import with_failure_text


def test_another_host_serves_the_failure_text(tmp_path: Path, make_client: Any) -> None:
    url = f"sqlite:///{tmp_path / 'relay.sqlite'}"
    migrate.upgrade(url)
    with session_scope(url) as s:
        job, _ = jobs.create_job(
            s,
            key=JobKey("d", "local/spyre", "1", "1", "spyre"),
            dispatch_pk=None,
            event_type="pull_request",
            workflow_name="w",
            url="",
            head_sha=None,
            pr_number=1,
            shards=[["t::a"]],
            selection={"plan": {}},
        )
        job_pk = job.id
    scratch = tmp_path / "hostB-var" / "runs" / f"job-{job_pk}" / "shard-0-attempt-1" / "artifacts"
    scratch.mkdir(parents=True)
    text = "t::a\n\nTraceback (most recent call last):\nAssertionError: arithmetic is broken\n"
    (scratch / "a.txt").write_text(text)
    outcome = TestOutcome("t::a", Outcome.FAILED, artifact_path=str(scratch / "a.txt"))
    with session_scope(url) as s:
        results.store_results(
            s, job_pk=job_pk, shard_pk=None, outcomes=[with_failure_text(outcome, 4096)]
        )
        result_id = s.scalar(select(TestResult.id).where(TestResult.job_pk == job_pk))
    (scratch / "a.txt").unlink()  # the worker's scratch is gone; host A never had it
    client = make_client(Settings(var_dir=tmp_path / "hostA-var", database_url=url))
    served = client.get(f"/runs/{job_pk}/artifacts/{result_id}")
    assert served.status_code == 200 and served.text == text
    assert client.get(f"/runs/{job_pk + 1}/artifacts/{result_id}").status_code == 404
    assert client.get(f"/runs/{job_pk}/artifacts/{result_id + 99}").status_code == 404

    # a result stored before the database kept the text: said so, not served from a disk
    with session_scope(url) as s:
        s.execute(
            TestResult.__table__.update()
            .where(TestResult.id == result_id)
            .values(failure_text=None)
        )
        s.commit()
    old = client.get(f"/runs/{job_pk}/artifacts/{result_id}")
    assert old.status_code == 404 and "not stored" in old.text
