"""`relay replay --events FILE` and `relay deliveries export`: recorded webhook events replayed in
order through a running relay (uvicorn + real Celery workers, SQLite + the embedded broker) over
real HTTP, signed like GitHub; the export/replay round trip."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from cli import build_app
from cli.recorded import derive_delivery_id, load_events
from cli.relay_client import ReplayError
from cli.replay_events import parse_rate, percentile
from config.settings import reset_settings_cache
from store import migrate
from store.db import session_scope
from store.deliveries import DeliveryCreate, store
from store.models import Delivery

BUDGET = 0.5  # runner-seconds: the generated universe (flat 0.2 s a variant) cut to 2 variants


@pytest.fixture(scope="module")
def pr_payload(github_fixtures: Path) -> Any:
    """``pr_payload(action, number, sha)``: the pull_request example, that action, number, head."""

    def make(action: str, number: int, sha: str) -> dict[str, Any]:
        payload = json.loads((github_fixtures / "pull_request/opened.payload.json").read_bytes())
        payload["action"] = action
        payload["number"] = payload["pull_request"]["number"] = number
        payload["pull_request"]["head"]["sha"] = sha
        return dict(payload)

    return make


def _jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# ----------------------------------------------------------------------------- unit


def test_folder_events_are_named_by_their_folder_in_path_order(github_fixtures: Path) -> None:
    events = load_events(github_fixtures)
    on_disk = sorted(
        p.relative_to(github_fixtures).as_posix() for p in github_fixtures.rglob("*.json")
    )
    assert [Path(e.origin).relative_to(github_fixtures).as_posix() for e in events] == on_disk
    assert [e.event for e in events] == [p.split("/")[0] for p in on_disk]
    assert [e.n for e in events] == list(range(1, len(on_disk) + 1))
    # the file's own bytes are sent (signatures are over exactly these bytes)
    assert all(e.body == Path(e.origin).read_bytes() for e in events)
    again = load_events(github_fixtures)
    assert [e.delivery_id for e in again] == [e.delivery_id for e in events]
    assert len({e.delivery_id for e in events}) == len(events)


def test_jsonl_ids_derived_from_line_and_payload(tmp_path: Path, pr_payload: Any) -> None:
    a, b = pr_payload("opened", 7, "a" * 40), pr_payload("synchronize", 7, "b" * 40)
    path = _jsonl(
        tmp_path / "events.jsonl",
        [
            {"event": "pull_request", "payload": a},
            {"event": "pull_request", "delivery_id": "recorded-1", "payload": b},
        ],
    )
    first, second = load_events(path)
    assert first.delivery_id == derive_delivery_id(1, a) and first.derived_id
    assert (second.delivery_id, second.derived_id) == ("recorded-1", False)
    assert json.loads(first.body) == a
    # the same payload on another line is another event; a changed payload another id
    assert derive_delivery_id(2, a) != first.delivery_id
    assert derive_delivery_id(1, b) != first.delivery_id
    # key order and whitespace do not change the id
    assert derive_delivery_id(1, json.loads(json.dumps(a, sort_keys=True))) == first.delivery_id
    rewritten = load_events(path, upstream_repo="pytorch/pytorch")
    assert json.loads(rewritten[0].body)["repository"]["full_name"] == "pytorch/pytorch"


def test_bad_lines_are_all_reported(tmp_path: Path) -> None:
    good = {"event": "push", "payload": {"ref": "refs/heads/main"}}
    path = tmp_path / "bad.jsonl"
    path.write_text(
        "\n".join(
            [
                json.dumps(good),
                "{not json",
                json.dumps({"event": "push"}),
                "",
                json.dumps({"event": "", "payload": [], "delivery_id": 3}),
                json.dumps(["push"]),
                json.dumps({**good, "delivery-id": "x"}),
                json.dumps({**good, "delivery_id": "d" * 101}),
            ]
        )
        + "\n"
    )
    with pytest.raises(ReplayError) as caught:
        load_events(path)
    assert caught.value.errors == [
        f"{path}:2: not JSON: Expecting property name enclosed in double quotes (column 2)",
        f'{path}:3: "payload" is missing',
        f'{path}:5: "event" must be a non-empty string (the X-GitHub-Event name)',
        f'{path}:5: "payload" must be a JSON object (the webhook body)',
        f'{path}:5: "delivery_id" must be a non-empty string when given',
        f"{path}:6: a record must be a JSON object, not list",
        f"{path}:7: unknown key(s) 'delivery-id' (expected "
        "['delivery_id', 'event', 'payload', 'received_at'])",
        f'{path}:8: "delivery_id" is longer than 100 characters',
    ]


def test_unreadable_and_empty_inputs(tmp_path: Path) -> None:
    with pytest.raises(ReplayError, match="cannot read the events file"):
        load_events(tmp_path / "missing.jsonl")
    (tmp_path / "latin1.jsonl").write_bytes(b'{"event": "push\xe9"}\n')
    with pytest.raises(ReplayError, match="cannot read the events file"):
        load_events(tmp_path / "latin1.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(ReplayError, match="no events"):
        load_events(tmp_path / "empty.jsonl")
    folder = tmp_path / "payloads"
    (folder / "push").mkdir(parents=True)
    (folder / "loose.json").write_text("{}")
    (folder / "push" / "broken.json").write_text("[1,")
    (folder / "push" / "list.json").write_text("[1]")
    with pytest.raises(ReplayError) as caught:
        load_events(folder)
    assert [e.split(": ", 1)[0] for e in caught.value.errors] == [
        str(folder / "loose.json"),
        str(folder / "push" / "broken.json"),
        str(folder / "push" / "list.json"),
    ]


def test_rate_and_percentiles() -> None:
    assert parse_rate("20/s") == 20.0 and parse_rate("2.5") == 2.5 and parse_rate(None) is None
    for bad in ("fast", "0/s", "-1"):
        with pytest.raises(ReplayError):
            parse_rate(bad)
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 99), percentile(values, 100)) == (
        50.0,
        99.0,
        100.0,
    )
    assert percentile([3.0], 99) == 3.0 and percentile([], 50) is None


def test_export_then_load_round_trip(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    github_fixtures: Path,
    pr_payload: Any,
    relay_up: Any,
) -> None:
    upstream = relay_up.UPSTREAM
    url = f"sqlite:///{tmp_path / 'relay.sqlite'}"
    migrate.upgrade(url)
    pr = json.dumps(
        pr_payload("opened", 11, "c" * 40), indent=2
    ).encode()  # formatting kept by GitHub
    push = (github_fixtures / "push/with-new-branch.payload.json").read_bytes()
    dispatch = json.dumps(
        {
            "action": "pull_request",
            "client_payload": {
                "event_type": "pull_request",
                "delivery_id": "upstream-guid",
                "payload": json.loads(pr),
            },
        }
    ).encode()
    stored = [
        DeliveryCreate(
            delivery_id="d-1", event="pull_request", action="opened", repo=upstream, raw_body=pr
        ),
        DeliveryCreate(
            delivery_id="d-2",
            event="nightly",
            action=None,
            repo=upstream,
            raw_body=b'{"head_sha": "abc"}',
            source="nightly",
        ),
        DeliveryCreate(delivery_id="d-3", event="push", action=None, repo=upstream, raw_body=push),
        DeliveryCreate(
            delivery_id="d-4",
            event="pull_request",
            action="opened",
            repo=upstream,
            raw_body=dispatch,
            source="repository_dispatch",
            upstream_delivery_id="upstream-guid",
        ),
    ]
    with session_scope(url) as session:
        for data in stored:
            store(session, data=data)
    monkeypatch.setenv("RELAY_DATABASE_URL", url)
    reset_settings_cache()
    try:
        out = tmp_path / "export" / "deliveries.jsonl"
        result = CliRunner().invoke(build_app(), ["deliveries", "export", "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert result.output.strip() == f"wrote 3 deliveries to {out}"
        records = [json.loads(line) for line in out.read_text().splitlines()]
        assert [set(r) for r in records] == [{"event", "delivery_id", "payload", "received_at"}] * 3
        events = load_events(out)
        # the nightly delivery is the relay's own, not a webhook: left out; order kept
        assert [(e.event, e.delivery_id) for e in events] == [
            ("pull_request", "d-1"),
            ("push", "d-3"),
            ("repository_dispatch", "d-4"),  # sent again as the dispatch it arrived as
        ]
        assert [json.loads(e.body) for e in events] == [
            json.loads(pr),
            json.loads(push),
            json.loads(dispatch),
        ]
        assert not any(e.derived_id for e in events)
        limited = CliRunner().invoke(
            build_app(), ["deliveries", "export", "--out", str(out), "--after", "1", "--limit", "1"]
        )
        assert limited.exit_code == 0, limited.output
        assert [e.delivery_id for e in load_events(out)] == ["d-3"]
    finally:
        reset_settings_cache()


def test_neither_release_nor_events_is_an_error(github_fixtures: Path) -> None:
    result = CliRunner().invoke(build_app(), ["replay"])
    assert result.exit_code == 2
    assert "give --from and --to" in result.output and "--events FILE" in result.output
    both = CliRunner().invoke(
        build_app(), ["replay", "--events", str(github_fixtures), "--from", "2.13"]
    )
    assert both.exit_code == 2
    assert "--events replays recorded events: without --from/--to/--run" in both.output


def test_unreachable_relay_is_a_clear_error(github_fixtures: Path, free_port: Any) -> None:
    port = free_port()  # nothing listens there
    result = CliRunner().invoke(
        build_app(),
        ["replay", "--events", str(github_fixtures), "--url", f"http://127.0.0.1:{port}"],
    )
    assert result.exit_code == 2
    assert f"error: cannot reach the relay at http://127.0.0.1:{port}" in result.output
    assert "is `relay up` running?" in result.output


# ----------------------------------------------------------------------------- a running relay


@pytest.fixture(scope="module")
def relay(
    tmp_path_factory: pytest.TempPathFactory, relay_up: Any, small_selector_planner: str
) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("replay-events")
    stack = relay_up.local(
        tmp,
        extra_env={
            "RELAY_RUNNER_ENABLED": "true",
            "RELAY_PLANNER": small_selector_planner,
            "RELAY_RUNNER_BUDGET_SECONDS": str(BUDGET),
            "RELAY_EVENT_HANDLERS": "[]",
            "RELAY_CANCEL_SUPERSEDED": "false",
        },
    )
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def cli(relay: Any, monkeypatch: pytest.MonkeyPatch, relay_up: Any) -> Iterator[Any]:
    """`relay ...` in this process, configured like the running stack (its secrets, its DB)."""
    monkeypatch.setenv("RELAY_WEBHOOK_SECRETS", json.dumps(relay_up.SECRETS))
    monkeypatch.setenv("RELAY_DATABASE_URL", relay.database_url)
    monkeypatch.setenv("RELAY_UPSTREAM_REPO", relay_up.UPSTREAM)
    reset_settings_cache()

    def invoke(*args: str) -> Any:
        return CliRunner().invoke(build_app(), list(args))

    yield invoke
    reset_settings_cache()


def stored_ids(stack: Any) -> list[str]:
    with session_scope(stack.database_url) as session:
        return list(session.scalars(select(Delivery.delivery_id).order_by(Delivery.id)))


def test_replay_fixture_folder_then_again(
    relay: Any, cli: Any, github_fixtures: Path, small_selection: Any
) -> None:
    before = stored_ids(relay)
    result = cli(
        "replay",
        "--events",
        str(github_fixtures),
        "--url",
        relay.base_url,
        "--wait",
        "60",
        "--json",
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    rows = {Path(r["origin"]).relative_to(github_fixtures).as_posix(): r for r in report["events"]}
    assert [r["n"] for r in report["events"]] == list(range(1, len(rows) + 1))
    accepted = [
        "pull_request/closed.payload.json",
        "pull_request/labeled.payload.json",
        "pull_request/opened.payload.json",
        "pull_request/synchronize.payload.json",
        "push/with-new-branch.payload.json",
    ]
    assert sorted(k for k, r in rows.items() if r["outcome"] == "accepted") == accepted
    assert all(rows[k]["status"] == 202 for k in accepted)
    assert rows["ping/payload.json"]["state"] == "ping"
    assert rows["check_run/rerequested.payload.json"]["state"].startswith(
        "ignored: repository 'example-org/other-project' is not the configured upstream"
    )
    assert "without a CRCR client_payload" in rows["repository_dispatch/payload.json"]["state"]
    # stored in the order sent
    sent = [r["delivery_id"] for r in report["events"] if r["outcome"] == "accepted"]
    assert stored_ids(relay) == before + sent
    # what the relay did with each, read back from its API
    assert rows["pull_request/closed.payload.json"]["state"] == (
        "processed, no run: pull request closed without merge"
    )
    assert rows["pull_request/labeled.payload.json"]["state"].startswith(
        "processed, no run: label 'bug' is not a ciflow/crcr/* label"
    )
    planned = [
        "pull_request/opened.payload.json",
        "pull_request/synchronize.payload.json",
        "push/with-new-branch.payload.json",
    ]
    expected = small_selection("push", BUDGET)
    selected, candidates = expected.funnel[-1].count_out, expected.funnel[-2].count_in
    assert 0 < selected < candidates == expected.universe.variants  # the budget cut some
    for key in planned:
        row = rows[key]
        assert row["job_id"] is not None, row
        assert (row["planned"], row["candidates"], row["universe"], row["fallbacks"]) == (
            selected,
            candidates,
            expected.universe.variants,
            ["all"],
        )
        assert row["test_results"]["total"] <= selected
    totals = report["totals"]
    assert {k: totals[k] for k in ("events", "accepted", "duplicate", "ignored", "rejected")} == {
        "events": 8,
        "accepted": 5,
        "duplicate": 0,
        "ignored": 3,
        "rejected": 0,
    }
    assert {
        k: totals["selection"][k]
        for k in (
            "jobs",
            "selected_variants",
            "candidate_variants",
            "with_fallback",
            "stored_without_job",
        )
    } == {
        "jobs": 3,
        "selected_variants": 3 * selected,
        "candidate_variants": 3 * candidates,
        "with_fallback": 3,
        "stored_without_job": 2,
    }
    assert totals["accept_ms_p50"] <= totals["accept_ms_p99"]
    assert totals["events_per_second"] > 0

    # the same folder again: every stored event is a duplicate, nothing new is stored, and the
    # table still shows the jobs of the first replay
    again = cli("replay", "--events", str(github_fixtures), "--url", relay.base_url, "--wait", "5")
    assert again.exit_code == 0, again.output
    assert "5 duplicate, 3 ignored, 0 rejected" in again.output
    assert (
        f"selection: 3 job(s) planned, {3 * selected} variants selected of {3 * candidates} "
        "candidates, 3 with a fallback; 2 stored event(s) without a job"
    ) in again.output
    push_line = next(line for line in again.output.splitlines() if line.split()[1:2] == ["push"])
    assert f" {selected}/{candidates} " in push_line and " all " in push_line
    assert stored_ids(relay) == before + sent
    header = again.output.splitlines()[0].split()
    assert header[:5] == ["n", "event", "delivery", "http", "accept"]


def test_replay_jsonl_in_order_and_export(
    relay: Any, cli: Any, tmp_path: Path, pr_payload: Any, relay_up: Any
) -> None:
    before = stored_ids(relay)
    records = [
        {"event": "pull_request", "payload": pr_payload("opened", 501, "1" * 40)},
        {
            "event": "pull_request",
            "delivery_id": "jsonl-recorded-2",
            "payload": pr_payload("synchronize", 501, "2" * 40),
        },
        {"event": "pull_request", "payload": pr_payload("opened", 502, "3" * 40)},
        {"event": "issues", "payload": {"repository": {"full_name": relay_up.UPSTREAM}}},
    ]
    path = _jsonl(tmp_path / "events.jsonl", records)
    result = cli(
        "replay", "--events", str(path), "--url", relay.base_url, "--rate", "20/s", "--json"
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    ids = [r["delivery_id"] for r in report["events"]]
    assert ids[1] == "jsonl-recorded-2"
    assert ids[0] == derive_delivery_id(1, records[0]["payload"])
    assert [r["outcome"] for r in report["events"]] == ["accepted"] * 3 + ["ignored"]
    assert stored_ids(relay) == before + ids[:3]
    # paced at 20/s: four events take at least three intervals
    assert report["totals"]["send_seconds"] >= 0.15
    assert [
        r["state"].split("/")[0] in ("dispatched", "in_progress", "completed")
        for r in report["events"][:3]
    ] == [True] * 3

    out = tmp_path / "recorded.jsonl"
    exported = cli("deliveries", "export", "--out", str(out))
    assert exported.exit_code == 0, exported.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["delivery_id"] for r in lines] == stored_ids(relay)
    assert [r["payload"] for r in lines[-3:]] == [r["payload"] for r in records[:3]]
    # replaying the recording is idempotent at the relay: all duplicates
    replayed = cli("replay", "--events", str(out), "--url", relay.base_url, "--wait", "0", "--json")
    assert replayed.exit_code == 0, replayed.output
    assert {r["outcome"] for r in json.loads(replayed.output)["events"]} == {"duplicate"}


def test_bad_file_sends_nothing(relay: Any, cli: Any, tmp_path: Path, pr_payload: Any) -> None:
    before = stored_ids(relay)
    path = tmp_path / "bad.jsonl"
    path.write_text(
        json.dumps({"event": "pull_request", "payload": pr_payload("opened", 601, "6" * 40)})
        + "\nnope\n"
        + json.dumps({"payload": {}})
        + "\n"
    )
    result = cli("replay", "--events", str(path), "--url", relay.base_url)
    assert result.exit_code == 2
    assert f"error: {path}:2: not JSON" in result.output
    assert f'error: {path}:3: "event" must be a non-empty string' in result.output
    assert "2 problems; nothing was sent" in result.output
    assert stored_ids(relay) == before


def test_wrong_secret_is_counted_as_rejected(
    relay: Any, cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pr_payload: Any
) -> None:
    monkeypatch.setenv("RELAY_WEBHOOK_SECRETS", json.dumps(["not-the-relay-secret"]))
    reset_settings_cache()
    path = _jsonl(
        tmp_path / "one.jsonl",
        [{"event": "pull_request", "payload": pr_payload("opened", 701, "7" * 40)}],
    )
    result = cli("replay", "--events", str(path), "--url", relay.base_url, "--wait", "0")
    assert result.exit_code == 1
    assert "1 events: 0 accepted (0 redelivered), 0 duplicate, 0 ignored, 1 rejected" in (
        result.output
    )
    assert "rejected: signature does not match" in result.output
