"""A change nothing here can test (a pull request with no upstream checkout and no head wheel)
runs nothing and concludes ``neutral`` at once with the reason, through the real loop: signed
webhook, the default planner, the report stage, the CRCR callback."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

REASON = (
    "no upstream checkout (RELAY_UPSTREAM_PATH) and no head wheel (RELAY_HEAD_WHEEL): "
    "the change cannot be tested here"
)
TOKEN = "callback-token-for-neutral"


@pytest.mark.timeout(300)
def test_a_pull_request_without_checkout_concludes_neutral_with_the_reason(
    relay_up: Any, receiver: Any, tmp_path: Any
) -> None:
    env = {
        "RELAY_RUNNER_ENABLED": "true",  # the default planner: no RELAY_PLANNER
        "RELAY_CALLBACK_URL": receiver.url,
        "RELAY_CALLBACK_TOKEN": TOKEN,
        "RELAY_EVENT_HANDLERS": "[]",
        "RELAY_WARM_POOL_AT_BOOT": "false",
    }
    with relay_up.running("sqlite+embedded", tmp_path, extra_env=env) as stack:
        delivery_id = stack.submit(relay_up.pull_request())
        job = stack.wait_job(delivery_id, timeout=60)
        assert (job.status, job.conclusion, job.tests_total) == ("completed", "neutral", 0)
        detail = httpx.get(f"{stack.base_url}/api/v1/jobs/{job.id}").json()
        assert detail["shards"] == [] and detail["planned"] == 0
        tested = detail["upstream_under_test"]
        assert (tested["kind"], tested["reason"]) == ("none", REASON)
        assert tested["summary"] == f"nothing run: {REASON}"
        done = stack.wait_for(
            lambda: (
                [
                    c
                    for c in receiver.calls
                    if c.body["delivery_id"] == delivery_id
                    and c.body["workflow"]["status"] == "completed"
                ]
                or None
            ),
            what="the completed callback",
        )
    workflow = done[0].body["workflow"]
    # CRCR's schema has no neutral: neither green nor red, and the summary says why
    assert workflow["conclusion"] == "cancelled"
    assert workflow["summary"] == f"upstream under test: nothing run: {REASON}"
    assert workflow["test_results"] == {"passed": 0, "failed": 0, "skipped": 0, "total": 0}
