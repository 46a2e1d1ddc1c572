from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from wire.github.events import EventError, normalize, unwrap_dispatch
from wire.github.signature import sign, verify


def test_github_docs_vector() -> None:
    assert sign("It's a Secret to Everybody", b"Hello, World!") == (
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    )


def test_verify_any_of_several_secrets() -> None:
    body = b"{}"
    header = sign("second", body)
    assert verify([b"first", b"second"], body, header)
    assert not verify([b"first"], body, header)
    assert not verify([b"second"], body + b" ", header)
    assert not verify([b"second"], body, header.replace("sha256=", "sha1="))
    assert not verify([b"second"], body, "sha256=\u00e9")


@pytest.fixture
def load(github_fixtures: Path) -> Any:
    """``load(name)``: one of tests/data/github's payloads, parsed."""

    def read(name: str) -> dict[str, Any]:
        return dict(json.loads((github_fixtures / name).read_bytes()))

    return read


def test_pull_request_closed_merged(load: Any) -> None:
    p = load("pull_request/closed.payload.json")
    e = normalize(event="pull_request", payload=p, delivery_id="d")
    assert e.action == "closed" and e.merged == bool(p["pull_request"]["merged"])
    p["pull_request"]["merged"] = False
    p["pull_request"]["labels"] = [{"name": "Merged"}]
    assert normalize(event="pull_request", payload=p, delivery_id="d").merged is True


def test_labeled_is_actionable_only_for_ciflow_crcr_labels(load: Any) -> None:
    p = load("pull_request/labeled.payload.json")
    e = normalize(event="pull_request", payload=p, delivery_id="d")
    assert e.actionable is False and "ciflow/crcr/" in e.reason
    p["label"]["name"] = "ciflow/crcr/spyre"
    assert normalize(event="pull_request", payload=p, delivery_id="d").actionable is True


def test_push(load: Any) -> None:
    p = load("push/with-new-branch.payload.json")
    e = normalize(event="push", payload=p, delivery_id="d")
    assert (e.ref, e.after_sha, e.before_sha) == (p["ref"], p["after"], p["before"])


def test_missing_fields_are_event_errors(load: Any) -> None:
    p = load("pull_request/opened.payload.json")
    del p["pull_request"]["head"]
    with pytest.raises(EventError, match=r"pull_request\.head\.sha|head\.sha"):
        normalize(event="pull_request", payload=p, delivery_id="d")
    with pytest.raises(EventError, match="unsupported event"):
        normalize(event="issues", payload={"repository": {"full_name": "a/b"}}, delivery_id="d")


def test_unwrap_dispatch(load: Any) -> None:
    assert unwrap_dispatch(load("repository_dispatch/payload.json")) is None
    inner = {"repository": {"full_name": "a/b"}}
    assert unwrap_dispatch(
        {"client_payload": {"event_type": "push", "delivery_id": "x", "payload": inner}}
    ) == ("push", "x", inner)
