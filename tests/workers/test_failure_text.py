"""Everything a reader needs is in the database: a failing test's full failure text is read from
the worker's scratch, capped (RELAY_FAILURE_TEXT_MAX_BYTES) and stored with its result
(tests/relay/test_app_failure_text.py: any host serves it); a shard's scratch folder goes once its shard is stored (RELAY_RUNS_KEEP_SECONDS keeps it longer),
never while the shard may still resume from it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from config.settings import Settings
from store import jobs, migrate, scheduling
from store.db import session_scope
from store.jobs import JobKey
from store.models import ShardState
from store.outcomes import Outcome, TestOutcome, capped_text
from workers.run import prune_scratch, with_failure_text


def test_capped_text_keeps_head_and_tail_and_no_nul() -> None:
    assert capped_text("short\x00text", 1024) == "short\\x00text"
    long = "HEAD" + "x" * 10_000 + "the assertion at the end"
    cut = capped_text(long, 2048)
    assert len(cut.encode()) <= 2048
    assert cut.startswith("HEAD") and cut.endswith("the assertion at the end")
    assert "bytes cut: RELAY_FAILURE_TEXT_MAX_BYTES is 2048" in cut
    assert capped_text("é" * 5000, 1024).encode("utf-8")  # never splits a character badly


def test_the_artifact_text_is_carried_with_the_outcome(tmp_path: Path) -> None:
    artifact = tmp_path / "a.txt"
    artifact.write_text("t::a\n\nTraceback ...\nAssertionError: arithmetic is broken\n")
    failed = TestOutcome("t::a", Outcome.FAILED, artifact_path=str(artifact))
    assert with_failure_text(failed, 1024).failure_text == artifact.read_text()
    passed = TestOutcome("t::b", Outcome.PASSED)
    assert with_failure_text(passed, 1024) is passed
    gone = TestOutcome("t::c", Outcome.FAILED, artifact_path=str(tmp_path / "gone.txt"))
    assert "could not be read on the worker" in (with_failure_text(gone, 1024).failure_text or "")


def _settings(tmp_path: Path, **values: object) -> Settings:
    url = f"sqlite:///{tmp_path / 'relay.sqlite'}"
    migrate.upgrade(url)
    return Settings(var_dir=tmp_path / "hostB-var", database_url=url, **values)  # type: ignore[arg-type]


def _job(settings: Settings, shard_ids: list[list[str]]) -> int:
    with session_scope(settings.database_url) as s:
        job, _ = jobs.create_job(
            s,
            key=JobKey("d", "local/spyre", "1", "1", "spyre"),
            dispatch_pk=None,
            event_type="pull_request",
            workflow_name="w",
            url="",
            head_sha=None,
            pr_number=1,
            shards=shard_ids,
            selection={"plan": {}},
        )
        return job.id


def test_scratch_goes_when_its_shard_is_stored_not_before(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    job_pk = _job(settings, [["t::a"], ["t::b"]])
    with session_scope(settings.database_url) as s:
        first = scheduling.claim_next(s, owner="h:1:t1", task_id="t1").shard
        assert first is not None
        first_pk, first_index = first.id, first.index
        second = scheduling.claim_next(s, owner="h:1:t2", task_id="t2").shard
        assert second is not None
        second_index = second.index
    runs = settings.var_dir / "runs" / f"job-{job_pk}"
    done = runs / f"shard-{first_index}-attempt-1"
    running = runs / f"shard-{second_index}-attempt-1"
    for folder in (done, running):
        folder.mkdir(parents=True)
        (folder / "events-1.jsonl").write_text("{}\n")
    assert prune_scratch(settings) == 0  # both shards still running: nothing goes
    with session_scope(settings.database_url) as s:
        jobs.finish_shard(s, shard_pk=first_pk, state=ShardState.DONE)
    keep = Settings(
        var_dir=settings.var_dir, database_url=settings.database_url, runs_keep_seconds=3600
    )
    assert prune_scratch(keep) == 0 and done.is_dir()  # kept an hour: not yet
    old = time.time() - 7200
    os.utime(done, (old, old))
    assert prune_scratch(keep) == 1 and not done.exists()
    (runs / f"shard-{first_index}-attempt-2").mkdir()
    assert prune_scratch(settings) == 1  # RELAY_RUNS_KEEP_SECONDS=0: at once
    assert running.is_dir() and runs.is_dir()  # the running shard's stays, and its job's folder
