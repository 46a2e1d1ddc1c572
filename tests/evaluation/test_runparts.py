"""Ground-truth runs in kept parts, for real (pytest subprocesses on
tests/evaluation/mutation_suite/resume_cases.py): a run killed half-way keeps the parts it
finished and, started again, runs only the others; a run of another key reuses none of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends import get_backend
from evaluation.groundtruth import durations_path, messages_path, run_outcomes, run_path
from evaluation.runparts import (
    Results,
    part_file,
    parts_dir,
    read_part,
    split_parts,
    write_part,
)
from selector.model import Universe, Variant

FILE = "tests/evaluation/mutation_suite/resume_cases.py"
NAMES = [f"test_{i}" for i in range(6)]
IDS = [f"{FILE}::{n}" for n in NAMES]


def _universe() -> Universe:
    variants = [
        Variant(test_id=f"{FILE}::{n}", file=FILE, cls=None, name=n, base=n, suite="resume")
        for n in NAMES
    ]
    return Universe(variants=variants, label="resume cases", key="resume-v1")


def _run(
    tmp_path: Path,
    heard: list[tuple[str, int, int]] | None = None,
    backend: str = "spyre",
    **env: str,
):
    return run_outcomes(
        _universe(),
        mutant=None,
        backend=backend,
        processes=1,
        part_size=2,
        cache_dir=tmp_path / "cache",
        extra_env={"RESUME_CASES_DIR": str(tmp_path), **env},
        progress=(lambda *p: heard.append(p)) if heard is not None else None,
    )


def _ran(tmp_path: Path) -> list[str]:
    ran = tmp_path / "ran.txt"
    names = ran.read_text(encoding="utf-8").split() if ran.is_file() else []
    ran.unlink(missing_ok=True)
    return names


def test_a_killed_run_keeps_its_finished_parts_and_runs_only_the_rest(tmp_path: Path) -> None:
    """On the cpu backend: the parts do not depend on the backend, and its pytest starts
    without loading the simulated device (about a third of a spyre run's start)."""
    (tmp_path / "crash").touch()
    with pytest.raises(RuntimeError, match=r"1 of 3 parts kept, run it again"):
        _run(tmp_path, backend="cpu")
    assert _ran(tmp_path) == ["test_0", "test_1", "test_2", "test_3"]  # killed in test_3
    run = run_path(_universe(), None, None, tmp_path / "cache")
    assert not run.is_file()  # not complete: no run yet, only its kept part
    kept = sorted(p.name for p in parts_dir(run).glob("part-*.json"))
    assert len(kept) == 1 and kept[0].startswith("part-00000-")
    # the last part as a write cut short would leave it: not read as complete
    cut = part_file(parts_dir(run), 2, IDS[4:])
    cut.write_text('{"version": 1, "outcomes": {')

    (tmp_path / "crash").unlink()
    heard: list[tuple[str, int, int]] = []
    outcomes = _run(tmp_path, heard, backend="cpu")
    assert _ran(tmp_path) == ["test_2", "test_3", "test_4", "test_5"]
    assert heard[0] == ("baseline", 2, 6) and heard[-1] == ("baseline", 6, 6)
    assert outcomes == {**dict.fromkeys(IDS, "passed"), IDS[5]: "failed"}
    assert json.loads(run.read_text()) == outcomes
    assert set(json.loads(durations_path(run).read_text())) == set(IDS)
    assert json.loads(messages_path(run).read_text()) == {
        IDS[5]: "AssertionError: test_5 fails, and says so"
    }
    assert not parts_dir(run).exists()  # complete: the run is the cache now
    assert _run(tmp_path, backend="cpu") == outcomes and _ran(tmp_path) == []


def test_a_run_of_another_key_reuses_no_part(tmp_path: Path) -> None:
    default = run_path(_universe(), None, None, tmp_path / "cache", settings="")
    kept = part_file(parts_dir(default), 0, IDS[:2])
    write_part(kept, Results(outcomes=dict.fromkeys(IDS[:2], "passed")))
    # another device model: another run, which runs all of it
    card = _run(tmp_path, SPYRE_DEVICE_MODEL="card")
    assert _ran(tmp_path) == NAMES
    other = run_path(
        _universe(), None, None, tmp_path / "cache", settings="SPYRE_DEVICE_MODEL=card"
    )
    assert other != default and json.loads(other.read_text()) == card
    assert not default.is_file() and kept.is_file()  # the default's part waits for its run
    # another subset of the tests, other specs: other runs, other parts folders
    subset = run_path(_universe(), None, IDS[:2], tmp_path / "cache", settings="")
    spec = tmp_path / "spec.yaml"
    spec.write_text("version: 1\n")
    specs = run_path(_universe(), None, None, tmp_path / "cache", [spec], settings="")
    assert len({parts_dir(p) for p in (default, other, subset, specs)}) == 4


def test_parts_are_whole_files_of_contiguous_ids(tmp_path: Path) -> None:
    assert split_parts(["a", "b", "c", "d", "e"], 2) == [["a", "b"], ["c", "d"], ["e"]]
    path = tmp_path / "part-00000-x.json"
    results = Results(outcomes={"a": "passed"}, durations={"a": 0.5}, traced={"a": ["F.relu"]})
    write_part(path, results)
    assert read_part(path) == results
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left
    path.write_text(json.dumps({"version": 0, **results.__dict__}))
    assert read_part(path) is None  # another version's part is not read


def test_the_device_settings_a_run_is_keyed_by() -> None:
    spyre = get_backend("spyre")
    assert spyre.settings({}) == ""
    assert spyre.settings({"SPYRE_DEVICE_MODEL": " Card ", "HOME": "/x"}) == (
        "SPYRE_DEVICE_MODEL=card"
    )
    assert get_backend("cpu").settings({"SPYRE_DEVICE_MODEL": "card"}) == ""
