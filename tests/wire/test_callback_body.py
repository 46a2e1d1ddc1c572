from __future__ import annotations

from datetime import UTC, datetime

import pytest

from wire.crcr.callback import TestCounts, build, hud_envelope

T0 = datetime(2026, 11, 29, 12, 0, 5, tzinfo=UTC)


def _base(**kw: object) -> dict:
    args = dict(
        event_type="push",
        delivery_id="d-1",
        payload={"after": "abc"},
        workflow_name="wf",
        url="http://x/run/7",
        run_id="7",
        run_attempt="2",
        job_name="spyre",
    )
    args.update(kw)
    return args


def test_in_progress_body() -> None:
    body = build(**_base(status="in_progress", started_at=T0))
    assert body == {
        "event_type": "push",
        "delivery_id": "d-1",
        "payload": {"after": "abc"},
        "workflow": {
            "schema_version": "1",
            "status": "in_progress",
            "conclusion": None,
            "name": "wf",
            "url": "http://x/run/7",
            "run_id": "7",
            "run_attempt": "2",
            "job_name": "spyre",
            "check_run_id": "7-2",
            "started_at": "2026-11-29T12:00:05Z",
        },
    }


def test_completed_body_with_counts_and_check_run() -> None:
    body = build(
        **_base(
            status="completed",
            completed_at=T0,
            conclusion="failure",
            check_run_id="99",
            test_results=TestCounts(passed=3, failed=1, skipped=2, total=6),
            artifact_url="http://a",
        )
    )
    wf = body["workflow"]
    assert wf["check_run_id"] == "99" and wf["completed_at"] == "2026-11-29T12:00:05Z"
    assert "started_at" not in wf
    assert wf["test_results"] == {"passed": 3, "failed": 1, "skipped": 2, "total": 6}
    assert wf["artifact_url"] == "http://a"


def test_inconsistent_bodies_are_refused() -> None:
    with pytest.raises(ValueError, match="no conclusion"):
        build(**_base(status="in_progress", started_at=T0, conclusion="success"))
    with pytest.raises(ValueError, match="has a conclusion"):
        build(**_base(status="completed", completed_at=T0))


def test_hud_envelope_takes_identity_only_from_trusted() -> None:
    env = hud_envelope(
        verified_repo="org/r",
        level="L2",
        callback_body={"x": 1},
        queue_time=3.0,
        execution_time=None,
    )
    assert env == {
        "trusted": {
            "verified_repo": "org/r",
            "downstream_repo_level": "L2",
            "ci_metrics": {"queue_time": 3.0},
        },
        "untrusted": {"callback_payload": {"x": 1}},
    }
