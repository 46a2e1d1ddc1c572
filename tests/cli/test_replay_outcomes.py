"""What `relay replay --run` reports once its job completed: every changed outcome among the
selected variants and every variant new at the head, each failure with its message and the
selection's reasons (the change units), read from the jobs API's pages (here its answers)."""

from __future__ import annotations

from typing import Any

from cli.replay_outcomes import changed_outcomes, report_lines

NODE = "spyre_stack/conformance/test_common.py::TestCommonPRIVATEUSE1::"
POLAR = f"{NODE}test_compare_cpu_linalg_polar_spyre_float32"
ADD = f"{NODE}test_compare_cpu_add_spyre_float16"
MUL = f"{NODE}test_compare_cpu_mul_spyre_float16"
SUB = f"{NODE}test_compare_cpu_sub_spyre_float16"
WRAPPED = "wrappers/test_common_spyre.py::TestCommonPRIVATEUSE1::test_compare_cpu_sub_spyre_float16"

SELECTED = [
    {"test_id": POLAR, "flag": "new-at-head", "reasons": ["new at head: opinfo:linalg.polar"]},
    {
        "test_id": ADD,
        "flag": None,
        "reasons": ["kernel: native_functions:add.Tensor", "behaviour: behaviour:add", "a", "b"],
    },
    {"test_id": MUL, "flag": None, "reasons": ["kernel: native_functions:mul.Tensor"]},
    {"test_id": SUB, "flag": None, "reasons": ["decomposition: torch/_refs/__init__.py::sub"]},
]
RESULTS = [
    {"test_id": POLAR, "outcome": "failed", "message": "AssertionError: tensors differ\nmore"},
    {"test_id": ADD, "outcome": "failed", "message": "AssertionError: add"},
    {"test_id": MUL, "outcome": "passed", "message": None},
    {"test_id": WRAPPED, "outcome": "xpassed", "message": ""},  # run through its wrapper module
]


def api(pages: dict[str, list[dict[str, Any]]]) -> Any:
    """The relay's GET, two items a page (the report follows next_cursor)."""
    asked: list[tuple[str, dict[str, Any]]] = []

    def get(path: str, **params: Any) -> dict[str, Any]:
        asked.append((path, params))
        start = int(params.get("cursor") or 0)
        items = pages[path][start : start + 2]
        more = start + 2 < len(pages[path])
        return {"items": items, "next_cursor": str(start + 2) if more else None}

    get.asked = asked  # type: ignore[attr-defined]
    return get


def test_changed_outcomes_name_the_units_that_selected_them() -> None:
    get = api({"/api/v1/jobs/3/selection/tests": SELECTED, "/api/v1/jobs/3/results": RESULTS})
    found = changed_outcomes(get, 3)
    assert [(r["test_id"], r["outcome"]) for r in found["changed"]] == [
        (ADD, "failed"),
        (WRAPPED, "xpassed"),
    ]
    assert found["changed"][1]["reasons"] == ["decomposition: torch/_refs/__init__.py::sub"]
    assert [(r["test_id"], r["outcome"]) for r in found["new"]] == [(POLAR, "failed")]
    assert ("/api/v1/jobs/3/selection/tests", {"limit": 5000, "kind": "selected"}) in get.asked
    lines = report_lines(found, "2.14.1+cu130")
    assert lines == [
        "changed outcomes under torch 2.14.1+cu130: 2 of the selected variants",
        f"  failed   {ADD}",
        "           message: AssertionError: add",
        "           selected by: kernel: native_functions:add.Tensor; behaviour: behaviour:add; "
        "a (+1 more)",
        f"  xpassed  {WRAPPED}",
        "           selected by: decomposition: torch/_refs/__init__.py::sub",
        "new at 2.14.1+cu130 (not collectable under the base): 1 variant(s) ran: 1 failed",
        f"  failed   {POLAR}",
        "           message: AssertionError: tensors differ",
        "           selected by: new at head: opinfo:linalg.polar",
    ]
