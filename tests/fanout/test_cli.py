"""`relay downstreams` and `relay dispatch list|retry`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner


def test_relay_downstreams_lists_and_decides(
    tmp_path: Path, example_events: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cli import build_app
    from config.settings import reset_settings_cache

    allow, policy = tmp_path / "allow.yml", tmp_path / "policy.yml"
    allow.write_text(
        "L1:\n  - org/a\nL2:\n  - org/b: {events: [push]}\nL3:\n  spyre:\n    org/c: []\n"
    )
    policy.write_text("downstreams:\n  org/c:\n    drafts: false\n    max_in_flight: 2\n")
    monkeypatch.setenv("RELAY_ALLOWLIST_SOURCE", str(allow))
    reset_settings_cache()
    runner = CliRunner()
    out = runner.invoke(
        build_app(),
        [
            "downstreams",
            "--policy",
            str(policy),
            "--event",
            str(example_events / "pull_request.opened.json"),
        ],
    )
    assert out.exit_code == 0, out.output
    lines = out.output.strip().splitlines()
    assert lines == [
        "L1 org/a device=- events=all target=github timeouts=3600s/21600s -> dispatch: admitted",
        "L2 org/b device=- events=push target=github timeouts=3600s/21600s "
        "-> skip: the allowlist gives org/b only push",
        "L3 org/c device=spyre events=all target=github no-drafts max-in-flight=2 "
        "timeouts=3600s/21600s -> dispatch: admitted",
        "3 downstream repositories",
    ]
    policy.write_text("downstreams:\n  org/zzz: {}\n")
    bad = runner.invoke(build_app(), ["downstreams", "--policy", str(policy)])
    assert bad.exit_code == 1
    assert f"error: {policy}:2: 'org/zzz' is not in the allowlist" in bad.output
    reset_settings_cache()


def test_relay_dispatch_list_and_retry(
    bench: Callable[..., Any],
    example_events: Path,
    monkeypatch: pytest.MonkeyPatch,
    github_answers: Any,
) -> None:
    from cli import build_app
    from config.settings import reset_settings_cache

    b = bench({"L2": ["org/a"]})
    b.github.script("org/a", *[github_answers.server_error(500)] * 4)
    payload = json.loads((example_events / "pull_request.opened.json").read_text())
    assert b.post("pull_request", payload, delivery_id="cli-1").status_code == 202
    b.settle()
    monkeypatch.setenv("RELAY_DATABASE_URL", b.settings.database_url)
    reset_settings_cache()
    runner = CliRunner()
    listed = runner.invoke(build_app(), ["dispatch", "list", "--state", "dead"])
    assert listed.exit_code == 0, listed.output
    (line,) = listed.output.strip().splitlines()
    pk = int(line.split()[0])
    assert line.startswith(f"{pk} dead org/a delivery=cli-1 attempts=4 http=500 4 attempts spent")
    out = runner.invoke(build_app(), ["dispatch", "retry", str(pk)])
    assert (out.exit_code, out.output.strip()) == (0, f"dispatch {pk} is back in the outbox")
    again = runner.invoke(build_app(), ["dispatch", "retry", str(pk)])
    assert again.exit_code == 1 and f"dispatch {pk} is not a dead letter" in again.output
    b.settle()
    assert b.states() == {"org/a": "sent"}
    reset_settings_cache()
