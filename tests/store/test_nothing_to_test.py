"""A change no test of the backend can observe concludes ``success`` with the reason stored:
files changed but only comments or formatting (no definition's AST differs), or every change
unit was accounted for by a signal and reaches no variant this backend runs (e.g. a helper of an
op the universe has no variant of). A plan that is a fallback, whose budget cut what the change
reaches, or for an event with no changed file still concludes ``failure`` (nothing ran)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from store import jobs, migrate
from store.db import session_scope
from store.models import Conclusion, Job
from store.selections import nothing_to_test

UNIT = "torch/_decomp/decompositions.py::_sum_tensors_uint8"
WHY = "operators: ops aten._sum_tensors_uint8:0"


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'relay.sqlite'}"
    migrate.upgrade(url)
    return url


def _job(
    database_url: str,
    *,
    changes: dict[str, int],
    fallback: bool = False,
    cut: int = 0,
    explained: dict[str, list[str]] | None = None,
) -> tuple[Conclusion, str | None]:
    """The conclusion of a job whose stored plan selected no test, and the reason it gives."""
    selection: dict[str, Any] = {
        "stage_counts": {
            "changes": changes,
            "impact": {"in": changes["out"], "out": cut},
            "budget": {"in": cut, "out": 0},
        },
        "fallbacks": [],
        "plan": {
            "fallback": fallback,
            "explained": explained or {},
            "counts": {"selected": 0, "cut": cut, "removed": 0},
        },
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
        return jobs.conclude(session, job=stored), nothing_to_test(session, job=stored)


def test_a_comment_only_change_plans_nothing_and_concludes_success(database_url: str) -> None:
    conclusion, reason = _job(database_url, changes={"in": 1, "out": 0})
    assert conclusion is Conclusion.SUCCESS
    assert reason == (
        "nothing to test: only comments or formatting changed (no definition's AST differs)"
    )


def test_units_that_reach_no_variant_of_the_backend_conclude_success_saying_why(
    database_url: str,
) -> None:
    conclusion, reason = _job(database_url, changes={"in": 1, "out": 1}, explained={UNIT: [WHY]})
    assert conclusion is Conclusion.SUCCESS
    assert reason == (
        "nothing to test: the change's 1 unit(s) reach no variant this backend runs: "
        f"_sum_tensors_uint8 ({WHY})"
    )


@pytest.mark.parametrize(
    ("changes", "fallback", "cut"),
    [
        ({"in": 1, "out": 2}, False, 3),  # the budget cut what the change reaches
        ({"in": 0, "out": 0}, False, 0),  # no file changed: nothing says there is nothing to test
        ({"in": 1, "out": 0}, True, 0),  # a fallback
        ({"in": 1, "out": 2}, True, 0),
    ],
)
def test_nothing_ran_for_a_cut_plan_a_fallback_or_no_change_is_a_failure(
    database_url: str, changes: dict[str, int], fallback: bool, cut: int
) -> None:
    conclusion, reason = _job(
        database_url, changes=changes, fallback=fallback, cut=cut, explained={UNIT: [WHY]}
    )
    assert (conclusion, reason) == (Conclusion.FAILURE, None)
