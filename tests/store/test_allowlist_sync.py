"""The allowlist synchronized into the downstream rows: upserts, and disables what left it."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from store import migrate
from store.db import session_scope
from store.downstreams import sync_allowlist
from store.models import Downstream
from wire.crcr import allowlist


def test_sync_upserts_and_disables(tmp_path: Path, allowlist_sample: str) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    migrate.upgrade(url)
    with session_scope(url) as s:
        assert sync_allowlist(s, entries=allowlist.parse(allowlist_sample)) == {
            "added": 4,
            "updated": 0,
            "disabled": 0,
        }
    with session_scope(url) as s:
        again = allowlist.parse(
            allowlist_sample.replace("org/repo-a\n", "org/repo-a: x\n").replace(
                '  - org/repo-b: "oncall1, oncall2"\n', ""
            )
        )
        assert sync_allowlist(s, entries=again) == {"added": 0, "updated": 1, "disabled": 1}
    with session_scope(url) as s:
        rows = {d.repo: d for d in s.scalars(select(Downstream))}
        assert rows["org/repo-a"].oncalls == ["x"]
        assert rows["org/repo-b"].enabled is False
        assert (rows["org/repo-d"].level, rows["org/repo-d"].device) == ("L3", "some-device")
        assert rows["org/repo-c"].policy == {"events": ["pull_request", "nightly"]}
