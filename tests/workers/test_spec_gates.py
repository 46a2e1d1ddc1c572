"""The bundled spec gates: a regression planted in the device path one of the repo's conformance
tests exercises turns a real `relay up` job red over HTTP, naming the failing test; the same
tests without the fault conclude green.

The regression is the mutation ground truth's own fault (``evaluation.mutations`` with
``RELAY_MUTANT=F.gelu``: ``torch.nn.functional.gelu`` shifted by 0.5 when called on the device),
loaded into the shard's pytest run. The tests run under the backend's bundled specs (the device
spec and the spec promoted from full runs), exactly the runner configuration the default planner
gives the workers; the labelled planner only fixes which tests run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from backends import get_backend

MODULES = "spyre_stack/conformance/test_modules.py::TestModulesPRIVATEUSE1"
GELU = f"{MODULES}::test_module_forward_compare_cpu_nn_GELU_spyre_float32"  # calls F.gelu
LINEAR = f"{MODULES}::test_module_forward_compare_cpu_nn_Linear_spyre_float32"  # does not


def plans() -> dict[str, Any]:
    backend = get_backend("spyre")
    runner = backend.runner_config(backend.default_specs)
    clean = {
        "shards": [[GELU, LINEAR]],
        "pytest_args": [*runner.pytest_args, "-p", "evaluation.mutations"],
        "env": runner.env,
        "preload": runner.preload,
    }
    planted = {**clean, "env": {**runner.env, "RELAY_MUTANT": "F.gelu"}}
    return {"clean": clean, "planted": planted}


@pytest.fixture(scope="module")
def gate_stack(
    tmp_path_factory: pytest.TempPathFactory, relay_up: Any, sample_runs: Any
) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("spec-gates")
    stack = relay_up.local(
        tmp,
        extra_env={
            "RELAY_RUNNER_ENABLED": "true",
            "RELAY_EVENT_HANDLERS": "[]",
            "RELAY_PLANNER": sample_runs.LABELLED_PLANNER,
            "RELAY_TEST_PLANS": str(sample_runs.write_plans(tmp, plans())),
            "RELAY_PER_TEST_TIMEOUT": "300",
        },
    )
    try:
        yield stack
    finally:
        stack.stop()


def run_plan(stack: Any, sample_runs: Any, name: str) -> tuple[dict[str, Any], list[Any]]:
    delivery_id = stack.submit(sample_runs.pr_body(name))
    job = stack.wait_job(delivery_id, timeout=900)
    detail = httpx.get(f"{stack.base_url}/api/v1/jobs/{job.id}", timeout=30).json()
    results = httpx.get(f"{stack.base_url}/api/v1/jobs/{job.id}/results", timeout=30).json()
    items = results["items"] if isinstance(results, dict) else results
    return detail, items


def test_a_planted_regression_turns_the_job_red_and_names_the_test(
    gate_stack: Any, sample_runs: Any
) -> None:
    detail, items = run_plan(gate_stack, sample_runs, "planted")
    by_id = {r["test_id"]: r for r in items}
    assert set(by_id) == {GELU, LINEAR}
    # both gate under the promoted spec: they passed in every full run
    assert {r["spec_mode"] for r in items} == {"mandatory_success"}
    assert by_id[GELU]["outcome"] == "failed", by_id[GELU]
    assert by_id[LINEAR]["outcome"] == "passed", by_id[LINEAR]
    assert detail["conclusion"] == "failure", json.dumps(detail)[:2000]
    failed = httpx.get(
        f"{gate_stack.base_url}/api/v1/jobs/{detail['id']}/results",
        params={"outcome": "failed"},
        timeout=30,
    ).json()
    failed_items = failed["items"] if isinstance(failed, dict) else failed
    assert [r["test_id"] for r in failed_items] == [GELU]


def test_the_same_tests_without_the_fault_conclude_green(gate_stack: Any, sample_runs: Any) -> None:
    detail, items = run_plan(gate_stack, sample_runs, "clean")
    assert {(r["test_id"], r["outcome"], r["spec_mode"]) for r in items} == {
        (GELU, "passed", "mandatory_success"),
        (LINEAR, "passed", "mandatory_success"),
    }
    assert detail["conclusion"] == "success"


def test_the_plans_use_the_bundled_specs() -> None:
    runner = get_backend("spyre").runner_config(get_backend("spyre").default_specs)
    assert any(Path(a).name == "specs" for a in runner.pytest_args)
    assert (Path(runner.env["TESTSPECS_SPECS"]) / "promoted.yaml").is_file()
