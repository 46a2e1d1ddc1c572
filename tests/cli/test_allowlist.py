"""`relay allowlist check` and `relay allowlist sync`."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import migrate


def test_cli_check_and_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, allowlist_sample: str
) -> None:
    from typer.testing import CliRunner

    from cli import build_app
    from config.settings import reset_settings_cache

    good, bad = tmp_path / "allow.yml", tmp_path / "bad.yml"
    good.write_text(allowlist_sample)
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
    assert f"error: {bad}:2: L1: 'nope' is not an owner/name repository" in out.output
    assert f"error: {bad}:3: unknown level 'L7'" in out.output
    out = runner.invoke(build_app(), ["allowlist", "sync", str(good)])
    assert (out.exit_code, out.output.strip()) == (0, "added 4, updated 0, disabled 0")
    reset_settings_cache()
