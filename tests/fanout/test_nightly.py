"""Each downstream's own nightly (its policy's ``nightly`` crontab): dispatched to that
downstream alone at its time, once per slot whatever the beat does."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

SHA = "9f1c0a3b2d4e5f60718293a4b5c6d7e8f9012345"


@pytest.mark.parametrize(
    ("cron", "now", "slot"),
    [
        ("30 2 * * *", "2026-12-02T02:30:59", "2026-12-02T02:30"),
        ("30 2 * * *", "2026-12-02T03:29:00", "2026-12-02T02:30"),  # caught up within the hour
        ("30 2 * * *", "2026-12-02T03:31:00", None),  # too late: the next slot is tomorrow's
        ("30 2 * * *", "2026-12-02T02:29:00", None),
        ("*/15 * * * *", "2026-12-02T10:44:00", "2026-12-02T10:30"),
        ("0 4 * * 0", "2026-12-06T04:10:00", "2026-12-06T04:00"),  # a Sunday
        ("0 4 * * 0", "2026-12-07T04:10:00", None),  # a Monday
    ],
)
def test_latest_slot(cron: str, now: str, slot: str | None) -> None:
    from fanout.nightly import latest_slot

    found = latest_slot(cron, now=datetime.fromisoformat(now).replace(tzinfo=UTC))
    assert (found.strftime("%Y-%m-%dT%H:%M") if found else None) == slot


def test_each_downstream_gets_its_nightly_once_per_slot(bench: Callable[..., Any]) -> None:
    from fanout.nightly import request_due
    from fanout.role import RelayRole

    policy = (
        "downstreams:\n"
        "  org/nightly:\n    nightly: '30 2 * * *'\n"
        "  org/weekly:\n    nightly: '0 4 * * 0'\n"
    )
    b = bench({"L2": ["org/nightly", "org/weekly", "org/prs"]}, policy=policy)
    b.github.heads[f"{b.settings.upstream_repo}@main"] = SHA
    role = b.client.app.state.relay_role
    downstreams, pks = role.downstream_pks()
    at = datetime(2026, 12, 2, 2, 31, tzinfo=UTC)  # a Wednesday

    stored = request_due(b.settings, b.github_api(), downstreams, pks, now=at)
    assert stored == ["nightly-org.nightly-20261202T0230Z"]
    # the beat again, a restarted beat (another process's role), later within the hour: stored
    again = RelayRole.from_settings(b.settings)
    assert again is not None
    for when in (at, datetime(2026, 12, 2, 3, 20, tzinfo=UTC)):
        assert request_due(b.settings, b.github_api(), *again.downstream_pks(), now=when) == []
    b.settle()
    (call,) = b.github.dispatches()
    assert call.path == "/repos/org/nightly/dispatches"
    assert call.body["event_type"] == "nightly"
    client_payload = call.body["client_payload"]
    assert client_payload["delivery_id"] == SHA  # CRCR's nightly: the tested upstream SHA
    assert client_payload["payload"] == {
        "repository": {"full_name": b.settings.upstream_repo},
        "head_sha": SHA,
    }
    assert "dispatch_token" in client_payload["crcr_relay"]

    # the next day's slot is another nightly; Sunday's weekly comes on Sunday only
    next_day = datetime(2026, 12, 3, 2, 30, tzinfo=UTC)
    assert request_due(b.settings, b.github_api(), downstreams, pks, now=next_day) == [
        "nightly-org.nightly-20261203T0230Z"
    ]
    sunday = datetime(2026, 12, 6, 4, 0, 30, tzinfo=UTC)
    assert request_due(b.settings, b.github_api(), downstreams, pks, now=sunday) == [
        "nightly-org.weekly-20261206T0400Z"
    ]
    b.settle()
    assert sorted(c.path.split("/")[3] for c in b.github.dispatches()) == [
        "nightly",
        "nightly",
        "weekly",
    ]


def test_the_upstream_head_unknown_leaves_the_slot_due(bench: Callable[..., Any]) -> None:
    from fanout.nightly import request_due

    b = bench(
        {"L2": ["org/nightly"]}, policy="downstreams:\n  org/nightly:\n    nightly: '0 1 * * *'\n"
    )
    downstreams, pks = b.client.app.state.relay_role.downstream_pks()
    at = datetime(2026, 12, 2, 1, 5, tzinfo=UTC)
    assert request_due(b.settings, b.github_api(), downstreams, pks, now=at) == []  # 422
    b.github.heads[f"{b.settings.upstream_repo}@main"] = SHA
    assert request_due(b.settings, b.github_api(), downstreams, pks, now=at) == [
        "nightly-org.nightly-20261202T0100Z"
    ]


def test_the_beat_looks_every_minute_only_for_the_relay_role(tmp_path: Any) -> None:
    from config.broker import TASK_DOWNSTREAM_NIGHTLIES, celery_config
    from config.settings import Settings

    plain = Settings(env="development", var_dir=tmp_path)
    assert "downstream-nightlies" not in celery_config(plain)["beat_schedule"]
    relay = Settings(env="development", var_dir=tmp_path, allowlist_source="allowlist.yml")
    entry = celery_config(relay)["beat_schedule"]["downstream-nightlies"]
    assert entry == {"task": TASK_DOWNSTREAM_NIGHTLIES, "schedule": 60.0}
