"""A test that could not run gates: a test module that fails to import (a helper renamed under it,
the commonest way upstream breaks a backend's run), selected as mandatory, turns its job red with
the import error as its tests' message; the same module planned as ``xfail`` does not gate; tests
a cancelled run never finished stay neutral.

In process where it can be: the real shard harness (pytest children) over a small suite, its
results stored in a migrated SQLite database under a job planned with those spec modes, and the
job concluded by the report stage's own rule.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy import select

from store import jobs, migrate
from store import results as result_rows
from store.db import session_scope
from store.models import Conclusion, Job, TestResult
from workers.harness.launchers import FreshProcessLauncher
from workers.harness.runner import run_shard

HELPERS = "def renamed_helper_v2():\n    return 1\n"  # the helper the test module imports is gone
BROKEN = (
    "from suite_helpers import renamed_helper\n\n\n"
    "def test_add():\n    assert renamed_helper() == 1\n\n\n"
    "def test_mul():\n    assert renamed_helper() == 1\n"
)
FINE = (
    "import os\nimport time\n\n\n"
    "def test_passes():\n    pass\n\n\n"
    "def test_waits():\n"
    "    open(os.environ['SUITE_WAITING'], 'w').close()\n"
    "    time.sleep(120)\n"
)
ADD, MUL = "test_broken.py::test_add", "test_broken.py::test_mul"
PASSES, WAITS = "test_fine.py::test_passes", "test_fine.py::test_waits"
IMPORT_ERROR = "ImportError: cannot import name 'renamed_helper' from 'suite_helpers'"


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    root = tmp_path / "suite"
    root.mkdir()
    (root / "suite_helpers.py").write_text(HELPERS)
    (root / "test_broken.py").write_text(BROKEN)
    (root / "test_fine.py").write_text(FINE)
    return root


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'relay.sqlite'}"
    migrate.upgrade(url)
    return url


def _planned_job(database_url: str, modes: dict[str, str]) -> int:
    """A job whose plan selected ``modes``' tests with those spec modes, in one shard."""
    rows = [
        {
            "kind": "selected",
            "test_id": test_id,
            "rank": rank,
            "shard": 0,
            "mode": mode,
            "gating": mode != "xfail",
            "signals": [],
            "reasons": [],
        }
        for rank, (test_id, mode) in enumerate(modes.items())
    ]
    key = jobs.JobKey(uuid.uuid4().hex, "local/spyre", "1", "1", "spyre")
    with session_scope(database_url) as session:
        job, _ = jobs.create_job(
            session,
            key=key,
            dispatch_pk=None,
            event_type="pull_request",
            workflow_name="relay",
            url="",
            head_sha="0" * 40,
            pr_number=1,
            shards=[list(modes)],
            selection={"plan": {}, "variants": rows},
        )
        return job.id


def _run_and_conclude(
    database_url: str, suite: Path, modes: dict[str, str], *, stop_when_waiting: bool = False
) -> tuple[Conclusion, dict[str, TestResult]]:
    job_pk = _planned_job(database_url, modes)
    waiting = suite / "waiting"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        "SUITE_WAITING": str(waiting),
    }
    launcher = FreshProcessLauncher(cwd=suite, env=env)
    try:
        run = run_shard(
            list(modes),
            launcher=launcher,
            pytest_args=["--rootdir", str(suite)],
            per_test_timeout=300,
            workdir=suite / f"work-{job_pk}",
            should_stop=(lambda: waiting.exists()) if stop_when_waiting else None,
        )
    finally:
        launcher.close()
    with session_scope(database_url) as session:
        result_rows.store_results(session, job_pk=job_pk, shard_pk=None, outcomes=run.results)
        job = session.get(Job, job_pk)
        assert job is not None
        conclusion = jobs.conclude(session, job=job)
        results = session.scalars(select(TestResult).where(TestResult.job_pk == job_pk))
        return conclusion, {r.test_id: r for r in results}


def test_a_mandatory_test_whose_module_fails_to_import_gates_red_with_the_import_error(
    database_url: str, suite: Path
) -> None:
    modes = {ADD: "mandatory_success", MUL: "xfail_strict", PASSES: "mandatory_success"}
    conclusion, results = _run_and_conclude(database_url, suite, modes)
    assert {t: r.outcome for t, r in results.items()} == {
        ADD: "error",
        MUL: "error",
        PASSES: "passed",
    }
    for test_id in (ADD, MUL):
        message = results[test_id].message or ""
        assert message.startswith(f"collection failed: {IMPORT_ERROR}"), message
        assert "test_broken.py" in message
    assert conclusion is Conclusion.FAILURE
    with session_scope(database_url) as session:
        assert result_rows.gating_failures(session, job_pk=results[ADD].job_pk) == 2


def test_the_same_module_planned_as_xfail_does_not_gate(database_url: str, suite: Path) -> None:
    modes = {ADD: "xfail", MUL: "xfail", PASSES: "mandatory_success"}
    conclusion, results = _run_and_conclude(database_url, suite, modes)
    assert results[ADD].outcome == "error" and IMPORT_ERROR in (results[ADD].message or "")
    assert conclusion is Conclusion.SUCCESS


def test_tests_a_cancelled_run_never_finished_stay_neutral(database_url: str, suite: Path) -> None:
    modes = {PASSES: "mandatory_success", WAITS: "mandatory_success"}
    conclusion, results = _run_and_conclude(database_url, suite, modes, stop_when_waiting=True)
    assert results[PASSES].outcome == "passed"
    assert results[WAITS].outcome == "not_run"
    assert results[WAITS].message == "cancelled while it ran"
    assert conclusion is Conclusion.SUCCESS
