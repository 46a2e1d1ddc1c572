"""What the signals learn per upstream file is kept by content: a warm decision parses nothing,
and a file whose content changed is looked at again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import selector.signals.base as signals_base
from planner import source_reader
from planner.filefacts import FileFactsStore
from selector.signals import SignalConfig
from upstream import GitCheckout
from upstream.changes import compute_change_facts

NO_PRIOR = SignalConfig(profiling_map=None)


def _plan(repo: Any, universe: Any, memo: Any, select: Any) -> Any:
    source = GitCheckout(repo.path)
    facts = compute_change_facts(source, source.resolve("base"), source.resolve("HEAD"))
    return select(facts, universe, reader=source_reader(source, facts), config=NO_PRIOR, memo=memo)


def _xpu_only(small_upstream: Any) -> dict[str, str]:
    return {
        "torch/_decomp/decompositions.py": small_upstream.DECOMPOSITIONS.replace(
            "    return self * _erf_helper(self)",
            "    if self.device.type == 'xpu':\n        return self\n"
            "    return self * _erf_helper(self)",
        ),
        "torch/testing/_internal/common_methods_invocations.py": small_upstream.OPINFO_DB.replace(
            'OpInfo("add", sample_inputs_func=sample_inputs_add)',
            'OpInfo("add", sample_inputs_func=sample_inputs_add, '
            'skips=(DecorateInfo(unittest.skip("x"), device_type="xpu"),))',
        ),
    }


def test_a_warm_decision_reads_the_file_facts_and_parses_nothing(
    tmp_path: Path, small_upstream: Any, monkeypatch: pytest.MonkeyPatch, select: Any
) -> None:
    repo = small_upstream.UpstreamRepo.create(tmp_path)
    repo.commit(_xpu_only(small_upstream))
    store = FileFactsStore(tmp_path / "facts")
    first = _plan(repo, small_upstream.make_universe(), store, select=select)
    assert "code for xpu" in first.explained["torch/_decomp/decompositions.py::gelu"][0]
    assert "other devices" in first.explained["opinfo:add"][0]
    assert len(store) == 3  # other-devices-only: the decompositions file and the database;
    # test-imports: the names the decompositions file binds at base and not at head

    def no_parse(data: bytes, path: str) -> None:
        raise AssertionError(f"{path} parsed again")

    monkeypatch.setattr(signals_base, "parsed", no_parse)
    warm = _plan(
        repo, small_upstream.make_universe(), FileFactsStore(tmp_path / "facts"), select=select
    )
    assert warm.fingerprint() == first.fingerprint()
    assert warm.explained == first.explained and warm.signals == first.signals


def test_a_file_whose_content_changed_is_looked_at_again(
    tmp_path: Path, small_upstream: Any, select: Any
) -> None:
    repo = small_upstream.UpstreamRepo.create(tmp_path)
    store = FileFactsStore(tmp_path / "facts")
    repo.commit(_xpu_only(small_upstream))
    assert not [
        t
        for t in _plan(repo, small_upstream.make_universe(), store, select=select).tests
        if "gelu" in t.test_id
    ]
    repo.commit(
        {
            "torch/_decomp/decompositions.py": small_upstream.DECOMPOSITIONS.replace(
                "    return self * _erf_helper(self)",
                "    if self.device.type == 'xpu':\n        return self\n"
                "    return self * _erf_helper(self) + 0",
            )
        }
    )
    plan = _plan(repo, small_upstream.make_universe(), store, select=select)
    assert [t for t in plan.tests if "gelu" in t.test_id]
    assert "torch/_decomp/decompositions.py::gelu" not in {
        k for k, v in plan.explained.items() if any("other-devices-only" in w for w in v)
    }


def test_the_store_reads_a_damaged_or_foreign_entry_as_missing(tmp_path: Path) -> None:
    store = FileFactsStore(tmp_path)
    store["a"] = {"x": ["y"]}
    assert store["a"] == {"x": ["y"]} and list(store) == ["a"] and len(store) == 1
    path = store._path("a")
    path.write_text(json.dumps({"key": "b", "value": 1}))
    assert store.get("a") is None
    path.write_text("{not json")
    assert store.get("a") is None
    store["a"] = [1]
    del store["a"]
    assert "a" not in store and len(store) == 0
