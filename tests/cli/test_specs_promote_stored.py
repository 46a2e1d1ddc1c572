"""`relay specs promote --runs` from stored ground-truth runs (``*.json.xz``): two runs of one
torch show its flaky variants; a file that is not a stored run is refused naming it."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evaluation.storedruns import RunHeader, StoredRun, write_run
from selector import Variant
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


# ---- two stored runs and their stored universe: no collection, no rerun ------------------

OPS = "spyre_stack/conformance/test_ops.py"
NOT_CLOSE = "Exception: Tensor-likes are not close!"
BUILD = "2.13.0+git0"


#: (op, dtype) -> outcome in run 1, in run 2, and the stored failure's first line
CASES: dict[tuple[str, str], tuple[str, str, str | None]] = {
    ("abs", "float16"): ("failed", "failed", NOT_CLOSE),  # floating, native: precision
    ("abs", "int64"): ("failed", "failed", NOT_CLOSE),  # exact dtype: a wrong result
    ("abs", "float64"): ("failed", "failed", NOT_CLOSE),  # never generated: unsupported
    ("abs", "int32"): ("passed", "passed", None),
    ("abs", "bfloat16"): ("passed", "failed", NOT_CLOSE),  # flaky
    ("_native_batch_norm_legit", "float16"): ("failed", "failed", NOT_CLOSE),  # on the host
    ("add", "float16"): ("failed", "failed", "NotImplementedError: aten::add.out"),
    ("add", "bool"): ("passed", "passed", None),  # passed, but never generated
}


def _stored_runs(folder: Path, ops_variant: Callable[[str, str], Variant]) -> list[Path]:
    """Two stored runs of one torch and the universe collected under it, beside them."""
    from evaluation.stepinputs import StoredUniverse, make_header, write_universe
    from selector import Universe

    variants = [ops_variant(op, dtype) for op, dtype in CASES]
    universe = Universe(variants=variants, label=f"bundled:x ({BUILD})", kind="bundled")
    header = make_header(name="2.13.0", torch_build=BUILD, backend_version="1", suites="bundled:x")
    write_universe(StoredUniverse(header=header, universe=universe), folder)
    paths = []
    for run in (1, 2):
        outcomes = {v.test_id: CASES[(v.op or "", v.dtype or "")][run - 1] for v in variants}
        messages = {
            v.test_id: m
            for v in variants
            if (m := CASES[(v.op or "", v.dtype or "")][2]) and outcomes[v.test_id] == "failed"
        }
        h = RunHeader("2.13.0", BUILD, "1", "bundled:x", "", f"2026-12-0{run}", run)
        paths.append(write_run(StoredRun(header=h, outcomes=outcomes, messages=messages), folder))
    return paths


def _header_counts(text: str, prefix: str) -> dict[str, int]:
    line = next(line for line in text.splitlines() if line.startswith(prefix))
    return {k: int(n) for k, n in re.findall(r"([a-z_]+(?: [a-z]+)?) (\d+)", line.split(": ")[-1])}


def test_two_stored_runs_give_the_header_its_runs_flaky_count_and_true_label_counts(
    tmp_path: Path, ops_variant: Callable[[str, str], Variant]
) -> None:
    """The stored runs' messages classify without a rerun (``--no-classify``; the universe
    stored beside them is used, nothing is collected); the header names the runs (torch build,
    run, date), the flaky variants measured between them, and label counts that a recount by
    dtype and device from the summary gives: precision only at a floating dtype computed on the
    device, unsupported wherever the device spec never generates the variant."""
    from backends.spyre import SPECS_DIR
    from cli import build_app
    from evaluation.labels import FLOATING, device_facts, record_node
    from testspecs.promote import count_label

    runs = _stored_runs(tmp_path, ops_variant)
    summary, spec = tmp_path / "summary.json", tmp_path / "promoted.yaml"
    args = ["specs", "promote", "--no-classify", "--summary", str(summary), "--spec", str(spec)]
    for run in runs:
        args += ["--runs", str(run)]
    result = CliRunner().invoke(build_app(), [*args, "--write"])
    assert result.exit_code == 0, result.output
    text = spec.read_text()
    assert f"# run: {runs[0].as_posix()} (torch {BUILD}, run 1, 2026-12-01)" in text
    assert f"# run: {runs[1].as_posix()} (torch {BUILD}, run 2, 2026-12-02)" in text
    assert (
        "# flaky (outcome differs between runs of one torch): "
        f"1 of 8 variants at torch {BUILD} (2 runs)"
    ) in text
    data = load_summary(summary.read_text())
    assert data["flaky"] == {BUILD: {"runs": 2, "variants": 8, "flaky": 1}}

    # the recount: each variant's label from its dtype and the device, not from the header
    variants = [ops_variant(op, dtype) for op, dtype in CASES]
    facts = device_facts(variants, spec=SPECS_DIR / "device.yaml")
    kinds = {
        (name, op, dtype): kind
        for name, node in data["tests"][f"${{TORCH_DEVICE_ROOT}}/{OPS}"].items()
        for op, dtype, _codes, kind, _reason in node["other"]
    }
    every: Counter[str] = Counter()
    under: Counter[str] = Counter()
    for v in variants:
        fact = facts[v.test_id]
        kind = kinds.get((record_node(v)[1], v.op, v.dtype), "ok")
        if not fact.generated and kind.startswith("fail/"):
            assert kind == "fail/unsupported", v.test_id
        if kind == "fail/precision":
            assert v.dtype in FLOATING and fact.on_device, v.test_id
        every[count_label(kind)] += 1
        if fact.generated:
            under[count_label(kind)] += 1
    assert every == {
        "mandatory_success": 2,
        "xfail precision": 1,
        "xfail error": 2,
        "xfail unsupported": 2,
        "xfail flaky": 1,
    }
    assert _header_counts(text, "# variants:") == every
    assert _header_counts(text, "# run under the bundled spec") == under
    assert "# run under the bundled spec (6 of 8):" in text
