"""The project's own example deliveries (examples/events, what `relay submit --example` posts)
against an app serving their upstream, pytorch/pytorch: each gets the answer of its case and
normalizes to the event it shows."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = {  # name -> (status, what the stored normalized event says)
    "pull_request.opened": (202, {"action": "opened", "pr_number": 170001, "actionable": True}),
    "pull_request.synchronize": (202, {"action": "synchronize", "actionable": True}),
    "pull_request.labeled": (202, {"action": "labeled", "labels": ["release notes: nn",
                                   "ciflow/crcr/spyre"], "actionable": True}),
    "pull_request.closed": (202, {"action": "closed", "merged": True, "actionable": True}),
    "push.main": (202, {"ref": "refs/heads/main", "actionable": True}),
    "check_run.rerequested": (202, {"action": "rerequested", "pr_number": 170001,
                                    "check_name": "crcr/local/spyre/spyre-upstream-tests/spyre",
                                    "actionable": True}),
    "repository_dispatch.pull_request": (202, {"event": "pull_request", "upstream_delivery_id":
                                               "a4f1c2e0-9b7d-11f0-8e3a-1f2d3c4b5a69"}),
    "ping.hook": (200, None),
}


def test_every_example_is_listed(example_events: Path) -> None:
    assert {p.name.removesuffix(".json") for p in example_events.glob("*.json")} == set(EXAMPLES)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example(
    name: str, example_events: Path, make_webhook: Any, app_settings: Any
) -> None:
    webhook = make_webhook(app_settings.model_copy(update={"upstream_repo": "pytorch/pytorch"}))
    status, expected = EXAMPLES[name]
    body = (example_events / f"{name}.json").read_bytes()
    delivery_id = str(uuid.uuid4())
    response = webhook.post(name.split(".", 1)[0], body, delivery_id=delivery_id)
    assert response.status_code == status, response.text
    if expected is None:
        assert response.json()["ping"] is True
        return
    row = webhook.stored(delivery_id)
    assert row is not None and row.state == "received" and row.normalized is not None
    assert row.normalized["repo"] == "pytorch/pytorch"
    assert {k: row.normalized[k] for k in expected} == expected
    assert json.loads(body)  # the file is JSON as shipped
