from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from store import migrate
from store.db import session_scope
from store.downstreams import sync_allowlist
from store.models import Downstream
from wire.crcr import allowlist
from wire.crcr.allowlist import AllowlistEntry, AllowlistError, Level

SAMPLE = """
L1:
  - org/repo-a
  - org/repo-b: "oncall1, oncall2"
L2:
  - org/repo-c: {events: [pull_request, nightly], oncalls: [someone]}
L3:
  some-device:
    org/repo-d: [oncall3]
L4: []
"""


def test_parses_every_documented_shape() -> None:
    entries = allowlist.parse(SAMPLE)
    assert entries == [
        AllowlistEntry("org/repo-a", Level.L1),
        AllowlistEntry("org/repo-b", Level.L1, oncalls=("oncall1", "oncall2")),
        AllowlistEntry(
            "org/repo-c", Level.L2, oncalls=("someone",), events=("pull_request", "nightly")
        ),
        AllowlistEntry("org/repo-d", Level.L3, oncalls=("oncall3",), device="some-device"),
    ]


def test_all_problems_at_once() -> None:
    text = "L1:\n  - org/a\n  - not-a-repo\nL2:\n  - org/a\n  - org/b: {events: [deploy], x: 1}\nL9: []\n"
    with pytest.raises(AllowlistError) as info:
        allowlist.parse(text, path="allow.yml")
    assert info.value.problems == [
        "L1: 'not-a-repo' is not an owner/name repository",
        "org/b: unknown keys ['x']",
        "org/b: unknown events ['deploy']",
        "unknown level 'L9' (expected one of L1, L2, L3, L4)",
        "org/a appears in L1 and L2",
    ]
    assert str(info.value).startswith("allow.yml: ")


def test_sync_upserts_and_disables(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    migrate.upgrade(url)
    with session_scope(url) as s:
        assert sync_allowlist(s, entries=allowlist.parse(SAMPLE)) == {
            "added": 4,
            "updated": 0,
            "disabled": 0,
        }
    with session_scope(url) as s:
        again = allowlist.parse(
            SAMPLE.replace("org/repo-a\n", "org/repo-a: x\n").replace(
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


def test_cli_check_and_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from cli import build_app
    from store.settings import reset_settings_cache

    good, bad = tmp_path / "allow.yml", tmp_path / "bad.yml"
    good.write_text(SAMPLE)
    bad.write_text("L1:\n  - nope\nL7: []\n")
    monkeypatch.setenv("RELAY_DATABASE_URL", f"sqlite:///{tmp_path / 'db.sqlite'}")
    reset_settings_cache()
    migrate.upgrade(f"sqlite:///{tmp_path / 'db.sqlite'}")
    runner = CliRunner()
    out = runner.invoke(build_app(), ["allowlist", "check", str(good)])
    assert out.exit_code == 0, out.output
    assert "L3 org/repo-d device=some-device events=all oncalls=oncall3" in out.output
    assert "4 downstream repositories" in out.output
    out = runner.invoke(build_app(), ["allowlist", "check", str(bad)])
    assert out.exit_code == 1
    assert "error: L1: 'nope' is not an owner/name repository" in out.output
    assert "error: unknown level 'L7'" in out.output
    out = runner.invoke(build_app(), ["allowlist", "sync", str(good)])
    assert (out.exit_code, out.output.strip()) == (0, "added 4, updated 0, disabled 0")
    reset_settings_cache()
