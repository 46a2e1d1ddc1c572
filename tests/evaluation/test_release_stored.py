"""A release step's ground truth from stored runs: which runs it uses and lacks, the one-line
error naming ``--run``, ``--run`` storing a cached run 1 as it is and running a run 2 for real
(on a four-test module), and the truth with flaky variants left out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluation.groundtruth import durations_path, run_path
from evaluation.release import (
    Side,
    make_runs,
    missing_error,
    notes,
    seed_cache,
    step_truth,
    stored_inputs,
    stored_step,
)
from evaluation.storedruns import RunHeader, StoredRun, read_run, write_run
from selector import Universe, Variant

FILE = "tests/evaluation/mutation_suite/mutant_cases.py"
NAMES = [
    "test_relu_on_device",
    "test_relu_on_cpu_only",
    "test_gelu_shape_on_device",
    "test_nothing_mutated",
]


def _id(name: str) -> str:
    return f"{FILE}::{name}"


def _universe(key: str) -> Universe:
    variants = [
        Variant(
            test_id=_id(n),
            file=FILE,
            cls=None,
            name=n,
            base=n,
            suite="cases",
            op="nn.functional.relu" if "relu" in n else None,
        )
        for n in NAMES
    ]
    return Universe(variants=variants, label=f"cases {key}", key=key)


def _stored(version: str, run: int, outcomes: dict[str, str]) -> StoredRun:
    header = RunHeader(
        torch_version=version,
        torch_build=f"{version}+gitabc",
        backend_version="1",
        suites="bundled:old",
        suites_commit="",
        date="2026-12-06",
        run=run,
    )
    return StoredRun(header=header, outcomes=outcomes)


def test_a_step_without_run_1_of_a_torch_names_the_run_command(tmp_path: Path) -> None:
    step = stored_step("2.13.0", "2.14.1", folder=tmp_path)
    assert not step.complete and step.used == []
    error = missing_error(step, "relay eval --kind release --from 2.13 --to 2.14 --run")
    assert error == (
        "no stored ground truth for 2.13.0-run1.json.xz and 2.14.1-run1.json.xz "
        "(evaluation/data/groundtruth): make it with `relay eval --kind release --from 2.13 "
        "--to 2.14 --run` (a full run of the bundled suites under each torch, its universe "
        "and the step's change facts)"
    )
    inputs = stored_inputs("2.13.0", "2.14.1", tmp_path)
    error = missing_error(step, "relay eval --run", inputs, tmp_path)
    assert error is not None and error.startswith(
        "no stored ground truth for 2.13.0-run1.json.xz and 2.14.1-run1.json.xz and "
        "2.13.0-universe.json.xz and 2.14.1-universe.json.xz and 2.13.0_to_2.14.1-step.json.xz "
        f"({tmp_path}): make it with `relay eval --run`"
    )
    passed = dict.fromkeys(map(_id, NAMES), "passed")
    write_run(_stored("2.13.0", 1, passed), tmp_path)
    write_run(_stored("2.14.1", 1, passed), tmp_path)
    write_run(_stored("2.14.1", 2, passed), tmp_path)
    step = stored_step("2.13.0", "2.14.1", folder=tmp_path)
    assert step.complete and missing_error(step, "x") is None
    assert step.describe() == (
        "stored runs used: 2.13.0-run1.json.xz, 2.14.1-run1.json.xz, 2.14.1-run2.json.xz; "
        "missing: 2.13.0-run2.json.xz"
    )
    said = notes(step, {"2.13.0": "2.13.0+gitabc", "2.14.1": "2.14.1+gitdef"})
    assert "2.14.1 run 1: torch build 2.14.1+gitabc, this host's is 2.14.1+gitdef" in said
    assert any("ran the suites at bundled:old (commit unknown)" in n for n in said)


def _cached(universe: Universe, cache: Path) -> dict[str, str]:
    cached = {**dict.fromkeys(map(_id, NAMES), "passed"), _id("test_relu_on_device"): "failed"}
    path = run_path(universe, None, None, cache)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(cached))
    durations_path(path).write_text(json.dumps({_id("test_relu_on_device"): 0.25}))
    return cached


def test_run_stores_the_hosts_cached_run_1_as_it_is(tmp_path: Path) -> None:
    universe = _universe("cases-v1")
    cache, folder = tmp_path / "cache", tmp_path / "stored"
    cached = _cached(universe, cache)
    step = stored_step("9.9.0", "9.9.1", runs=1, folder=folder)
    logs: list[str] = []
    side = Side("9.9.0", "9.9.0+gitabc", universe, python="/nonexistent/python")  # nothing runs
    step = make_runs(step, [side], runs=1, folder=folder, cache_dir=cache, log=logs.append)
    (first,) = step.runs["9.9.0"]
    assert first.outcomes == cached and first.seconds == {_id("test_relu_on_device"): 0.25}
    assert (first.header.run, first.header.torch_build) == (1, "9.9.0+gitabc")
    assert first.header.suites.startswith("bundled:")
    assert logs == [f"stored {folder / '9.9.0-run1.json.xz'}"]
    assert [p.name for p in step.missing] == ["9.9.1-run1.json.xz"]


@pytest.mark.long
def test_run_2_is_a_run_of_its_own(tmp_path: Path) -> None:
    universe = _universe("cases-v1")
    cache, folder = tmp_path / "cache", tmp_path / "stored"
    _cached(universe, cache)
    side = Side("9.9.0", "9.9.0+gitabc", universe)  # this interpreter
    step = make_runs(
        stored_step("9.9.0", "9.9.1", folder=folder), [side], runs=2, folder=folder, cache_dir=cache
    )
    first, second = step.runs["9.9.0"]
    assert first.outcomes[_id("test_relu_on_device")] == "failed"  # the cached run 1
    # run 2 really ran, in its own cache folder: every test passes without a mutant
    assert second.outcomes == dict.fromkeys(map(_id, NAMES), "passed")
    assert set(second.seconds) == set(second.outcomes)
    assert read_run(folder / "9.9.0-run2.json.xz").header.run == 2


def test_the_step_truth_leaves_flaky_variants_out_of_both_tables(tmp_path: Path) -> None:
    base, head = _universe("b"), _universe("h")
    before = dict.fromkeys(map(_id, NAMES), "passed")
    after = {**before, _id("test_relu_on_device"): "failed", _id("test_nothing_mutated"): "failed"}
    again = {**after, _id("test_nothing_mutated"): "passed"}  # flaky at head
    write_run(_stored("2.13.0", 1, before), tmp_path)
    write_run(_stored("2.14.1", 1, after), tmp_path)
    write_run(_stored("2.14.1", 2, again), tmp_path)
    step = stored_step("2.13.0", "2.14.1", folder=tmp_path)
    truth, events = step_truth(
        step, name="2.13.0 -> 2.14.1", changed_files=["torch/x.py"], base=base, head=head
    )
    changed, new = truth.events
    assert changed.failing == [_id("test_relu_on_device")]
    assert "1 flaky variants left out" in changed.detail and new.failing == []
    assert [(e.entry, e.kind) for e in events.events] == [("op:nn.functional.relu", "regression")]
    assert events.flaky == {"2.14.1": 1}
    # a fresh host's cache gets the stored run (the selector's base history reads it), once
    stored = step.runs["2.13.0"][0]
    assert seed_cache(base, stored, tmp_path) is True
    assert json.loads(run_path(base, None, None, tmp_path).read_text()) == before
    assert seed_cache(base, stored, tmp_path) is False
