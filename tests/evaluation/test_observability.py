"""The observability probe's variants (evaluation.observability): the traced tests that called
the mutated function, widened to every variant of their ops and modules (all dtypes and
templates), without the spec's skips, cut to the cap by an even stride."""

from __future__ import annotations

import json
from pathlib import Path

from evaluation.observability import callers, probe_ids
from selector.model import Universe, Variant

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
