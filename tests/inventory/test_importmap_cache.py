"""``import_map_for(..., learn=False)`` answers from the cache only: a benchmark or a caller
that must not start the sample run gets None, or the map learned before."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from inventory.importmap import import_map_for
from selector import Universe


def test_without_learning_only_a_cached_map_is_returned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_upstream: Any, fresh_host: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # the map cache is RELAY_VAR_DIR/selector (tmp/var)
    base = small_upstream.make_universe()
    universe = Universe(base.variants, label="b", kind="bundled", key="2.13.0+cpu-spyre1")
    assert import_map_for(universe, learn=False) is None
    assert not (tmp_path / "var").exists()  # nothing was run or written
    files = hashlib.sha256(",".join(sorted(universe.by_file)).encode()).hexdigest()[:8]
    path = tmp_path / "var" / "selector" / f"importmap-2.13.0_cpu-{files}-spyre1-traced.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"version": 0}))
    assert import_map_for(universe, learn=False) == path


def test_a_map_of_an_earlier_backend_version_is_taken_from_the_seed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_upstream: Any, fresh_host: Path
) -> None:
    """The seed's map of the same torch build and test files, learned with another backend
    version, is copied here and reused (as this host's own would be); the seed is only read."""
    from config.settings import reset_settings_cache

    base = small_upstream.make_universe()
    universe = Universe(base.variants, label="b", kind="bundled", key="2.13.0+cpu-spyre2")
    files = hashlib.sha256(",".join(sorted(universe.by_file)).encode()).hexdigest()[:8]
    seed = tmp_path / "seed"
    name = f"importmap-2.13.0_cpu-{files}-spyre1-traced.json"
    (seed / "selector").mkdir(parents=True)
    (seed / "selector" / name).write_text(json.dumps({"version": 0}))
    other = f"importmap-2.12.0_cpu-{files}-spyre1-traced.json"  # another torch build: not it
    (seed / "selector" / other).write_text(json.dumps({"version": 0}))
    monkeypatch.setenv("RELAY_CACHE_SEED", str(seed))
    reset_settings_cache()
    assert import_map_for(universe, learn=False) == fresh_host / "selector" / name
    assert sorted(p.name for p in (fresh_host / "selector").iterdir()) == [name]
    assert sorted(p.name for p in (seed / "selector").iterdir()) == sorted([name, other])
