"""A change with no unit a test could observe (files changed, but only comments or formatting:
no definition's AST differs) plans no test and concludes ``success``; a plan that selected no
test for a change that has units, or a fallback, still concludes ``failure`` (nothing ran)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from store import jobs, migrate
from store.db import session_scope
from store.models import Conclusion, Job


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'relay.sqlite'}"
    migrate.upgrade(url)
    return url


def _conclusion(
    database_url: str, *, changes: dict[str, int], fallback: bool = False
) -> Conclusion:
    selection: dict[str, Any] = {
        "stage_counts": {"changes": changes, "impact": {"in": changes["out"], "out": 0}},
        "fallbacks": [],
        "plan": {"fallback": fallback},
        "variants": [],
    }
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
            shards=[],
            selection=selection,
        )
        stored = session.get(Job, job.id)
        assert stored is not None and not stored.tests_total
        return jobs.conclude(session, job=stored)


def test_a_comment_only_change_plans_nothing_and_concludes_success(database_url: str) -> None:
    assert _conclusion(database_url, changes={"in": 1, "out": 0}) is Conclusion.SUCCESS


@pytest.mark.parametrize(
    ("changes", "fallback"),
    [({"in": 1, "out": 2}, False), ({"in": 0, "out": 0}, False), ({"in": 1, "out": 0}, True)],
)
def test_nothing_ran_for_a_change_with_units_or_a_fallback_is_a_failure(
    database_url: str, changes: dict[str, int], fallback: bool
) -> None:
    assert _conclusion(database_url, changes=changes, fallback=fallback) is Conclusion.FAILURE
