"""Every cache of a host lives under its RELAY_VAR_DIR (store.caches): a fresh var dir gets the
entries it lacks built there (and the log says so) or copied from RELAY_CACHE_SEED; nothing is
written to the working folder or HOME. The reports of `relay eval` are in the database, so an
API host with nothing on its disk shows them."""

from __future__ import annotations

import logging
import subprocess
import warnings
from pathlib import Path

import pytest

from config.settings import reset_settings_cache
from inventory.build import build_inventory
from inventory.sources import CheckoutTests

MISSING = "cache entry missing on this host: building it"
COPIED = "cache entry copied from the seed"


def _checkout(root: Path) -> Path:
    """A one-file upstream checkout (a git repository: its revision keys the inventory)."""
    (root / "torch").mkdir(parents=True)
    (root / "torch" / "version.py").write_text("__version__ = '2.99.0a0'\n")
    (root / "test").mkdir()
    (root / "test" / "test_tiny.py").write_text(
        "def test_one():\n    pass\n\n\ndef test_two():\n    pass\n"
    )
    for args in (
        ["init", "-q"],
        ["add", "."],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "tiny"],
    ):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    return root


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_a_fresh_var_dir_builds_its_inventory_there_and_a_seeded_one_copies_it(
    fresh_host: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cwd, home = tmp_path / "cwd", tmp_path / "home"
    cwd.mkdir()
    home.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("HOME", str(home))
    source = CheckoutTests(_checkout(tmp_path / "pytorch"), ("test/test_tiny.py",))
    with caplog.at_level(logging.INFO):
        first = build_inventory(source, backend="cpu", specs=[], test_times=None)
    assert not first.cached and len(first.variants) > 0
    assert [r.message for r in caplog.records].count(MISSING) == 1
    built = next(r for r in caplog.records if r.message == MISSING)
    assert Path(built.cache).parent == fresh_host / "inventory"  # type: ignore[attr-defined]
    assert {Path(f).parts[0] for f in _files(fresh_host)} == {"inventory"}
    assert _files(cwd) == [] and _files(home) == []

    # a second host, seeded from the first one's var dir (read only): copied, not collected
    caplog.clear()
    other = tmp_path / "other-var"
    monkeypatch.setenv("RELAY_VAR_DIR", str(other))
    monkeypatch.setenv("RELAY_CACHE_SEED", str(fresh_host))
    reset_settings_cache()
    before = _files(fresh_host)
    with caplog.at_level(logging.INFO):
        second = build_inventory(source, backend="cpu", specs=[], test_times=None)
    assert second.cached and [v.test_id for v in second.variants] == [
        v.test_id for v in first.variants
    ]
    messages = [r.message for r in caplog.records]
    assert MISSING not in messages and messages.count(COPIED) == 2  # collection and decisions
    assert _files(other) == [f for f in before if f.startswith("inventory/")]
    assert _files(fresh_host) == before  # the seed is only read
    assert _files(cwd) == [] and _files(home) == []


def test_the_caches_are_absolute_and_named(
    fresh_host: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from config.settings import get_settings
    from store import caches

    monkeypatch.setenv("RELAY_VAR_DIR", "relative-var")
    monkeypatch.chdir(tmp_path)
    reset_settings_cache()
    assert get_settings().var_dir == tmp_path / "relative-var"
    assert caches.cache_dir("inventory") == tmp_path / "relative-var" / "inventory"
    with pytest.raises(ValueError, match="unknown cache 'nope'"):
        caches.cache_dir("nope")


def test_an_eval_report_is_stored_in_the_database_and_the_pages_show_it(
    fresh_host: Path,
) -> None:
    with warnings.catch_warnings():  # starlette's TestClient warns about the httpx it uses
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        from starlette.testclient import TestClient
    from cli.evaluate import store_report
    from relay.app import create_app
    from store.db import dispose_engines

    table = "| selector | recall |\n|---|---:|\n| four stages | 97.5 % |\n"
    store_report(None, "mutation", "# old\n\n| selector | recall |\n|---|---|\n| x | 1 % |\n")
    store_report(None, "mutation", table)
    assert not (fresh_host / "eval").exists()  # nothing but the database
    try:
        with TestClient(create_app()) as client:
            page = client.get("/replays")
        assert page.status_code == 200
        assert "report-mutation.md" in page.text and "97.5 %" in page.text
        assert "1 %" not in page.text  # the newest report of each name
    finally:
        dispose_engines()
