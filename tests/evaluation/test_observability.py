"""The observability probe's variants (evaluation.observability): the traced tests that called
the mutated function, widened to every variant of their ops and modules (all dtypes and
templates), without the spec's skips, cut to the cap by an even stride."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evaluation.observability import callers, probe_ids
from selector.model import Universe, Variant
from upstream.undertest import RunEnvironment

F = "test/test_ops.py"


def _variant(
    name: str, *, op: str | None = None, module: str | None = None, skip: bool = False
) -> Variant:
    return Variant(
        test_id=f"{F}::T::{name}",
        file=F,
        cls="T",
        name=name,
        base=name.rsplit("_", 1)[0],
        suite="ops",
        op=op,
        module=module,
        decision="skip" if skip else "mandatory_success",
    )


UNIVERSE = Universe(
    variants=[
        _variant("test_a_add_float32", op="add"),
        _variant("test_b_add_float64", op="add"),
        _variant("test_a_add_int8", op="add", skip=True),
        _variant("test_a_mul_float32", op="mul"),
        _variant("test_m_Linear_float32", module="nn.Linear"),
        _variant("test_m_Linear_float64", module="nn.Linear"),
        _variant("test_plain"),
    ],
    label="tiny",
)


def test_the_callers_come_from_the_traced_map(tmp_path: Path) -> None:
    path = tmp_path / "map.json"
    tests = [f"{F}::T::test_a_add_float32", f"{F}::T::test_m_Linear_float32", f"{F}::T::test_plain"]
    path.write_text(
        json.dumps({"tests": tests, "calls": {"torch/f.py::g": [0, 2], "torch/f.py::h": [1]}})
    )
    assert callers(path, "torch/f.py::g") == [tests[0], tests[2]]
    assert callers(path, "torch/f.py::nobody") == []


def test_the_probe_widens_to_the_ops_and_modules_and_drops_skips() -> None:
    ids, total = probe_ids(UNIVERSE, [f"{F}::T::test_a_add_float32", f"{F}::T::test_plain"])
    assert (ids, total) == (
        [f"{F}::T::test_a_add_float32", f"{F}::T::test_b_add_float64", f"{F}::T::test_plain"],
        3,
    )
    ids, total = probe_ids(UNIVERSE, [f"{F}::T::test_m_Linear_float64", "gone::test"])
    assert total == 2 and all("Linear" in t for t in ids)
    assert probe_ids(UNIVERSE, []) == ([], 0)


def test_the_cap_keeps_an_even_stride() -> None:
    traced = [
        f"{F}::T::test_a_add_float32",
        f"{F}::T::test_m_Linear_float32",
        f"{F}::T::test_a_mul_float32",
    ]
    ids, total = probe_ids(UNIVERSE, traced, cap=2)
    assert total == 5 and len(ids) == 2 and ids == sorted(ids) and ids[0] != ids[1]


def test_the_twin_runs_only_what_failed_under_the_mutant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe runs its variants in the mutant's overlay, then only those that failed there in
    the twin's: a variant that fails under both is not broken by the fault, one that fails only
    under the mutant is."""
    import evaluation.observability as observability

    runs: list[tuple[str, list[str]]] = []
    results = {
        "mutant": {"a": "failed", "b": "passed", "c": "error"},
        "twin": {"a": "passed", "c": "error"},
    }

    def fake_run(universe: Universe, **kw: Any) -> dict[str, str]:
        which = kw["label"].removeprefix("probe ")
        runs.append((which, list(kw["tests"])))
        return {t: results[which][t] for t in kw["tests"]}

    monkeypatch.setattr(observability, "run_outcomes", fake_run)
    monkeypatch.setattr(
        observability, "probe_ids", lambda universe, traced, cap: (["a", "b", "c"], 3)
    )
    traced = tmp_path / "map.json"
    traced.write_text(json.dumps({"tests": ["t"], "calls": {"torch/f.py::g": [0]}}))
    env = RunEnvironment(python="python", env={}, torch_build="x")
    found = observability.probe(
        UNIVERSE,
        "torch/f.py::g",
        import_map=traced,
        mutant_env=env,
        twin_env=env,
        cache_dir=tmp_path,
        labels={"mutant": "mutant", "twin": "twin"},
    )
    assert runs == [("mutant", ["a", "b", "c"]), ("twin", ["a", "c"])]
    assert found.broken == {"a": ("passed", "failed")} and found.ran == ["a", "b", "c"]
    runs.clear()
    results["mutant"] = {"a": "passed", "b": "passed", "c": "passed"}
    assert not observability.probe(
        UNIVERSE,
        "torch/f.py::g",
        import_map=traced,
        mutant_env=env,
        twin_env=env,
        cache_dir=tmp_path / "again",
        labels={"mutant": "mutant", "twin": "twin"},
    ).observable
    assert runs == [("mutant", ["a", "b", "c"])]  # nothing failed: the twin runs nothing
