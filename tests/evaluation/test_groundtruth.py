"""Ground-truth runs for real: pytest subprocesses, the traced baseline and restricted mutant runs
on a four-test module (tests/evaluation/mutation_suite/mutant_cases.py)."""

from __future__ import annotations

import json
from pathlib import Path

from evaluation.groundtruth import (
    check_trace,
    load_trace,
    mutation_ground_truth,
    release_ground_truth,
    run_outcomes,
    run_path,
)
from selector.model import Universe, Variant

FILE = "tests/evaluation/mutation_suite/mutant_cases.py"
NAMES = [
    "test_relu_on_device",
    "test_relu_on_cpu_only",
    "test_gelu_shape_on_device",
    "test_nothing_mutated",
]


def _universe() -> Universe:
    variants = [
        Variant(test_id=f"{FILE}::{n}", file=FILE, cls=None, name=n, base=n, suite="cases")
        for n in NAMES
    ]
    return Universe(variants=variants, label="mutant cases", key="cases-v1")


def _id(name: str) -> str:
    return f"{FILE}::{name}"


def test_traced_baseline_and_restricted_mutant_runs_match_full_runs(tmp_path: Path) -> None:
    universe = _universe()
    logs: list[str] = []
    baseline = run_outcomes(universe, mutant=None, trace=True, cache_dir=tmp_path, log=logs.append)
    assert baseline == dict.fromkeys(map(_id, NAMES), "passed")
    trace = load_trace(universe, tmp_path)
    # only calls with a device tensor count: the CPU-only relu test is not in the trace
    assert trace["F.relu"] == [_id("test_relu_on_device")]
    assert trace["F.gelu"] == [_id("test_gelu_shape_on_device")]
    assert trace["F.softmax"] == []

    heard: list[tuple[str, int, int]] = []
    truth = mutation_ground_truth(
        universe,
        ["F.relu", "F.gelu", "F.softmax"],
        run=True,
        cache_dir=tmp_path,
        progress=lambda *p: heard.append(p),
    )
    # the baseline is cached: the mutants still to run are announced first (the bar's total),
    # then counted from the tests their runs finished; F.softmax's trace is empty, never run
    assert heard[:2] == [("F.relu", 0, 1), ("F.gelu", 0, 1)]
    assert {part for part, _, _ in heard} == {"F.relu", "F.gelu"}
    for name in ("F.relu", "F.gelu"):
        counts = [done for part, done, total in heard if part == name]
        assert counts == sorted(counts) and counts[-1] == 1
    assert truth.method == "traced"
    failing = {e.name: e.failing for e in truth.events}
    assert failing == {"F.relu": [_id("test_relu_on_device")], "F.gelu": [], "F.softmax": []}
    relu = next(e for e in truth.events if e.name == "F.relu")
    assert "ran 1 of 4 variants" in relu.detail
    # the restricted run really ran only the traced test
    restricted = run_path(universe, "F.relu", trace["F.relu"], tmp_path)
    assert json.loads(restricted.read_text()) == {_id("test_relu_on_device"): "failed"}

    # the unrestricted runs agree, and the trace check says nothing fell outside a trace
    full = mutation_ground_truth(
        universe, ["F.relu", "F.gelu"], run=True, traced=False, cache_dir=tmp_path
    )
    assert {e.name: e.failing for e in full.events} == {
        "F.relu": [_id("test_relu_on_device")],
        "F.gelu": [],
    }
    assert check_trace(universe, ["F.relu", "F.gelu", "F.softmax"], tmp_path) == [
        ("F.relu", 1, 0),
        ("F.gelu", 0, 0),
    ]


