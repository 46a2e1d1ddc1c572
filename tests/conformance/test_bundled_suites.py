"""The bundled conformance suites: size, upstream-style ids, and runs that agree with the specs.

`make test` runs the small-suite checks; the full >= 20,000-variant count and the random samples
of 200 (on spyre against the backend's specs, and on the CPU where every template must be green)
collect all suites and are marked slow.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from inventory.build import build_inventory
from inventory.run import run_variants, sample
from inventory.sources import PROJECT_ROOT, BundledSuites

SPYRE_SPECS = [PROJECT_ROOT / "backends" / "spyre" / "specs"]
SEED = 20261129


def _failures(results):  # type: ignore[no-untyped-def]
    return [r for r in results if not r.as_declared]


def _gating(results):  # type: ignore[no-untyped-def]
    """The variants the promoted spec makes mandatory, with what they did: each must pass (a
    variant upstream skips may stay skipped: the runs the spec was promoted from saw it so)."""
    return {r.test_id: r.outcome for r in results if r.decision == "mandatory_success"}


@pytest.fixture(scope="module")
def small_spyre(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return build_inventory(
        BundledSuites(("errors", "modules")),
        backend="spyre",
        specs=SPYRE_SPECS,
        cache_dir=tmp_path_factory.mktemp("inventory"),
    )


def test_ids_follow_upstreams_scheme(small_spyre) -> None:  # type: ignore[no-untyped-def]
    assert small_spyre.errors == []
    assert {v.suite for v in small_spyre.variants} == {"errors", "modules"}
    assert {v.cls for v in small_spyre.variants} == {
        "TestErrorInputsPRIVATEUSE1",
        "TestModulesPRIVATEUSE1",
    }
    ids = {v.test_id for v in small_spyre.variants}
    assert (
        "spyre_stack/conformance/test_modules.py::TestModulesPRIVATEUSE1::"
        "test_module_forward_compare_cpu_nn_Linear_spyre_float32"
    ) in ids
    linear = [v for v in small_spyre.variants if v.module == "nn.Linear"]
    assert {(v.base, v.dtype) for v in linear} >= {
        ("test_module_forward_compare_cpu", "float32"),
        ("test_module_backward_compare_cpu", "float32"),
    }
    errors = [v for v in small_spyre.variants if v.suite == "errors"]
    assert all(v.op and v.dtype is None for v in errors)
    # every variant got a decision from the backend's specs
    assert {v.decision for v in small_spyre.variants} <= {
        "mandatory_success",
        "xfail",
        "xfail_strict",
        "skip",
    }


def test_small_sample_on_spyre_runs_as_the_specs_declare(small_spyre) -> None:  # type: ignore[no-untyped-def]
    chosen = sample(small_spyre, 30, seed=SEED)
    results = run_variants(chosen, backend="spyre", specs=SPYRE_SPECS)
    assert len(results) == 30
    assert _failures(results) == []
    assert "missing" not in {r.outcome for r in results}
    gating = _gating(results)
    # the bundled spec gates: at least half of the sample is mandatory (promoted from full runs
    # under the card's device model, which refuses about half of the universe), and every
    # mandatory variant passed
    assert len(gating) >= 15, Counter(r.decision for r in results)
    assert set(gating.values()) <= {"passed", "skipped"}, gating
    assert list(gating.values()).count("passed") >= 15, gating


# One variant of every template on the CPU backend: the templates themselves are sound when the
# "device" is the CPU (every comparison is then exact).
CPU_VARIANTS = [
    "test_common.py::TestCommonCPU::test_compare_cpu_add_cpu_float32",
    "test_common.py::TestCommonCPU::test_compare_cpu_reference_inputs_mul_cpu_int64",
    "test_common.py::TestCommonCPU::test_noncontiguous_matches_contiguous_sum_cpu_float16",
    "test_common.py::TestCommonCPU::test_dtype_coverage_abs_cpu",
    "test_out.py::TestOutCPU::test_out_argument_sub_cpu_float32",
    "test_out.py::TestOutCPU::test_out_resizes_empty_max_reduction_with_dim_cpu_float32",
    "test_variants.py::TestVariantsCPU::test_variant_consistency_mul_cpu_bfloat16",
    "test_gradients.py::TestGradientsCPU::test_backward_compare_cpu_sin_cpu_float32",
    "test_errors.py::TestErrorInputsCPU::test_error_inputs_match_cpu_cat_cpu",
    "test_modules.py::TestModulesCPU::test_module_forward_compare_cpu_nn_Linear_cpu_float32",
    "test_modules.py::TestModulesCPU::test_module_backward_compare_cpu_nn_Conv1d_cpu_float64",
]


def test_every_template_is_green_on_the_cpu() -> None:
    from selector.model import Variant

    variants = []
    for test_id in CPU_VARIANTS:
        file, cls, name = test_id.split("::")
        path = f"spyre_stack/conformance/{file}"
        variants.append(
            Variant(
                test_id=f"{path}::{cls}::{name}", file=path, cls=cls, name=name, base=name, suite=""
            )
        )
    results = run_variants(variants, backend="cpu", per_file=False)
    assert {r.test_id: r.outcome for r in results} == {v.test_id: "passed" for v in variants}


@pytest.fixture(scope="module")
def full_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("inventory-full")


@pytest.fixture(scope="module")
def full_spyre(full_cache: Path):  # type: ignore[no-untyped-def]
    return build_inventory(
        BundledSuites(), backend="spyre", specs=SPYRE_SPECS, cache_dir=full_cache
    )


@pytest.mark.slow
def test_at_least_20000_spyre_variants_by_suite_op_and_dtype(full_spyre, full_cache: Path) -> None:  # type: ignore[no-untyped-def]
    from cli import build_app

    assert full_spyre.errors == []
    assert len(full_spyre.variants) >= 20_000
    assert len(full_spyre.runnable()) >= 20_000, Counter(v.decision for v in full_spyre.variants)
    args = ["tests", "count", "--json", "--specs", str(SPYRE_SPECS[0])]
    result = CliRunner().invoke(build_app(), [*args, "--cache-dir", str(full_cache)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # stderr may hold the collection's progress
    assert data["total"] == len(full_spyre.variants)
    assert sum(data["by_suite"].values()) == data["total"]
    assert sum(data["by_dtype"].values()) == data["total"]
    assert sum(data["by_op"].values()) + data["without_op_or_module"] == data["total"]
    assert set(data["by_suite"]) == {"common", "out", "variants", "gradients", "errors", "modules"}
    assert data["by_op"]["add"] > 10 and data["by_dtype"]["float16"] > 1000


@pytest.mark.slow
def test_random_200_spyre_variants_run_as_the_specs_declare(full_spyre) -> None:  # type: ignore[no-untyped-def]
    results = run_variants(sample(full_spyre, 200, seed=SEED), specs=SPYRE_SPECS)
    assert len(results) == 200
    assert _failures(results) == []
    gating = _gating(results)
    assert gating, Counter(r.decision for r in results)
    assert set(gating.values()) <= {"passed", "skipped"}, gating


@pytest.mark.slow
def test_random_200_cpu_variants_are_green(tmp_path: Path) -> None:
    inv = build_inventory(BundledSuites(), backend="cpu", cache_dir=tmp_path)
    results = run_variants(sample(inv, 200, seed=SEED), backend="cpu")
    assert len(results) == 200
    assert _failures(results) == []
