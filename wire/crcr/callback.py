"""CRCR callback bodies, schema "1" (see reference/crcr.md).

A callback echoes the dispatch's ``client_payload`` keys (``event_type``, ``delivery_id``,
``payload``) and adds a ``workflow`` object. ``conclusion`` is null while in progress;
``started_at`` is sent with ``in_progress`` and ``completed_at`` with ``completed``;
``check_run_id`` falls back to ``"<run_id>-<run_attempt>"``; ``run_attempt`` is a string.
``summary`` (optional, ours, beside schema "1": a receiver ignores what it does not know) says in
a few lines why a job failed before it ran tests (on ``completed``, first) and what the run
tested (the upstream under test).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from wire.values import Count, Text

SCHEMA_VERSION = "1"


class TestCounts(BaseModel):
    __test__ = False

    passed: Count = 0
    failed: Count = 0
    skipped: Count = 0
    total: Count = 0


class Workflow(BaseModel):
    schema_version: Literal["1"] = "1"
    status: Literal["in_progress", "completed"]
    conclusion: Literal["success", "failure", "cancelled", "timed_out"] | None = None
    name: Text
    url: Text
    run_id: Text
    run_attempt: Text
    job_name: Text
    check_run_id: Text
    started_at: Text | None = None
    completed_at: Text | None = None
    test_results: TestCounts | None = None
    artifact_url: Text | None = None
    # what the run tested, one line (optional; a relay shows it on the check run)
    summary: Text | None = Field(default=None, max_length=2000)


class CallbackBody(BaseModel):
    event_type: Text
    delivery_id: Text
    payload: dict[str, Any]
    workflow: Workflow = Field(...)


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def build(
    *,
    event_type: str,
    delivery_id: str,
    payload: dict[str, Any],
    status: Literal["in_progress", "completed"],
    workflow_name: str,
    url: str,
    run_id: str,
    run_attempt: str,
    job_name: str,
    check_run_id: str | None = None,
    started_at: datetime | None = None,
    completed_at: datetime | None = None,
    conclusion: Literal["success", "failure", "cancelled", "timed_out"] | None = None,
    test_results: TestCounts | None = None,
    artifact_url: str | None = None,
    summary: str | None = None,
) -> dict[str, Any]:
    """The JSON body of one callback, with only the fields CRCR defines for that status."""
    if status == "in_progress" and (conclusion is not None or started_at is None):
        raise ValueError("an in_progress callback has started_at and no conclusion")
    if status == "completed" and (conclusion is None or completed_at is None):
        raise ValueError("a completed callback has a conclusion and completed_at")
    workflow = Workflow(
        status=status,
        conclusion=conclusion,
        name=workflow_name,
        url=url,
        run_id=str(run_id),
        run_attempt=str(run_attempt),
        job_name=job_name,
        check_run_id=check_run_id or f"{run_id}-{run_attempt}",
        started_at=_iso(started_at) if status == "in_progress" and started_at else None,
        completed_at=_iso(completed_at) if status == "completed" and completed_at else None,
        test_results=test_results,
        artifact_url=artifact_url,
        summary=summary[:2000] if summary else None,
    )
    body = CallbackBody(
        event_type=event_type, delivery_id=delivery_id, payload=payload, workflow=workflow
    )
    return body.model_dump(mode="json", exclude_none=False) | {
        "workflow": workflow.model_dump(mode="json", exclude_none=True) | {"conclusion": conclusion}
    }


def hud_envelope(
    *,
    verified_repo: str,
    level: str,
    callback_body: dict[str, Any],
    queue_time: float | None,
    execution_time: float | None,
) -> dict[str, Any]:
    """The relay -> HUD envelope: identity only in ``trusted``."""
    metrics = {
        k: v
        for k, v in {"queue_time": queue_time, "execution_time": execution_time}.items()
        if v is not None
    }
    return {
        "trusted": {
            "verified_repo": verified_repo,
            "downstream_repo_level": level,
            "ci_metrics": metrics,
        },
        "untrusted": {"callback_payload": callback_body},
    }
