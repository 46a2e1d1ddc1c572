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
    def fail(_: Any) -> None:
        raise error

    monkeypatch.setattr(release, "import_map_for", fail)
    notes: list[str] = []
    assert release.learned_import_map(small_upstream.make_universe(), notes) is None
    assert len(notes) == 1 and notes[0].startswith("import map not learned (")
    assert "rules nothing out" in notes[0] and "\n" not in notes[0]
