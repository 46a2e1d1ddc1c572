"""`relay replay --from A --to B --run`: the release step sent through the broker to a real Celery
worker (`workers.replay`), planned (here by the labelled planner: one passing test), run and
reported; followed through the API over real HTTP."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from cli.relay_client import (
    ReplayError,
    broker_send,
    release_delivery_id,
    run_release_replay,
)
from cli.replay_events import run_command
from config.settings import Settings, reset_settings_cache
from store.db import session_scope
from store.models import Delivery

# The labelled planner never reads the versions, so the fast tests use pairs of their own; the
# real 2.13 -> 2.14 pair is left to the slow test (the relay runs each pair once).
FROM, TO = "1.0", "1.1"


@pytest.fixture(scope="module")
def relay(
    tmp_path_factory: pytest.TempPathFactory, relay_up: Any, sample_runs: Any
) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("replay-run")
    # a periodic event carries no labels: the "default" plan, two quick passing tests
    plans = sample_runs.write_plans(
        tmp,
        {
            "default": {
                "shards": [sample_runs.ids("test_passes_one"), sample_runs.ids("test_passes_two")]
            }
        },
    )
    stack = relay_up.local(
        tmp,
        extra_env={
            "RELAY_RUNNER_ENABLED": "true",
            "RELAY_PLANNER": sample_runs.LABELLED_PLANNER,
            "RELAY_TEST_PLANS": str(plans),
            "RELAY_EVENT_HANDLERS": "[]",
        },
    )
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def configured(relay: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """This process configured like the stack (its broker and database)."""
    monkeypatch.setenv("RELAY_BROKER_URL", relay.broker_url)
    monkeypatch.setenv("RELAY_DATABASE_URL", relay.database_url)
    reset_settings_cache()
    yield Settings()
    reset_settings_cache()


def deliveries(stack: Any, delivery_id: str) -> list[Delivery]:
    with session_scope(stack.database_url) as s:
        rows = list(s.scalars(select(Delivery).where(Delivery.delivery_id == delivery_id)))
        for row in rows:
            s.expunge(row)
        return rows


def test_run_sends_the_replay_and_waits_for_its_conclusion(
    relay: Any, configured: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    run_command(FROM, TO, url=relay.base_url, wait=120, err=False)  # returns: no typer.Exit
    out, err = capsys.readouterr()
    # not a terminal: plain progress lines on stderr, the last one where the run ended
    assert re.fullmatch(
        rf"replay {FROM} -> {TO}: 2 of 2 tests \(100 %\), \d+ s elapsed(, [\d.]+ tests/s)?",
        err.splitlines()[-1],
    ), err
    assert f"sent the release replay {FROM} -> {TO} to the workers (task " in out
    job_line = next(
        line for line in out.splitlines() if line.startswith("job ") and "planned" in line
    )
    job_id = int(job_line.split()[1].rstrip(":"))
    assert f"follow: curl -s {relay.base_url}/api/v1/jobs/{job_id}" in out
    assert f"job {job_id} completed: success; tests passed 2, failed 0, skipped 0, total 2" in out
    # what the workers did, read back: one "periodic" delivery for the pair, its job reported
    (stored,) = deliveries(relay, release_delivery_id(FROM, TO))
    assert (stored.event, stored.source, stored.state) == ("periodic", "replay", "processed")
    assert json.loads(stored.raw_body)["base_version"] == FROM
    job = httpx.get(f"{relay.base_url}/api/v1/jobs/{job_id}").json()
    # the job names the delivery the API serves (and links to it); CRCR's key is the head
    assert (job["event_type"], job["delivery_id"], job["crcr_delivery_id"], job["conclusion"]) == (
        "periodic",
        release_delivery_id(FROM, TO),
        f"v{TO}",
        "success",
    )
    assert job["links"]["delivery"] == f"/api/v1/deliveries/{release_delivery_id(FROM, TO)}"
    assert job["test_results"] == {
        "passed": 2,
        "failed": 0,
        "skipped": 0,
        "xfailed": 0,
        "xpassed": 0,
        "total": 2,
    }

    # a second --run for the same pair sends nothing and follows the same run
    again = run_release_replay(
        FROM,
        TO,
        url=relay.base_url,
        wait=5,
        send=broker_send(configured),
        echo=lambda line: None,
    )
    assert again["already_requested"] is True and "task_id" not in again
    assert (again["job_id"], again["conclusion"]) == (job_id, "success")
    assert len(deliveries(relay, release_delivery_id(FROM, TO))) == 1


def test_without_wait_prints_the_job_and_how_to_follow(relay: Any, configured: Settings) -> None:
    lines: list[str] = []
    result = run_release_replay(
        TO, "1.2", url=relay.base_url, wait=0, send=broker_send(configured), echo=lines.append
    )
    assert result["task_id"] and result["job_id"] and "conclusion" in result
    assert lines[0].startswith(f"sent the release replay {TO} -> 1.2 to the workers")
    assert lines[1].startswith(f"job {result['job_id']}: 2 test(s) planned")
    # the job of this pair, not the earlier one (same event type, another head)
    job = httpx.get(f"{relay.base_url}/api/v1/jobs/{result['job_id']}").json()
    assert (job["delivery_id"], job["crcr_delivery_id"]) == (release_delivery_id(TO, "1.2"), "v1.2")


def test_unreachable_broker_and_relay_are_clear_errors(
    relay: Any, configured: Settings, free_port: Any
) -> None:
    dead = Settings(broker_url=f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(ReplayError, match=re.escape("cannot reach the broker redis://127.0.0.1:")):
        run_release_replay(
            "1.2", "1.3", url=relay.base_url, wait=0, send=broker_send(dead), echo=print
        )
    assert deliveries(relay, release_delivery_id("1.2", "1.3")) == []
    port = free_port()
    with pytest.raises(
        ReplayError, match=re.escape(f"cannot reach the relay at http://127.0.0.1:{port}")
    ):
        run_release_replay(
            "1.2",
            "1.3",
            url=f"http://127.0.0.1:{port}",
            wait=0,
            send=broker_send(configured),
            echo=print,
        )


@pytest.mark.slow
@pytest.mark.wheels
def test_cli_plans_offline_then_runs(relay: Any, repo_root: Path) -> None:
    """The whole command: the offline plan on the real wheels (about a minute), then --run."""
    env = {**os.environ, "RELAY_BROKER_URL": relay.broker_url}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli",
            "replay",
            "--from",
            "2.13",
            "--to",
            "2.14",
            "--out",
            str(relay.log_path.parent / "plan.json"),
            "--run",
            "--url",
            relay.base_url,
            "--wait",
            "120",
        ],
        env=env,
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "variants to evaluate" in proc.stdout
    assert "sent the release replay 2.13 -> 2.14 to the workers" in proc.stdout
    assert "completed: success; tests passed 2" in proc.stdout
