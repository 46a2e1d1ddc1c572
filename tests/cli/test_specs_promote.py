"""`relay specs promote --runs`: run files of real bundled variants -> summary -> spec, with the
failing variants run once more on the device under device.yaml's tolerances for their class.

The two run files are written here (outcomes of real test ids); what the rerun says is the
device's: the GRUCell module has no kernel on spyre, the Linear module passes once the spec's
float32 tolerance applies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from testspecs.loader import load_file
from testspecs.promote import load_summary

MODULES = "spyre_stack/conformance/test_modules.py::TestModulesPRIVATEUSE1"
GRU = f"{MODULES}::test_module_forward_compare_cpu_nn_GRUCell_spyre_float32"
LINEAR = f"{MODULES}::test_module_forward_compare_cpu_nn_Linear_spyre_float32"
RELU = f"{MODULES}::test_module_forward_compare_cpu_nn_ReLU_spyre_float32"
FILE = "${TORCH_DEVICE_ROOT}/spyre_stack/conformance/test_modules.py"


@pytest.mark.slow
def test_promote_from_runs_classifies_by_rerunning_on_the_device(tmp_path: Path) -> None:
    from cli import build_app

    runs = []
    for name, relu in (("a.json", "passed"), ("b.json", "failed")):
        run = tmp_path / name
        run.write_text(json.dumps({GRU: "failed", LINEAR: "failed", RELU: relu}))
        runs += ["--runs", str(run)]
    summary, spec = tmp_path / "summary.json", tmp_path / "promoted.yaml"
    args = ["specs", "promote", *runs, "--summary", str(summary), "--spec", str(spec), "--write"]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    data = load_summary(summary.read_text())
    node = data["tests"][FILE]["TestModules::test_module_forward_compare_cpu"]
    assert node["ok"] == 1  # Linear: its failures do not recur under the spec's tolerance
    assert sorted((row[0], row[2], row[3]) for row in node["other"]) == [
        ("module:nn.GRUCell", "ff/f", "fail/unsupported"),
        ("module:nn.ReLU", "pf/p", "flaky"),
    ]
    entries = load_file(spec).document.files[0].tests
    gru = next(e for e in entries if e.ext and e.ext.modules == ["nn.GRUCell"])
    assert gru.effective_mode == "xfail" and gru.reason == (
        "unsupported op on the device (NotImplementedError)"
    )
    relu = next(e for e in entries if e.ext and e.ext.modules == ["nn.ReLU"])
    assert relu.tags == ["flaky"] and relu.effective_mode == "xfail"
    assert entries[-1].effective_mode == "mandatory_success"


def test_the_summary_names_runs_under_this_folder_relatively(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run kept under the working folder (``var/eval/runs``) is named relative to it in the
    committed summary, never by the host's absolute path; a run elsewhere keeps its path."""
    from cli.specs_promote import _shown

    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere" / "run.json"
    work.mkdir()
    monkeypatch.chdir(work)
    assert _shown(work / "var" / "eval" / "runs" / "k-baseline.json") == (
        "var/eval/runs/k-baseline.json"
    )
    assert _shown(elsewhere) == elsewhere.as_posix()