def test_cached_runs_are_reused_and_missing_ones_are_not_run(tmp_path: Path) -> None:
    universe = _universe()
    assert mutation_ground_truth(universe, ["F.relu"], run=False, cache_dir=tmp_path).events == []
    heard: list[tuple[str, int, int]] = []
    first = run_outcomes(
        universe, mutant=None, processes=1, cache_dir=tmp_path, progress=lambda *p: heard.append(p)
    )
    assert heard[0] == ("baseline", 0, 4) and heard[-1] == ("baseline", 4, 4)
    assert [done for _, done, _ in heard] == sorted(done for _, done, _ in heard)
    path = run_path(universe, None, None, tmp_path)
    path.write_text(json.dumps({**first, _id("test_nothing_mutated"): "cached"}))
    heard.clear()
    again = run_outcomes(
        universe, mutant=None, cache_dir=tmp_path, progress=lambda *p: heard.append(p)
    )
    assert again[_id("test_nothing_mutated")] == "cached"
    assert heard == []  # nothing ran, nothing to wait for


def test_release_ground_truth_compares_the_two_full_runs(tmp_path: Path) -> None:
    base = _universe()
    extra = Variant(
        test_id=_id("test_new"), file=FILE, cls=None, name="test_new", base="test_new", suite="c"
    )
    head = Universe(
        variants=[*base.variants[1:], extra], label="head", key="cases-v2"
    )  # test_relu_on_device is gone at head, test_new is new
    before = dict.fromkeys(map(_id, NAMES), "passed")
    after = {**before, _id("test_gelu_shape_on_device"): "failed", _id("test_new"): "failed"}
    del after[_id("test_relu_on_device")]
    for universe, outcomes in ((base, before), (head, after)):
        path = run_path(universe, None, None, tmp_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(outcomes))
    truth = release_ground_truth(
        base,
        head,
        name="2.13.0->2.14.1",
        changed_files=["torch/nn/functional.py"],
        head_python="/nonexistent/python",  # cached: nothing runs
        head_env={},
        run=False,
        cache_dir=tmp_path,
    )
    assert truth.kind == "release" and truth.method == "outcomes"
    changed, new = truth.events
    assert changed.failing == [_id("test_gelu_shape_on_device")]
    assert "3 variants in both runs, 1 only at head, 1 only at base" in changed.detail
    assert new.failing == [_id("test_new")]
    assert changed.changed_files == ["torch/nn/functional.py"]
    missing = release_ground_truth(
        base,
        head,
        name="x",
        changed_files=[],
        head_python="",
        head_env={},
        run=False,
        cache_dir=tmp_path / "empty",
    )
    assert missing.events == []


def test_a_release_ground_truth_under_specs_reads_only_runs_under_those_specs(
    tmp_path: Path,
) -> None:
    """A job's outcome under a spec is not pytest's raw one (the spec's modes, its edits such as
    a tolerance): runs under specs are cached apart, keyed by the specs' content."""
    base = _universe()
    head = Universe(variants=base.variants, label="head", key="cases-v2")
    spec = tmp_path / "spec.yaml"
    spec.write_text("version: 1\n")
    raw = dict.fromkeys(map(_id, NAMES), "failed")
    under_spec = {**raw, _id("test_relu_on_device"): "xfailed"}
    for universe in (base, head):
        for specs, outcomes in (((), raw), ((spec,), under_spec)):
            path = run_path(universe, None, None, tmp_path, specs)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(outcomes if universe is base else raw))
    assert run_path(base, None, None, tmp_path, [spec]) != run_path(base, None, None, tmp_path)

    def truth(*specs: Path) -> list[list[str]]:
        events = release_ground_truth(
            base,
            head,
            name="x",
            changed_files=[],
            head_python="",
            head_env={},
            run=False,
            cache_dir=tmp_path,
            specs=specs,
        ).events
        return [e.failing for e in events]

    assert truth() == [[], []]  # raw: failed under both torches
    assert truth(spec) == [[_id("test_relu_on_device")], []]  # under the spec: xfailed -> failed
    spec.write_text("version: 1\n# another spec\n")
    assert truth(spec) == []  # no run under this spec yet: nothing is said
