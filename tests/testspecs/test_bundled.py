"""The bundled backend's specs (backends/spyre/specs/) stay true to the spyre_stack op table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from backends import get_backend
from backends.spyre import specgen as spyre_gen
from spyre_stack import optable
from testspecs.compiled import CompiledSpec
from testspecs.lint import lint
from testspecs.loader import load_files
from testspecs.merge import merge
from testspecs.resolve import resolve

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "backends" / "spyre" / "specs"
COMMON = "spyre_stack/conformance/test_common.py::TestCommonPRIVATEUSE1"


def test_device_spec_is_generated_from_the_op_table() -> None:
    fresh = spyre_gen.generate_text(optable.load(), spyre_gen._opinfos())
    assert spyre_gen.OUTPUT.read_text() == fresh, "stale: run python -m backends.spyre.specgen"


def test_generated_spec_follows_table_entries() -> None:
    class Entry:
        def __init__(self, status: str, dtypes: tuple[str, ...]) -> None:
            self.status, self.dtypes = status, dtypes

    class Table:
        version, default_status = 1, "fallback"
        entries = {"add": Entry("native", ("float16", "int64")), "qr": Entry("unsupported", ())}

        def entry(self, op: str) -> Entry | None:
            return self.entries.get(op)

        def status(self, op: str) -> str:
            e = self.entry(op)
            return e.status if e else "fallback"

    text = spyre_gen.generate_text(
        Table(), [("add", "add"), ("linalg.qr", "qr"), ("nn.functional.gelu", "gelu")]
    )
    assert "      - {name: add, dtypes: [float16, int64]}  # native\n" in text
    assert "      - nn.functional.gelu  # fallback\n" in text
    assert "linalg.qr  #" not in text and "never generated: linalg.qr" in text


def test_bundled_specs_lint_clean() -> None:
    assert lint([SPECS], device_root=ROOT) == []


def test_bundled_decisions() -> None:
    cs = CompiledSpec(merge(load_files([SPECS])).document)
    d = resolve(cs, f"{COMMON}::test_compare_cpu_add_spyre_float32", op="add")
    assert d.run and (d.atol, d.rtol) == (0.01, 0.002)
    unsupported = optable.load().by_status("unsupported")
    assert unsupported
    skipped = resolve(cs, f"{COMMON}::test_compare_cpu_linalg_qr_spyre_float32", op="linalg.qr")
    assert not skipped.run and skipped.rule == "op linalg.qr is not in global.supported_ops"
    # a native op's dtypes come from the table: float64 is not among add's
    assert not resolve(cs, f"{COMMON}::test_compare_cpu_add_spyre_float64", op="add").run


def test_plugin_on_the_real_backend(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-p",
        "spyre_stack.testing.pytest_plugin",
        "-p",
        "testspecs.pytest_plugin",
        "--spec",
        str(SPECS),
        "--spec-report",
        str(report),
        str(ROOT / "spyre_stack" / "conformance" / "test_common.py"),
        "-k",
        "test_compare_cpu_neg_spyre or test_compare_cpu_linalg_qr_spyre",
    ]
    # the backend's run environment, as its runner has it (the one-time fp32 -> fp16 warning
    # silenced: this project's pytest settings turn warnings into errors)
    env = {**os.environ, **get_backend("spyre").run_env}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
    records = {r["nodeid"].rpartition("::")[2]: r for r in json.loads(report.read_text())["tests"]}
    assert proc.returncode == 0, proc.stdout[-3000:]
    # unsupported op: never generated; native op: one variant per table dtype
    assert sorted(records) == [
        f"test_compare_cpu_neg_spyre_{d}" for d in sorted(optable.load().entry("neg").dtypes)
    ]
    # promoted from the full run (backends/spyre/specs/promoted.yaml): neg passed there in every
    # dtype, so it gates now, and it passes
    assert {r["mode"] for r in records.values()} == {"mandatory_success"}
    assert {r["outcome"] for r in records.values()} == {"passed"}
