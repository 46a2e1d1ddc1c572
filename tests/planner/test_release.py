"""A release step's plan goes on when the import map cannot be learned, and says so."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

import planner.release as release


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("import-map run failed:\nboom"),
        subprocess.TimeoutExpired(["pytest"], 1800),
    ],
)
def test_an_import_map_that_cannot_be_learned_is_a_note(
    small_upstream: Any, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    def fail(*_: Any, **__: Any) -> None:
        raise error

    monkeypatch.setattr(release, "import_map_for", fail)
    notes: list[str] = []
    assert release.learned_import_map(small_upstream.make_universe(), notes) is None
    assert len(notes) == 1 and notes[0].startswith("import map not learned (")
    assert "rules nothing out" in notes[0] and "\n" not in notes[0]


@pytest.fixture
def facts(tmp_path: Any, small_upstream: Any) -> Any:
    from upstream import GitCheckout
    from upstream.changes import compute_change_facts

    repo = small_upstream.UpstreamRepo.create(tmp_path)
    source = GitCheckout(repo.path)
    return compute_change_facts(source, source.resolve("base"), source.resolve("HEAD"))


def _sides(monkeypatch: pytest.MonkeyPatch) -> None:
    from upstream.changes.behaviour import Side

    monkeypatch.setattr(
        release, "_side", lambda resolved, env, **_: Side(python="python", build=f"b-{resolved}")
    )


def test_behaviour_changes_join_the_facts_with_a_note(
    facts: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _sides(monkeypatch)
    same = {"fwd": ["aten.add.Tensor"], "bwd": [], "errors": [], "n": 1, "vals": []}
    base = {
        "entries": {
            "add": {"dtypes": ["float32"], "backward_dtypes": [], "by_dtype": {"float32": same}}
        }
    }
    head = {
        "entries": {
            "add": {
                "dtypes": ["float32"],
                "backward_dtypes": [],
                "by_dtype": {"float32": {**same, "fwd": ["aten.sub.Tensor"]}},
            }
        }
    }
    seen: list[Any] = []

    def fake(sides: Any, cache_dir: Any, **_: Any) -> list[Any]:
        seen.append(([s.build for s in sides], cache_dir))
        return [base, head]

    monkeypatch.setattr(release, "fingerprints", fake)
    notes: list[str] = []
    out = release.with_behaviour(facts, cache_dir=tmp_path, notes=notes, enabled=True)
    assert seen == [([f"b-{facts.base.resolved}", f"b-{facts.head.resolved}"], tmp_path)]
    [change] = out.behaviour
    assert change.name == "add" and change.dtypes == ["float32"]
    assert change.reasons == ["float32: dispatches +sub.Tensor -add.Tensor"]
    assert notes[0].startswith("behaviour: 1 of 1 OpInfo entries behave differently on CPU")
    assert facts.behaviour == []  # the cached source facts are not touched


def test_fingerprints_that_cannot_be_made_leave_the_facts_and_say_why(
    facts: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from upstream.changes.behaviour import FingerprintError

    _sides(monkeypatch)

    def fail(*_: Any, **__: Any) -> None:
        raise FingerprintError("fingerprints under torch 9 failed (exit 1): no torch\nmore")

    monkeypatch.setattr(release, "fingerprints", fail)
    notes: list[str] = []
    assert release.with_behaviour(facts, cache_dir=tmp_path, notes=notes, enabled=True) is facts
    assert notes == [
        "behaviour fingerprints not computed (fingerprints under torch 9 failed (exit 1): no "
        "torch); compiled code's changes rest on the broad signals"
    ]
    notes.clear()
    assert release.with_behaviour(facts, cache_dir=tmp_path, notes=notes, enabled=False) is facts
    assert notes == ["behaviour fingerprints off (RELAY_RELEASE_FINGERPRINTS=false)"]


def test_a_collected_head_flags_what_the_base_lacks(small_upstream: Any) -> None:
    from selector import NEW_AT_HEAD

    base = small_upstream.make_universe()
    head = small_upstream.make_universe()
    extra = small_upstream.variant("test_compare_cpu", "polar", "float32")
    head.variants.append(extra)
    flagged = release.with_new_at_head(head, base)
    assert flagged.flags == {extra.test_id: NEW_AT_HEAD}
    assert flagged.variants is head.variants and head.flags == {}
