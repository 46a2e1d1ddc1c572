"""`relay specs promote --runs` from stored ground-truth runs (``*.json.xz``): two runs of one
torch show its flaky variants; a file that is not a stored run is refused naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from evaluation.storedruns import RunHeader, StoredRun, write_run
from testspecs.promote import load_summary

MODULES = "spyre_stack/conformance/test_modules.py::TestModulesPRIVATEUSE1"
LINEAR = f"{MODULES}::test_module_forward_compare_cpu_nn_Linear_spyre_float32"
RELU = f"{MODULES}::test_module_forward_compare_cpu_nn_ReLU_spyre_float32"
FILE = "${TORCH_DEVICE_ROOT}/spyre_stack/conformance/test_modules.py"


@pytest.mark.slow
def test_promote_reads_two_stored_runs_of_a_torch(tmp_path: Path) -> None:
    from cli import build_app

    args = ["specs", "promote", "--no-classify"]
    for run, relu in ((1, "passed"), (2, "failed")):
        header = RunHeader(
            torch_version="2.13.0",
            torch_build="2.13.0+git0",
            backend_version="1",
            suites="bundled:x",
            suites_commit="",
            date="2026-12-06",
            run=run,
        )
        outcomes = {LINEAR: "passed", RELU: relu}
        args += ["--runs", str(write_run(StoredRun(header=header, outcomes=outcomes), tmp_path))]
    summary, spec = tmp_path / "summary.json", tmp_path / "promoted.yaml"
    args += ["--summary", str(summary), "--spec", str(spec)]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    node = load_summary(summary.read_text())["tests"][FILE][
        "TestModules::test_module_forward_compare_cpu"
    ]
    assert node["ok"] == 1
    assert [(row[0], row[2], row[3]) for row in node["other"]] == [
        ("module:nn.ReLU", "pf", "flaky")
    ]

    bad = tmp_path / "2.14.1-run1.json.xz"
    bad.write_bytes(b"not xz")
    result = CliRunner().invoke(build_app(), ["specs", "promote", "--runs", str(bad)])
    assert result.exit_code == 2
    assert f"error: {bad}: not xz-compressed JSON" in result.output
